"""Dates a query names (:func:`bot.ranking.query_dates`): single days, spans of days,
months and years."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from bot.named_dates import ANY_YEAR, date_match, query_dates
from bot.ranking import has_time_words, is_when_question, time_word


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


@pytest.mark.parametrize(
    ("text", "first", "last"),
    [
        # regression: "December 1,2023" (no space after the comma) read only as 2023
        ("Where was the picture shared on December 1,2023 taken?", date(2023, 12, 1), None),
        ("on 8 May,2023", date(2023, 5, 8), None),
        # regression: read only as November (all of it), not August to November
        ("did they meet between August and November 2023?", date(2023, 8, 1), date(2023, 11, 30)),
        ("from November to February 2024", date(2023, 11, 1), date(2024, 2, 29)),
        # regression: seasons were read as the whole year
        ("What state did she visit in summer 2021?", date(2021, 6, 1), date(2021, 8, 31)),
        ("in the spring of 2022", date(2022, 3, 1), date(2022, 5, 31)),
        # a part of a month is the month: conversations about it often come after it
        ("during the last week of August 2023", date(2023, 8, 1), date(2023, 8, 31)),
        ("in early June 2023", date(2023, 6, 1), date(2023, 6, 30)),
    ],
)
def test_phrases_people_use_for_days_months_and_seasons(
    text: str, first: date, last: date | None
) -> None:
    assert _covers(text, first, last or first)
    assert date_match(first - timedelta(days=8), query_dates(text)) == 0.0


def test_winter_is_the_winter_months_at_both_ends_of_the_year() -> None:
    ranges = query_dates("in winter 2022")
    assert date_match(date(2022, 1, 15), ranges, slack_days=0) == 1.0
    assert date_match(date(2022, 12, 15), ranges, slack_days=0) == 1.0
    assert date_match(date(2022, 7, 15), ranges) == 0.0


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        # regression: a month, day or season without a year named no date at all
        ("When did Melanie go camping in June?", date(2021, 6, 12), date(2021, 8, 1)),
        ("during the second week of November", date(2019, 11, 30), date(2019, 10, 1)),
        ("what did we talk about on March 3?", date(2024, 3, 3), date(2024, 3, 20)),
        ("the 4th of July party", date(2022, 7, 4), date(2022, 8, 4)),
        ("what did I do in the summer", date(2023, 7, 20), date(2023, 10, 1)),
        ("in mid-June", date(2020, 6, 15), date(2020, 9, 15)),
    ],
)
def test_a_date_without_a_year_is_that_date_in_every_year(
    text: str, inside: date, outside: date
) -> None:
    ranges = query_dates(text)
    for year in (inside.year, inside.year + 3, 2026):
        assert date_match(inside.replace(year=year), ranges, slack_days=0) == 1.0
    assert date_match(outside, ranges) == 0.0
    # February 29 has a place in a year without one
    assert date_match(date(2024, 2, 29), query_dates("on February 29"), slack_days=0) == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "She may come over later",  # "may" the verb
        "March on, whatever happens",  # "march" the verb
        "we need to sort out the budget",
        "call me at 3 pm",
    ],
)
def test_words_that_are_also_month_names_are_not_dates(text: str) -> None:
    assert query_dates(text) == []


def test_a_named_year_still_wins_over_the_same_month_without_one() -> None:
    # "in June 2023" is June 2023 only, not June of every year
    ranges = query_dates("What did we decide in June 2023?")
    assert ranges == [(date(2023, 6, 1), date(2023, 6, 30))]
    assert ANY_YEAR not in {start.year for start, _ in ranges}


_THURSDAY = date(2026, 11, 26)


@pytest.mark.parametrize(
    ("text", "first", "last"),
    [
        ("what did we talk about yesterday?", date(2026, 11, 25), date(2026, 11, 25)),
        ("the day before yesterday", date(2026, 11, 24), date(2026, 11, 24)),
        ("what did I say this morning", _THURSDAY, _THURSDAY),
        ("3 days ago", date(2026, 11, 23), date(2026, 11, 23)),
        ("two weeks ago", date(2026, 11, 9), date(2026, 11, 15)),
        ("last week", date(2026, 11, 16), date(2026, 11, 22)),  # Monday to Sunday
        ("this week", date(2026, 11, 23), _THURSDAY),
        ("the past week", date(2026, 11, 19), _THURSDAY),
        ("last month", date(2026, 10, 1), date(2026, 10, 31)),
        ("this month", date(2026, 11, 1), _THURSDAY),
        ("last year", date(2025, 1, 1), date(2025, 12, 31)),
        ("last Friday", date(2026, 11, 20), date(2026, 11, 20)),
        ("on Monday", date(2026, 11, 23), date(2026, 11, 23)),
        ("last Thursday", date(2026, 11, 19), date(2026, 11, 19)),  # not today
        ("over the weekend", date(2026, 11, 21), date(2026, 11, 22)),
    ],
)
def test_relative_dates_are_read_from_the_owners_today(text: str, first: date, last: date) -> None:
    ranges = query_dates(text, _THURSDAY)
    assert _covers_ranges(ranges, first, last), ranges
    assert date_match(first - timedelta(days=1), ranges, slack_days=0) == 0.0
    assert date_match(last + timedelta(days=1), ranges, slack_days=0) == 0.0
    # without a today (a caller that does not know it) nothing relative is read
    assert query_dates(text) == []


def _covers_ranges(ranges: list[tuple[date, date]], first: date, last: date) -> bool:
    return all(
        date_match(date.fromordinal(d), ranges, slack_days=0) == 1.0
        for d in range(first.toordinal(), last.toordinal() + 1)
    )


@pytest.mark.parametrize(
    "text",
    [
        "the last time we met",
        "what are we doing next week?",
        "what did I recently say",
        "what are my plans for the weekend?",
    ],
)
def test_the_future_and_vague_words_name_no_dates(text: str) -> None:
    assert query_dates(text, _THURSDAY) == []


def test_a_named_date_wins_over_a_relative_one() -> None:
    # "last week, as mentioned on November 6, 2023": the day the words name
    assert query_dates("her issue last week, as mentioned on November 6, 2023", _THURSDAY) == [
        (date(2023, 11, 6), date(2023, 11, 6))
    ]


@pytest.mark.parametrize(
    "text",
    [
        "on 31 December 9999",
        "in December 9999",
        "9999-12-31",
        "between 30 and 31 December 9999",
        "winter 9999",
        "between November and December 9999",
        "on 1 January 0001",
        "in May 1066",
    ],
)
def test_years_no_one_names_are_no_dates(text: str) -> None:
    # regression: "31 December 9999" was read, and the search's dated pool overflowed on
    # the day after it (OverflowError: the whole search failed)
    from bot.search.pool import dated_filters
    from bot.search.results import Filters

    ranges = query_dates(text)
    assert ranges == []
    assert dated_filters(ranges, Filters(), None) == []


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("what did we say on 14/3/2024", [date(2024, 3, 14)]),
        ("notes from 3/14/24", [date(2024, 3, 14)]),
        ("the call on 14.3.2024", [date(2024, 3, 14)]),
        # both ways round: nothing says which the owner meant
        ("plans for 8/5/2023", [date(2023, 5, 8), date(2023, 8, 5)]),
        ("on 12/12/2023", [date(2023, 12, 12)]),
    ],
)
def test_numeric_days_with_a_year(text: str, days: list[date]) -> None:
    assert query_dates(text) == [(d, d) for d in days]


@pytest.mark.parametrize("text", ["release 1.2.23 notes", "ratio 1/2/2023x", "on 31/31/2023"])
def test_numbers_that_are_no_day_are_not_read_as_one(text: str) -> None:
    # a version, a number glued to a word, no month 31: at most the year is read
    assert all((last - first).days >= 364 for first, last in query_dates(text))


@pytest.mark.parametrize("text", ["the week of March 3, 2024", "during the week of 3 March 2024"])
def test_the_week_of_a_day_is_that_week(text: str) -> None:
    assert query_dates(text) == [(date(2024, 2, 26), date(2024, 3, 3))]


# -- Chinese and Japanese (bot/cjk_dates.py) -------------------------------------------
# Regression: written without spaces, none of these was read: "我们星期一见" held no
# time word for a "when" question's prior, "什么时候" asked no "when", and "上周一",
# "2023年5月8日" or "先週の月曜日" named no date.
THURSDAY = date(2026, 11, 26)


@pytest.mark.parametrize(
    ("text", "first", "last"),
    [
        ("我们星期一做了什么", date(2026, 11, 23), date(2026, 11, 23)),
        ("周日去哪儿了", date(2026, 11, 22), date(2026, 11, 22)),
        ("上周一说了什么", date(2026, 11, 16), date(2026, 11, 16)),
        ("上个星期五", date(2026, 11, 20), date(2026, 11, 20)),
        ("月曜日に何をしましたか", date(2026, 11, 23), date(2026, 11, 23)),
        ("先週の金曜日", date(2026, 11, 20), date(2026, 11, 20)),
        ("昨天", date(2026, 11, 25), date(2026, 11, 25)),
        ("一昨日の話", date(2026, 11, 24), date(2026, 11, 24)),
        ("三天前", date(2026, 11, 23), date(2026, 11, 23)),
        ("上周", date(2026, 11, 16), date(2026, 11, 22)),
        ("上个月", date(2026, 10, 1), date(2026, 10, 31)),
        ("去年", date(2025, 1, 1), date(2025, 12, 31)),
        ("2023年5月8日那天", date(2023, 5, 8), date(2023, 5, 8)),
        ("2023年5月", date(2023, 5, 1), date(2023, 5, 31)),
        ("2023年的旅行", date(2023, 1, 1), date(2023, 12, 31)),
    ],
)
def test_chinese_and_japanese_dates(text: str, first: date, last: date) -> None:
    ranges = query_dates(text, THURSDAY)
    assert ranges and all(
        date_match(date.fromordinal(d), ranges, slack_days=0) == 1.0
        for d in range(first.toordinal(), last.toordinal() + 1)
    ), ranges
    assert date_match(first - timedelta(days=1), ranges, slack_days=0) == 0.0, ranges


def test_chinese_dates_without_a_year_and_words_that_are_no_date() -> None:
    assert query_dates("五月去了哪里") == [(date(ANY_YEAR, 5, 1), date(ANY_YEAR, 5, 31))]
    assert query_dates("12月25日") == [(date(ANY_YEAR, 12, 25),) * 2]
    # "once a week", "three months", "a little": no weekday, no month, no time
    for text in ("每周一次", "三个月的课", "我有一点累"):
        assert query_dates(text, THURSDAY) == [], text
    assert not has_time_words("我有一点累") and not has_time_words("每周一次")


@pytest.mark.parametrize(
    "text", ["我们星期一见面吧", "周五下午开会", "月曜日に会いましょう", "昨天的事", "3点见"]
)
def test_chinese_and_japanese_time_words(text: str) -> None:
    assert has_time_words(text)
    assert any(time_word(token) for token in text.split())


def test_chinese_and_japanese_when_questions() -> None:
    assert is_when_question("我们什么时候去东京？")
    assert is_when_question("東京にはいつ行きましたか")
    assert not is_when_question("东京塔在哪里？")
