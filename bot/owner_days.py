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
from bot.moments import parse_moment
from bot.ranking import parse_day


def owner_zone(config: object | None) -> ZoneInfo:
    """The owner's time zone of an ``AppConfig`` (UTC without one)."""
    owner = getattr(config, "owner", None)
    return ZoneInfo(getattr(owner, "timezone", None) or "UTC")


def local_day(timestamp: str, zone: ZoneInfo) -> str:
    """The owner's calendar day (in ``zone``) of a stored UTC timestamp."""
    moment = local_moment(timestamp, zone)
    return timestamp[:10] if moment is None else moment.date().isoformat()


def local_days(timestamps: list[str], zone: ZoneInfo | None) -> list[date | None]:
    """:func:`local_day` for many ``timestamps`` at once, as dates (the search's date
    priors read every candidate's): ``zone`` None is UTC, None where a timestamp is not
    one. The zone's offset is looked up once per UTC hour."""
    if zone is None or zone.key in ("UTC", "Etc/UTC"):
        return [parse_day(t) for t in timestamps]
    offsets: dict[str, timedelta | None] = {}
    out: list[date | None] = []
    for text in timestamps:
        hour = text[:13]
        try:
            offset = offsets.get(hour)
            if offset is None:
                moment = datetime.fromisoformat(hour + ":00").replace(tzinfo=UTC)
                offset = offsets[hour] = moment.astimezone(zone).utcoffset()
            out.append((datetime.fromisoformat(text[:16]) + (offset or timedelta())).date())
        except ValueError:
            out.append(parse_day(text))
    return out


def local_moment(timestamp: str, zone: ZoneInfo) -> datetime | None:
    """A stored UTC timestamp as an aware datetime in ``zone``; None when it is none."""
    moment = parse_moment(timestamp)
    return None if moment is None else moment.astimezone(zone)


def local_time(timestamp: str, zone: ZoneInfo) -> str:
    """A stored UTC timestamp as the owner's local time with its UTC offset
    (``2026-03-01T20:30:00-05:00``); text that is no timestamp is returned as it is."""
    moment = local_moment(timestamp, zone)
    return timestamp if moment is None else moment.isoformat(timespec="seconds")


def day_bound(value: str | None, field: str, zone: ZoneInfo, *, end: bool = False) -> str | None:
    """A date filter given by the owner (a day of their calendar, or a timestamp) as the
    UTC timestamp the search compares with: the day's first moment, or with ``end`` its
    last. None for no bound; ``InvalidFilter`` (a ValueError naming ``field``) for a
    value that is no date."""
    from bot.search.results import iso_date  # here: bot.search itself reads this module

    text = iso_date(value, field)
    if text is None:
        return None
    try:
        if len(text) <= 10:
            day = date.fromisoformat(text) + timedelta(days=1 if end else 0)
            moment = datetime.combine(day, time(), tzinfo=zone)
            return iso(moment - timedelta(milliseconds=1) if end else moment)
        # not bot.moments.parse_moment: a time the owner gave without an offset is
        # theirs (owner.timezone), not UTC
        moment = datetime.fromisoformat(text)
        return iso(moment if moment.tzinfo else moment.replace(tzinfo=zone))
    except OverflowError:
        # the calendar's edge ("to 9999-12-31", "from 0001-01-01" east of UTC) has no
        # day after it or no UTC moment: it bounds nothing (it was an internal error,
        # exit 70, and "failed internally" to the model)
        return _LAST_MOMENT if end else _FIRST_MOMENT


_FIRST_MOMENT = "0001-01-01T00:00:00.000Z"
_LAST_MOMENT = "9999-12-31T23:59:59.999Z"


def day_range(
    start: str | None,
    end: str | None,
    zone: ZoneInfo,
    names: tuple[str, str] = ("date_from", "date_to"),
) -> tuple[str | None, str | None]:
    """Both bounds of an owner's date range (:func:`day_bound`), the end inclusive. A
    range that ends before it starts is refused naming both dates as given: once turned
    into UTC bounds, adjacent days share a UTC date and it silently matched nothing.

    The bounds are compared as the moments they name (a bare day from its first moment
    to its last, in ``zone``; a timestamp at its own offset, or in ``zone`` without one).
    Before session 41 the values were compared as text first, so a timestamp at another
    offset against a bare day (``2026-03-02T01:00+05:00`` to ``2026-03-01``: 15:00 of
    the 1st in New York) was refused as "after" its end."""
    from bot.search.results import InvalidFilter, iso_date  # (as in day_bound)

    first, last = iso_date(start, names[0]), iso_date(end, names[1])
    low, high = day_bound(first, names[0], zone), day_bound(last, names[1], zone, end=True)
    # both are UTC in one format (bot.events.iso, or the calendar's edges): as text
    # they compare as moments
    if low and high and low > high:
        raise InvalidFilter(f"{names[0]} {first} is after {names[1]} {last}")
    return low, high
