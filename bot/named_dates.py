"""The dates a search query names, read as ranges of days (pure functions, no I/O).

A query's dates become a prior on the turns dated inside them (:mod:`bot.search.fusion`,
the learned ranker's date feature, the conversation list's date term). What is read:

- single days ("8 May 2023", "October 3rd, 2023", "December 1,2023", "2023-10-03") and
  spans of days with one year ("between August 11 and 15, 2023", "11 July - 2 August
  2023"); numeric days with a year ("14/3/2024", "3/14/24", "14.3.2024") in both
  orders where both are days (the query cannot say whether 8/5 is 8 May or August 5,
  and a prior on both days costs less than one on the wrong one); "the week of March
  3, 2024" is that week, Monday to Sunday;
- months with a year ("in October 2023", also "the last week of October 2023": a
  conversation about a part of a month is often held after it, and reading only that
  week lost such questions on the LoCoMo slice, docs/search.md "Session 15"), spans of
  months ("between August and November 2023") and seasons ("summer 2021", meteorological
  seasons of the northern hemisphere);
- a day, month or season named without a year ("on March 3", "in June", "during the
  second week of November", "in the summer"): that part of *every* year
  (:data:`ANY_YEAR`), because nothing in the words says which; the keywords decide
  between the years;
- else whole years ("in 2022").

Days win over months, months over years: "on 8 May 2023" is that day, not all of 2023.
Only when none of those is named, and the caller gives the owner's ``today``, relative
dates in the past are read ("today", "yesterday", "3 days ago", "two weeks ago", "last
week", "this month", "last Friday", "over the weekend", "last year"); the future ("next
week") names no conversation yet, and "recently" no range.

Chinese and Japanese notation (written without spaces, so none of the patterns here
finds it) is read by :mod:`bot.cjk_dates`, only in a query that holds such characters.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from datetime import date, timedelta

from bot import cjk_dates
from bot.cjk_dates import has_cjk
from bot.relative_dates import DateRange, relative_dates

__all__ = [
    "ANY_YEAR",
    "MONTH",
    "DateRange",
    "date_match",
    "in_year",
    "latest_occurrence",
    "query_dates",
]

ANY_YEAR = 1
"""The year of a range read from a month named without one: it matches that month of any
year (:func:`date_match`)."""

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
# a month named without a year must be a full name after a preposition: "may", "march"
# and "jan" are also words, and "in May" is the month, "she may" is not
_FULL_MONTH = "|".join(name.lower() for name in calendar.month_name if name)
_ORD = r"(?:st|nd|rd|th)?"  # "3rd", "15th"

_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?({MONTH})\.?(?:,\s*|\s+)(\d{{4}})\b", re.I
)
_MONTH_DAY_YEAR = re.compile(rf"\b({MONTH})\.?\s+(\d{{1,2}}){_ORD}(?:,\s*|\s+)(\d{{4}})\b", re.I)
# a day named without a year ("on March 3", "the 4th of July"): that day in every year
_DAY_MONTH_NO_YEAR = re.compile(
    rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?({_FULL_MONTH})\b(?!\.?,?\s*\d)", re.I
)
_MONTH_DAY_NO_YEAR = re.compile(
    rf"\b({_FULL_MONTH})\s+(\d{{1,2}}){_ORD}\b(?!\s*(?:-|\u2013|,?\s*\d|:))", re.I
)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# 14/3/2024, 3/14/24, 14.3.2024 (dots only with four digits: "1.2.23" is a version)
_NUMERIC_DAY = re.compile(
    r"(?<![\w./])(\d{1,2})(?:/(\d{1,2})/(\d{4}|\d{2})|\.(\d{1,2})\.(\d{4}))(?![\w./])"
)
_WEEK_OF = re.compile(r"\bweek\s+of\s+(?:the\s+)?$", re.I)
# spans of days with one year: "between August 11 and August 15 2023", "August 11-15,
# 2023", "from 11 to 15 August 2023", "11 July - 2 August 2023" (the first day borrows the
# second's month and year; read day by day, only the second day would be found)
_SPAN_SEP = r"\s*(?:-|\u2013|\bto\b|\band\b|\buntil\b|\btill\b|\bthrough\b)\s*(?:the\s+)?"
_SPAN_MONTH_FIRST = re.compile(
    rf"\b({MONTH})\.?\s+(\d{{1,2}}){_ORD}{_SPAN_SEP}(?:({MONTH})\.?\s+)?(\d{{1,2}}){_ORD}"
    r"(?:,\s*|\s+)(\d{4})\b",
    re.I,
)
_SPAN_DAY_FIRST = re.compile(
    rf"\b(\d{{1,2}}){_ORD}(?:\s+(?:of\s+)?({MONTH})\.?)?{_SPAN_SEP}(\d{{1,2}}){_ORD}\s+"
    rf"(?:of\s+)?({MONTH})\.?(?:,\s*|\s+)(\d{{4}})\b",
    re.I,
)
_SPAN_MAX_DAYS = 62  # longer is no span of days someone names (or a misreading)

_MONTH_YEAR = re.compile(rf"\b({MONTH})\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I)
# "in June", "during the second week of November", "in mid-June": the whole month (a
# part of a month is read as the month, see the module docstring)
_MONTH_NO_YEAR = re.compile(
    rf"\b(?:in|during|throughout|over|around|at|of)\s+(?:(?:early|mid|late)(?:\s+|-))?"
    rf"({_FULL_MONTH})\b(?!\.?,?\s*(?:of\s+)?\d)",
    re.I,
)
_MONTH_SPAN = re.compile(
    rf"\b(?:between|from)\s+({MONTH})\.?\s+(?:and|to|until|till|through)\s+({MONTH})\.?,?\s+"
    r"(?:of\s+)?(\d{4})\b",
    re.I,
)
_SEASON = re.compile(r"\b(spring|summer|autumn|fall|winter)(?:\s+of)?\s+(\d{4})\b", re.I)
_SEASON_NO_YEAR = re.compile(
    r"\b(?:in|during|over|throughout)\s+the\s+(spring|summer|autumn|fall)\b(?!\s*(?:of\s+)?\d)",
    re.I,
)
_SEASON_MONTHS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11)}
_YEAR = re.compile(r"\b(19\d\d|2[01]\d\d)\b")
# the years a query can name (others are no date: "31 December 9999" would overflow the
# day after it, and year 1 is ANY_YEAR)
YEARS = range(1900, 2200)


def _safe_date(year: int, month: int, day: int, *, any_year: bool = False) -> date | None:
    """The date, or None when it is none or in a year no query names (:data:`YEARS`);
    ``any_year``: a day of :data:`ANY_YEAR`."""
    if year not in YEARS and not (any_year and year == ANY_YEAR):
        return None
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _span(
    first_month: str | None, first_day: str, month: str, day: str, year: str
) -> DateRange | None:
    """The days from the first to the second (inclusive); the first day takes the second's
    month when it names none, and the year before when it would fall after it."""
    end = _safe_date(int(year), MONTHS[month.lower()], int(day))
    if end is None:
        return None
    start_month = MONTHS[first_month.lower()] if first_month else end.month
    start = _safe_date(end.year, start_month, int(first_day))
    if start is not None and start > end and first_month:
        start = _safe_date(end.year - 1, start_month, int(first_day))  # "28 Dec - 3 Jan"
    if start is None or start > end or (end - start).days > _SPAN_MAX_DAYS:
        return None
    return start, end


def _day_spans(text: str) -> list[DateRange]:
    spans = [_span(m[1], m[2], m[3] or m[1], m[4], m[5]) for m in _SPAN_MONTH_FIRST.finditer(text)]
    spans += [_span(m[2], m[1], m[4], m[3], m[5]) for m in _SPAN_DAY_FIRST.finditer(text)]
    return [span for span in spans if span is not None]


def _days(text: str) -> list[DateRange]:
    days = _day_spans(text)
    for m in _DAY_MONTH_YEAR.finditer(text):
        d = _safe_date(int(m.group(3)), MONTHS[m.group(2).lower()], int(m.group(1)))
        if d:
            days.append(_week_of(text, m.start(), d))
    for m in _MONTH_DAY_YEAR.finditer(text):
        d = _safe_date(int(m.group(3)), MONTHS[m.group(1).lower()], int(m.group(2)))
        if d:
            days.append(_week_of(text, m.start(), d))
    for m in _ISO_DAY.finditer(text):
        d = _safe_date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        if d:
            days.append((d, d))
    days += _numeric_days(text)
    if not days:
        named = [(m[1], m[2]) for m in _DAY_MONTH_NO_YEAR.finditer(text)]
        named += [(m[2], m[1]) for m in _MONTH_DAY_NO_YEAR.finditer(text)]
        for day, month in named:
            # year 1 has no February 29: "on February 29" is the 28th there
            d = _safe_date(
                ANY_YEAR,
                MONTHS[month.lower()],
                min(int(day), 28) if month.lower() == "february" else int(day),
                any_year=True,
            )
            if d:
                days.append((d, d))
    return days


def _week_of(text: str, at: int, day: date) -> DateRange:
    """``day`` alone, or its week (Monday to Sunday) when the text before ``at`` says
    "the week of"."""
    if _WEEK_OF.search(text, max(0, at - 20), at):
        monday = day - timedelta(days=day.weekday())
        return monday, monday + timedelta(days=6)
    return day, day


def _numeric_days(text: str) -> list[DateRange]:
    """Numeric days with a year, both ways round when both read as a date."""
    days: list[DateRange] = []
    for m in _NUMERIC_DAY.finditer(text):
        first = int(m[1])
        second = int(m[2] or m[4])
        year = int(m[3] or m[5])
        year += 2000 if year < 100 else 0
        readings = {(second, first), (first, second)}  # (month, day) either way
        for month, day in sorted(readings):
            if 1 <= month <= 12:
                d = _safe_date(year, month, day)
                if d:
                    days.append((d, d))
    return days


def _month(year: int, month: int) -> DateRange:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _months(text: str) -> list[DateRange]:
    months: list[DateRange] = []
    for m in _MONTH_SPAN.finditer(text):
        year, first, second = int(m[3]), MONTHS[m[1].lower()], MONTHS[m[2].lower()]
        if year not in YEARS:
            continue
        start_year = year if first <= second else year - 1  # "from November to February 2024"
        end = _month(year, second)[1]
        months.append((date(start_year, first, 1), end))
    for m in _MONTH_YEAR.finditer(text):
        if int(m[2]) in YEARS:
            months.append(_month(int(m[2]), MONTHS[m[1].lower()]))
    for m in _SEASON.finditer(text):
        season, year = m[1].lower(), int(m[2])
        if year not in YEARS:
            continue
        if season == "winter":  # the winter months of that year, at both of its ends
            months.append((date(year, 1, 1), _month(year, 2)[1]))
            months.append((date(year, 12, 1), date(year, 12, 31)))
        else:
            first, last = _SEASON_MONTHS[season]
            months.append((date(year, first, 1), _month(year, last)[1]))
    if not months:
        for m in _MONTH_NO_YEAR.finditer(text):
            months.append(_month(ANY_YEAR, MONTHS[m[1].lower()]))
        for m in _SEASON_NO_YEAR.finditer(text):
            first, last = _SEASON_MONTHS[m[1].lower()]
            months.append((date(ANY_YEAR, first, 1), _month(ANY_YEAR, last)[1]))
    return months


def query_dates(text: str, today: date | None = None) -> list[DateRange]:
    """Date ranges the query names (inclusive; module docstring): days, else months, else
    years, else (with ``today``, the owner's) relative dates in the past. A range in
    :data:`ANY_YEAR` stands for that part of every year."""
    days = _days(text)
    months: list[DateRange] = []
    years: list[DateRange] = []
    cjk = has_cjk(text)
    if cjk:  # Chinese and Japanese notation ("2023年5月8日", "五月", "上周一")
        days_cjk, months, years = cjk_dates.calendar_dates(text, ANY_YEAR)
        days += _named_years(days_cjk)
    if days:
        return days
    months = _months(text) + _named_years(months)
    if months:
        return months
    years = [(date(int(y), 1, 1), date(int(y), 12, 31)) for y in _YEAR.findall(text)] + years
    if years or today is None:
        return years
    relative = relative_dates(text, today)
    return relative + cjk_dates.relative_dates(text, today) if cjk else relative


def _named_years(ranges: list[DateRange]) -> list[DateRange]:
    """``ranges`` in a year a query can name (:data:`YEARS`) or :data:`ANY_YEAR`."""
    return [r for r in ranges if r[0].year in YEARS or r[0].year == ANY_YEAR]


def in_year(day: date, year: int) -> date:
    """``day`` moved into ``year`` (February 29 to the 28th where there is none)."""
    try:
        return day.replace(year=year)
    except ValueError:
        return day.replace(year=year, day=28)


def latest_occurrence(span: DateRange, today: date) -> DateRange:
    """``span`` (in :data:`ANY_YEAR`: "on 3 November", "in June") in the latest year where
    it starts on or before ``today``."""
    start, end = span
    year = today.year if in_year(start, today.year) <= today else today.year - 1
    return in_year(start, year), in_year(end, year + end.year - start.year)


def date_match(day: date | None, ranges: Sequence[DateRange], slack_days: int = 7) -> float:
    """1 inside a named range, fading linearly to 0 at ``slack_days`` outside it."""
    if day is None:
        return 0.0
    best = 0.0
    for start, end in ranges:
        when = in_year(day, ANY_YEAR) if start.year == ANY_YEAR else day
        if start <= when <= end:
            return 1.0
        gap = min(abs((when - start).days), abs((when - end).days))
        if gap <= slack_days:
            best = max(best, 1.0 - gap / (slack_days + 1))
    return best
