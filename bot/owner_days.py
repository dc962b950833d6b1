"""Days of the owner's calendar (``owner.timezone``) against the UTC timestamps we store.

Every timestamp in a transcript and in the index is UTC. Whatever shows a date to the
owner or takes one from them (the recall tool, ``/search``, ``my-agent search``, the
offline brain's recall lines) speaks in the owner's days: as UTC days, an evening
conversation in New York (after 19:00, already the next day in UTC) was dated the day
after and was not found for its own day.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from bot.events import iso
from bot.search.results import InvalidFilter, iso_date


def owner_zone(config: object | None) -> ZoneInfo:
    """The owner's time zone of an ``AppConfig`` (UTC without one)."""
    owner = getattr(config, "owner", None)
    return ZoneInfo(getattr(owner, "timezone", None) or "UTC")


def local_day(timestamp: str, zone: ZoneInfo) -> str:
    """The owner's calendar day (in ``zone``) of a stored UTC timestamp."""
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return timestamp[:10]
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(zone).date().isoformat()


def local_time(timestamp: str, zone: ZoneInfo) -> str:
    """A stored UTC timestamp as the owner's local time with its UTC offset
    (``2026-03-01T20:30:00-05:00``); text that is no timestamp is returned as it is."""
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return timestamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(zone).isoformat(timespec="seconds")


def day_bound(value: str | None, field: str, zone: ZoneInfo, *, end: bool = False) -> str | None:
    """A date filter given by the owner (a day of their calendar, or a timestamp) as the
    UTC timestamp the search compares with: the day's first moment, or with ``end`` its
    last. None for no bound; ``InvalidFilter`` (a ValueError naming ``field``) for a
    value that is no date."""
    text = iso_date(value, field)
    if text is None:
        return None
    if len(text) <= 10:
        day = date.fromisoformat(text) + timedelta(days=1 if end else 0)
        moment = datetime.combine(day, time(), tzinfo=zone)
        return iso(moment - timedelta(milliseconds=1) if end else moment)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return iso(moment if moment.tzinfo else moment.replace(tzinfo=zone))


def day_range(
    start: str | None,
    end: str | None,
    zone: ZoneInfo,
    names: tuple[str, str] = ("date_from", "date_to"),
) -> tuple[str | None, str | None]:
    """Both bounds of an owner's date range (:func:`day_bound`), the end inclusive. A
    range that ends before it starts is refused naming both dates as given: once turned
    into UTC bounds, adjacent days share a UTC date and it silently matched nothing."""
    first, last = iso_date(start, names[0]), iso_date(end, names[1])
    if first and last and first[:10] > last[:10]:
        raise InvalidFilter(f"{names[0]} {first} is after {names[1]} {last}")
    return day_bound(first, names[0], zone), day_bound(last, names[1], zone, end=True)
