"""A ranked turn's words read once (bot.search.turn_words) give what each reader's own
tokenising gave: soft coverage's :func:`~bot.search.soft.tokens` (label left out) and
the learned features' stems (label kept; ``test_search_fastpaths`` holds ``_stems``)."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.search import soft, turn_words
from bot.search.turn_words import ASCII_WORD, ascii_body_words, ascii_words

# labels ("Ann: "), a colon without a space, long heads, apostrophes at the cut, and
# letters that leave the ASCII path (the Kelvin sign lower-cases to an ASCII "k")
_LABEL = st.sampled_from(["", "Ann: ", "ann's: ", "Bo:", "a b: ", "x" * 41 + ": ", "\u212a: "])
_BODY = st.text(alphabet="abcXYZ 019_'\u2019,;.:-\n\u00e9\u212aK", max_size=60)


@settings(max_examples=500, deadline=None)
@given(_LABEL, _BODY)
def test_turn_tokens_are_tokens(label: str, rest: str) -> None:
    text = label + rest
    assert soft.turn_tokens(text) == soft.tokens(text)
    assert soft.turn_tokens(text) == soft.tokens(text)  # again, from the memo


@settings(max_examples=300, deadline=None)
@given(_LABEL, _BODY.filter(str.isascii))
def test_body_words_are_the_words_after_the_label(label: str, rest: str) -> None:
    text = label + rest
    if not text.isascii():
        return
    assert ascii_body_words(text) == ASCII_WORD.findall(soft.body(text).lower())
    assert list(ascii_words(text)) == ASCII_WORD.findall(text.lower())


def test_body_is_what_follows_the_label() -> None:
    assert soft.body("Ann: we met") == "we met"
    assert soft.body("Ann Lee: we met") == "Ann Lee: we met"  # a space: not a label
    assert soft.body("x" * 40 + ": hi") == "x" * 40 + ": hi"  # too long for a name
    assert soft.body("no label") == "no label"


def test_a_returned_list_does_not_change_the_memo() -> None:
    text = "Ann: the lake house, the lake"
    first = soft.turn_tokens(text)
    first.clear()
    assert soft.turn_tokens(text) == ["the", "lake", "house", "the", "lake"]


def test_the_memo_starts_over_when_full() -> None:
    for i in range(turn_words.MEMO_TEXTS + 10):
        ascii_words(f"turn {i}")
    assert 0 < len(turn_words._memo) <= turn_words.MEMO_TEXTS
    assert ascii_words("turn 3") == ("turn", "3")


def test_the_memo_holds_no_objects_for_the_collector() -> None:
    ascii_words("Ann: the kayak and the paddles")
    gc.collect()
    assert not gc.is_tracked(turn_words._memo["Ann: the kayak and the paddles"])
