"""Dates and time words in Chinese and Japanese (pure functions, no I/O).

The English readers (:mod:`bot.named_dates`, :mod:`bot.relative_dates`, the time words
of :mod:`bot.ranking`) match whole ``\\b``-delimited words; Chinese and Japanese write
no spaces, so "我们星期一见" or "先週の月曜日に会った" held no word they know: a "when"
question got no prior on the turns with time words, and "上周一" or "2023年5月8日" named
no date. Read here, only for text holding such characters (English is never read by
these patterns, so its rankings cannot move):

- calendar dates: "2023年5月8日" / "5月8号" (a day; without the year that day of every
  year), "2023年5月" / "五月" (a month), "2023年" (a year);
- relative dates in the past from the owner's today: 今天/今日, 昨天/昨日, 前天/一昨日,
  "3天前" / "三日前" / "两周前" / "2ヶ月前" / "一年前", 上周/先週, 本周/今週,
  上个月/先月, 本月/今月, 去年/昨年, 今年, 周末/週末, and weekdays 星期一..星期日,
  周一..周日, 礼拜一, 月曜日..日曜日 (the latest one up to today; after 上/先週 the one
  of the week before);
- time words (:data:`TIME_WORDS`) and "when" questions (:data:`WHEN`: 什么时候, 何时,
  哪天, いつ, 何曜日 ...).
"""

from __future__ import annotations

import re
from datetime import date, timedelta

DateRange = tuple[date, date]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_NUM_CHARS = "〇零一二两兩三四五六七八九十百"
_DIGITS = {c: i for i, c in enumerate("〇一二三四五六七八九")}
_DIGITS.update({"零": 0, "两": 2, "兩": 2})
_NUM = rf"(?:\d{{1,4}}|[{_NUM_CHARS}]{{1,4}})"
# the weekday characters: Monday is 一 (Chinese) or 月 (Japanese), Sunday 日/天 or 日曜
_ZH_DAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_JA_DAYS = {"月": 0, "火": 1, "水": 2, "木": 3, "金": 4, "土": 5, "日": 6}
# 周一 but not 一周一次 ("once a week") nor 周末 (the weekend, read apart)
_ZH_WEEKDAY = (
    r"(?:星期|礼拜|禮拜|[周週](?=[一二三四五六日天](?![次遍回])))(?P<zh>[一二三四五六日天])"
)
_JA_WEEKDAY = r"(?P<ja>[月火水木金土日])曜日?"
_WEEKDAY = re.compile(rf"(?P<last>上个?|上個|先週の?)?(?:{_ZH_WEEKDAY}|{_JA_WEEKDAY})")
_LAST_WEEK = r"(?:上周|上週|上个?星期|上個星期)(?![一二三四五六日天])|先週(?!の?[月火水木金土日]曜)"
_ANY_WEEKDAY = re.sub(r"\?P<\w+>", "?:", f"{_ZH_WEEKDAY}|{_JA_WEEKDAY}")

TIME_WORDS = re.compile(
    rf"{_ANY_WEEKDAY}|"
    r"昨天|今天|明天|前天|后天|後天|今晚|昨晚|明晚|今早|早上|上午|中午|下午|晚上|凌晨|"
    r"上周|下周|本周|这周|這週|上週|下週|上个月|下个月|上個月|下個月|这个月|這個月|本月|"
    r"去年|今年|明年|前年|最近|周末|週末|刚才|剛才|之前|之后|之後|以前|以后|以後|"
    r"昨日|今日|明日|一昨日|明後日|今朝|今夜|昨夜|先週|来週|今週|先月|来月|今月|昨年|来年|"
    r"午前|午後|夕方|この前|さっき|"
    r"\d{1,4}\s*(?:年|月|日|号|號|点|點|时|時)|"
    rf"{_NUM}\s*(?:月|天前|日前|周前|週間前|ヶ月前|か月前|个月前|個月前|年前)",
)
"""Time words of Chinese and Japanese, found anywhere in a run (no word boundaries)."""

WHEN = re.compile(
    r"什么时候|什麼時候|何时|何時|哪天|哪一天|几号|幾號|几月|幾月|哪年|哪一年|几点|幾點|"
    r"多久以前|多久前|いつ|何曜日|何日|何年|何月"
)
"""The words of a "when" question in Chinese and Japanese."""

_UNIT_DAYS = {"天": 1, "日": 1, "周": 7, "週": 7, "星期": 7, "週間": 7, "月": 30, "年": 365}
_UNIT_AROUND = {1: 0, 7: 3, 30: 7, 365: 30}
_AGO = re.compile(
    rf"({_NUM})\s*(?:个|個|ヶ|か|カ|ケ)?\s*(天|日|周|週間|週|星期|月|年)\s*(?:前|以前|之前)"
)
_RELATIVE = [
    (re.compile(r"前天|一昨日|おととい"), "before"),
    (re.compile(r"今天|今日|今晚|今早|今朝|今夜|きょう"), "today"),
    (re.compile(r"(?<!一)昨天|(?<!一)昨日|昨晚|昨夜|きのう"), "yesterday"),
    (re.compile(_LAST_WEEK), "last week"),
    (re.compile(r"本周|这周|這週|今週|这个星期|這個星期"), "this week"),
    (re.compile(r"上个月|上個月|上月|先月"), "last month"),
    (re.compile(r"本月|这个月|這個月|今月"), "this month"),
    (re.compile(r"去年|昨年"), "last year"),
    (re.compile(r"今年"), "this year"),
    (re.compile(r"周末|週末"), "weekend"),
]
_DAY = re.compile(rf"(?:(\d{{4}})\s*年\s*)?({_NUM})\s*月\s*({_NUM})\s*[日号號]")
_MONTH = re.compile(rf"(?:(\d{{4}})\s*年\s*)?(?<![个個ヶか])({_NUM})\s*月(?!\s*{_NUM}\s*[日号號])")
_YEAR = re.compile(r"(19\d\d|2[01]\d\d)\s*年")


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Han or kana character (the only text read here)."""
    return not text.isascii() and _CJK.search(text) is not None


def number(text: str) -> int | None:
    """``"12"``, ``"十二"``, ``"两"``, ``"二十三"`` as an int (None when it is none)."""
    if text.isdigit():
        return int(text)
    if "百" in text:
        return None  # no count of days we read, nor a day or month
    if "十" in text:
        tens, _, ones = text.partition("十")
        high = _DIGITS.get(tens, -1) if tens else 1
        low = _DIGITS.get(ones, -1) if ones else 0
        return None if high < 0 or low < 0 else high * 10 + low
    if len(text) == 1 and text in _DIGITS:
        return _DIGITS[text]
    return None


def calendar_dates(
    text: str, any_year: int
) -> tuple[list[DateRange], list[DateRange], list[DateRange]]:
    """(days, months, years) ``text`` names in Chinese or Japanese notation; a day or
    month without a year is in ``any_year`` (it stands for every year)."""
    days: list[DateRange] = []
    for m in _DAY.finditer(text):
        month, day = number(m[2]), number(m[3])
        if m[1] is None and month == 2 and day == 29:
            day = 28  # a year that stands for every year may have no February 29
        d = _date(int(m[1]) if m[1] else any_year, month, day)
        if d is not None:
            days.append((d, d))
    months: list[DateRange] = []
    for m in _MONTH.finditer(text):
        month = number(m[2])
        first = _date(int(m[1]) if m[1] else any_year, month, 1)
        if first is not None:
            months.append((first, _month_end(first)))
    years = [(date(int(y), 1, 1), date(int(y), 12, 31)) for y in _YEAR.findall(text)]
    return days, months, years


def _date(year: int, month: int | None, day: int | None) -> date | None:
    if month is None or day is None:
        return None
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _month_end(first: date) -> date:
    following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return following - timedelta(days=1)


def relative_dates(text: str, today: date) -> list[DateRange]:
    """The past ``text`` names relative to ``today`` (module docstring)."""
    out: list[DateRange] = []
    for pattern, kind in _RELATIVE:
        if pattern.search(text):
            out.append(_relative(kind, today))
    for m in _AGO.finditer(text):
        n = number(m[1])
        if n is None or n > 999:
            continue
        unit = _UNIT_DAYS[m[2]]
        day = today - timedelta(days=unit * n)
        around = timedelta(days=_UNIT_AROUND[unit])
        out.append((day - around, day + around))
    for m in _WEEKDAY.finditer(text):
        weekday = _ZH_DAYS[m["zh"]] if m["zh"] else _JA_DAYS[m["ja"]]
        back = (today.weekday() - weekday) % 7
        if m["last"]:  # 上周一, 先週の月曜日: that day of the week before this one
            back = today.weekday() + 7 - weekday
        out.append((today - timedelta(days=back),) * 2)
    return out


def _relative(kind: str, today: date) -> DateRange:
    if kind == "before":
        return (today - timedelta(days=2),) * 2
    if kind == "today":
        return today, today
    if kind == "yesterday":
        return (today - timedelta(days=1),) * 2
    monday = today - timedelta(days=today.weekday())
    if kind == "last week":
        return monday - timedelta(days=7), monday - timedelta(days=1)
    if kind == "this week":
        return monday, today
    if kind == "last month":
        last = today.replace(day=1) - timedelta(days=1)
        return last.replace(day=1), last
    if kind == "this month":
        return today.replace(day=1), today
    if kind == "last year":
        return date(today.year - 1, 1, 1), date(today.year - 1, 12, 31)
    if kind == "this year":
        return date(today.year, 1, 1), today
    saturday = today - timedelta(days=(today.weekday() - 5) % 7)  # the weekend
    return saturday, min(today, saturday + timedelta(days=1))
