"""Stored ISO-8601 times read back (bot/moments.py): the one reading of every place
that turns a stored stamp into an aware datetime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from bot.events import iso
from bot.moments import parse_moment, require_moment

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "2026-03-01T12:00:00.000Z",  # as bot.events.iso writes them
        "2026-03-01T12:00:00Z",
        "2026-03-01T12:00:00+00:00",  # datetime.isoformat's (the spool's received_at)
        "2026-03-01T13:00:00+01:00",
        "2026-03-01T07:00:00-05:00",
        "2026-03-01T12:00:00",  # no offset: UTC
        "2026-03-01T12:00",
    ],
)
def test_a_stamp_is_read_as_the_moment_it_names(text: str) -> None:
    moment = parse_moment(text)
    assert moment == NOON
    assert moment is not None and moment.tzinfo is not None
    assert require_moment(text) == NOON


def test_a_stamp_without_an_offset_is_utc_and_aware() -> None:
    moment = parse_moment("2026-03-01T12:00:00.123")
    assert moment is not None and moment.utcoffset() == timedelta(0)
    assert iso(moment) == "2026-03-01T12:00:00.123Z"


def test_an_offset_is_kept_as_given() -> None:
    moment = parse_moment("2026-03-01T13:00:00+01:00")
    assert moment is not None and moment.utcoffset() == timedelta(hours=1)
    assert moment.tzinfo == timezone(timedelta(hours=1))


def test_what_we_write_reads_back() -> None:
    moment = datetime(2026, 11, 28, 3, 46, 5, 123000, tzinfo=UTC)
    assert parse_moment(iso(moment)) == moment
    assert parse_moment(moment.isoformat()) == moment


@pytest.mark.parametrize(
    "value",
    [
        "",
        " ",
        "garbage",
        "2026-02-30T10:00:00Z",  # no such day (passes a text comparison with a bound)
        "2026-13-01T00:00:00Z",
        "12:00",
        "2026-03-01T25:00",
    ],
)
def test_a_malformed_stamp_is_none(value: str) -> None:
    assert parse_moment(value) is None
    with pytest.raises(ValueError, match="not an ISO-8601 time"):
        require_moment(value)


@pytest.mark.parametrize("value", [None, 1772366400, 1.5, b"2026-03-01T12:00:00Z", NOON, ["x"]])
def test_what_is_no_text_is_none(value: object) -> None:
    # a JSON line or a row may hold anything: a number, null, a list
    assert parse_moment(value) is None
    with pytest.raises(ValueError):
        require_moment(value)
