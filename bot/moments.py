"""Stored ISO-8601 times read back as aware datetimes.

Every time we store is UTC ISO-8601 (:func:`bot.events.iso`: ``2026-03-01T20:30:00.000Z``),
in transcripts, party files, the index, ``state.db`` and the spool. Before session 42
about fifteen places read one back by hand, each its own way: some took a stamp without
an offset as UTC, others kept it naive (and raised TypeError on the first subtraction
from an aware now), some raised ValueError on a malformed one where a line of a file
the owner may edit reached them. :func:`parse_moment` is the one reading;
:func:`require_moment` the same for a caller that must fail loudly.

A stamp without an offset is UTC here. Where one means another zone (a date filter the
owner typed, in their own time: :func:`bot.owner_days.day_bound`), the caller reads it
itself.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_moment(text: object) -> datetime | None:
    """The aware datetime of a stored ISO-8601 ``text`` (``Z`` or any offset; none read
    as UTC); None when it is no such text (malformed, empty, or not a ``str``)."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def require_moment(text: object) -> datetime:
    """:func:`parse_moment` for a time that must be one (our own stores' rows): a
    ValueError naming ``text`` when it is not."""
    moment = parse_moment(text)
    if moment is None:
        raise ValueError(f"not an ISO-8601 time: {text!r}")
    return moment
