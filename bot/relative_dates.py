"""Relative dates in the past, read from the owner's today ("yesterday", "3 days ago",
"last week", "last Friday", "over the weekend"): the last resort of
:func:`bot.named_dates.query_dates`, when a query names no day, month or year.

Apart from the calendar dates because these need the owner's today (in their time zone)
and read differently: a span around a count of units ago, a weekday looked back to.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

DateRange = tuple[date, date]

_COUNT = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_COUNT.update({"seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "couple": 2})
_N = r"(?P<n>\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple of)"
_WEEKDAYS = [name.lower() for name in calendar.day_name]
_RELATIVE = re.compile(
    r"\b(?:(?P<before>the day before yesterday)|(?P<today>today|tonight|this morning|"
    r"this afternoon|this evening)|(?P<yesterday>yesterday|last night)|"
    rf"{_N}\s+(?P<unit>days?|weeks?|months?|years?)\s+ago|"
    r"(?P<span>last|this|past)\s+(?P<period>week|month|year|weekend)\b(?!\s+of\b)|"
    r"(?:over|on|at|during)\s+the\s+weekend\b(?P<plain_weekend>)|"
    rf"(?P<on>last|on|this|past)\s+(?P<weekday>{'|'.join(_WEEKDAYS)})s?)\b",
    re.I,
)


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _COUNT.get(word, 1)


def relative_dates(text: str, today: date) -> list[DateRange]:
    """The past the words name relative to ``today`` (module docstring)."""
    out: list[DateRange] = []
    for m in _RELATIVE.finditer(text):
        if m["before"]:
            out.append((today - timedelta(days=2),) * 2)
        elif m["today"]:
            out.append((today, today))
        elif m["yesterday"]:
            out.append((today - timedelta(days=1),) * 2)
        elif m["unit"]:
            n, unit = _count(m["n"]), m["unit"].lower().rstrip("s")
            days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n
            around = {"day": 0, "week": 3, "month": 7, "year": 30}[unit]
            day = today - timedelta(days=days)
            out.append((day - timedelta(days=around), day + timedelta(days=around)))
        elif m["period"]:
            out.append(_period(m["span"].lower(), m["period"].lower(), today))
        elif m["plain_weekend"] is not None:
            out.append(_period("last", "weekend", today))
        elif m["weekday"]:
            back = (today.weekday() - _WEEKDAYS.index(m["weekday"].lower())) % 7
            if back == 0 and m["on"].lower() in ("last", "past"):
                back = 7  # "last Monday" on a Monday is a week ago
            out.append((today - timedelta(days=back),) * 2)
    return out


def _period(span: str, period: str, today: date) -> DateRange:
    """ "last / this / past" week, month, year or weekend before ``today``."""
    if period == "weekend":  # the latest Saturday and Sunday up to today
        saturday = today - timedelta(days=(today.weekday() - 5) % 7)
        return saturday, min(today, saturday + timedelta(days=1))
    if span == "past":  # the last seven / thirty / 365 days
        length = {"week": 7, "month": 30, "year": 365}[period]
        return today - timedelta(days=length), today
    if period == "week":  # Monday to Sunday
        monday = today - timedelta(days=today.weekday())
        if span == "this":
            return monday, today
        return monday - timedelta(days=7), monday - timedelta(days=1)
    if period == "month":
        if span == "this":
            return today.replace(day=1), today
        last = today.replace(day=1) - timedelta(days=1)
        return last.replace(day=1), last
    if span == "this":
        return date(today.year, 1, 1), today
    return date(today.year - 1, 1, 1), date(today.year - 1, 12, 31)
