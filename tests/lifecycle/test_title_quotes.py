"""The quotes of a model's title (bot/lifecycle/title_quotes.py through clean_title):
those around the whole title go, pairs inside stay pairs, no stray quote is left."""

from __future__ import annotations

import pytest

from bot.lifecycle.title_quotes import QUOTES
from bot.lifecycle.titles import clean_title


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        # Regression: the quote at each end went, paired or not ('Quoted Start" Here',
        # 'Plan for "Project X').
        ('"Quoted start" here', '"Quoted Start" Here'),
        ("“Quoted start” here", "“Quoted Start” Here"),
        ('Plan for "Project X"', 'Plan for "Project X"'),
        ('"Weekend" and "Plans"', '"Weekend" and "Plans"'),
        ("The «Grand Tour» Budget", "The «Grand Tour» Budget"),
        # around the whole title, in any style, nested too
        ('"Server Launch Plan"', "Server Launch Plan"),
        ("“Curly Title”", "Curly Title"),
        ("„Deutscher Titel“", "Deutscher Titel"),
        ("«Grand Tour»", "Grand Tour"),
        ("「東京旅行」", "東京旅行"),
        ("'Budget Review'", "Budget Review"),
        ("`Deploy Script`", "Deploy Script"),
        ("\"'Nested Quotes'\"", "Nested Quotes"),
        ("\"The 'Best' Plan\"", "The 'Best' Plan"),
        ('**"Bold Title"**', "Bold Title"),
        ('Title: "Foo Bar".', "Foo Bar"),
        ('"Title: debugging the login flow."', "Debugging the Login Flow"),
        ('"  Spaced Title  "', "Spaced Title"),
        # a quote without its pair
        ('"Unbalanced start', "Unbalanced Start"),
        ('Ends with quote"', "Ends with Quote"),
        ('Say " hello there', "Say Hello There"),
        ("Budget Review'", "Budget Review"),
        ('"Half "Open Title"', 'Half "Open Title"'),
        # apostrophes are no quotes
        ("Anna's Birthday Party", "Anna's Birthday Party"),
        ("Parents' Evening Plan", "Parents' Evening Plan"),
        ('"Parents\' Evening"', "Parents' Evening"),
        ("Don’t Panic Guide", "Don’t Panic Guide"),
        # a cut to six words leaves no half pair
        ('Plan "one two three four five six"', "Plan One Two Three Four Five"),
    ],
)
def test_quotes_of_a_title(raw: str, title: str) -> None:
    assert clean_title(raw) == title


def test_no_title_keeps_a_stray_quote() -> None:
    # Every quote character, alone or doubled at either end and in the middle.
    for quote in QUOTES:
        for raw in (f"{quote}Alpha Beta", f"Alpha Beta{quote}", f"Alpha {quote} Beta"):
            cleaned = clean_title(raw)
            assert cleaned == "Alpha Beta", (raw, cleaned)
