"""Dates a query names (:func:`bot.ranking.query_dates`): single days, spans of days,
months and years."""

from __future__ import annotations

from datetime import date

import pytest

from bot.ranking import date_match, query_dates


def _covers(text: str, first: date, last: date) -> bool:
    ranges = query_dates(text)
    return all(
        date_match(date.fromordinal(d), ranges, slack_days=0) == 1.0
        for d in range(first.toordinal(), last.toordinal() + 1)
    )


@pytest.mark.parametrize(
    "text",
    [
        "Where was John between August 11 and August 15 2023?",
        "What did she do between August 11 and 15, 2023?",
        "August 11-15, 2023",
        "from 11 to 15 August 2023",
        "11th - 15th of August 2023",
    ],
)
def test_a_span_of_days_covers_every_day_of_it(text: str) -> None:
    # regression: "between August 11 and August 15 2023" read only the 15th
    assert _covers(text, date(2023, 8, 11), date(2023, 8, 15))
    assert date_match(date(2023, 8, 10), query_dates(text), slack_days=0) == 0.0


def test_a_span_across_months_and_years() -> None:
    assert _covers("11 July - 2 August 2023", date(2023, 7, 11), date(2023, 8, 2))
    assert _covers("28 December to 3 January 2024", date(2023, 12, 28), date(2024, 1, 3))


def test_spans_that_are_no_span_are_not_read_as_one() -> None:
    # backwards within a month, or months apart: only the day that reads on its own
    assert query_dates("between 5 and 3 May 2023") == [(date(2023, 5, 3), date(2023, 5, 3))]
    assert query_dates("March 1 - August 30 2023") == [(date(2023, 8, 30), date(2023, 8, 30))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What happened on 8 May 2023?", [(date(2023, 5, 8), date(2023, 5, 8))]),
        ("the session at 1:56 pm on 8 May, 2023", [(date(2023, 5, 8), date(2023, 5, 8))]),
        ("on October 3rd, 2023", [(date(2023, 10, 3), date(2023, 10, 3))]),
        ("on 2023-10-03", [(date(2023, 10, 3), date(2023, 10, 3))]),
        ("in October 2023", [(date(2023, 10, 1), date(2023, 10, 31))]),
        ("in 2022", [(date(2022, 1, 1), date(2022, 12, 31))]),
        ("When did Caroline go to the LGBTQ support group?", []),
    ],
)
def test_single_days_months_and_years_read_as_before(
    text: str, expected: list[tuple[date, date]]
) -> None:
    assert query_dates(text) == expected


def test_local_days_follow_the_owners_zone_across_dst_and_half_hours() -> None:
    from zoneinfo import ZoneInfo

    from bot.owner_days import local_days

    stamps = [
        "2026-03-08T06:30:00.000Z",  # New York: 01:30 EST on March 8 (before the switch)
        "2026-03-09T03:30:00.000Z",  # New York: 23:30 EDT on March 8 (after it)
        "2026-03-09T04:30:00+00:00",  # New York: 00:30 EDT on March 9
        "",  # no timestamp
        "not a timestamp",
    ]
    days = local_days(stamps, ZoneInfo("America/New_York"))
    assert days == [date(2026, 3, 8), date(2026, 3, 8), date(2026, 3, 9), None, None]
    # a half-hour zone: 18:40 UTC is 00:10 the next day in India (+05:30)
    assert local_days(["2026-03-01T18:40:00Z"], ZoneInfo("Asia/Kolkata")) == [date(2026, 3, 2)]
    assert local_days(["2026-03-01T18:40:00Z"], None) == [date(2026, 3, 1)]
