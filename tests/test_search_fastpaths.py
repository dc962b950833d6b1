"""The latency fast paths of session 25 give what the code they replaced gave.

Each test holds one fast path (an ASCII-only pattern, a C-level loop) to the
straightforward version, kept here as the reference, on random text that mixes ASCII
with the cases that leave the fast path: accents, "ß", the Kelvin sign (lower-cased to an
ASCII "k"), Chinese, digits of other scripts, apostrophes, underscores and line breaks.
"""

from __future__ import annotations

import random
import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.search import features
from bot.search.query import STOP_WORDS
from bot.search.rows import build_rows, dense_codes
from bot.search.soft import STEM

_TEXT = st.text(
    alphabet="abcXYZ 019_'\u2019,;.:-\n\u00e9\u00df\u212a\u4e1c\u4eac\u0663Kthe", max_size=60
)


def _reference_stems(text: str) -> set[str]:
    """``features._stems`` before its ASCII path (the general one, every text)."""
    words = features._WORD.findall(text.lower())
    found = {w[:STEM] for w in words if w not in STOP_WORDS}
    if features.has_spaceless(text):
        for run in features.split_runs(" ".join(words))[0]:
            found.update(run)
            found.update(features._pieces(run))
    return found


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_stems_equal_the_general_path(text: str) -> None:
    assert features._stems(text) == _reference_stems(text)
    assert features._stems(text, text.lower()) == _reference_stems(text)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_capitals_and_tokens_equal_the_old_patterns(text: str) -> None:
    old_capital = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]+")
    assert features._CAPITAL.findall(text) == old_capital.findall(text)
    low = text.lower()
    if low.isascii():
        assert features._ASCII_TOKEN.findall(low) == features._TOKEN.findall(low)


def test_capitals_after_a_capitalised_word() -> None:
    # the capital is matched first and the look-behind reads the two characters before
    # it: the end of the previous match still counts as "a word before"
    assert features._CAPITAL.findall("we met Anna Bell, Carl and Dora; Eve") == [
        "Anna",
        "Bell",
        "Carl",
        "Dora",
        "Eve",
    ]


def test_dense_codes_number_keys_by_first_appearance() -> None:
    rng = random.Random(5)
    for _ in range(100):
        keys = [rng.choice(["a", "b", ("user", "x"), ("user", "y"), 3]) for _ in range(20)]
        code_of: dict[object, int] = {}
        expected = [code_of.setdefault(k, len(code_of)) for k in keys]
        assert dense_codes(keys).tolist() == expected
        assert dense_codes(keys).dtype == np.int64


def test_build_rows_with_turns_missing_a_vector() -> None:
    dims = 4
    rng = np.random.default_rng(6)
    vectors = rng.standard_normal((6, dims)).astype(np.float16)
    raw = [
        (
            10 - i,
            f"c{i % 2}",
            i,
            None if i == 3 else "Ann",
            "2026-01-01T10:00:00Z",
            f"text {i}",
            "web",
            None if i in (1, 4) else vectors[i].tobytes(),
            "user",
        )
        for i in range(6)
    ]
    rows = build_rows(raw, True, dims)
    ordered = sorted(raw, key=lambda r: (r[1], r[2], r[0]))
    assert rows.ids == [r[0] for r in ordered]
    assert rows.sender == [r[3] or "" for r in ordered]
    assert rows.has.tolist() == [r[7] is not None for r in ordered]
    for i, r in enumerate(ordered):
        want = np.zeros(dims, np.float32) if r[7] is None else vectors[r[2]].astype(np.float32)
        assert np.array_equal(rows.matrix[i], want)
    assert rows.codes.tolist() == [0, 0, 0, 1, 1, 1]
    assert rows.speakers() is not None
    assert rows.speakers().tolist() == [0, 0, 0, 0, 1, 0]  # the sender-less turn apart
