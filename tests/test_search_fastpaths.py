"""The latency fast paths of session 25 give what the code they replaced gave.

Each test holds one fast path (an ASCII-only pattern, a C-level loop, one pass over all
conversations instead of one per conversation) to the straightforward version, kept here
as the reference, on random text that mixes ASCII with the cases that leave the fast
path: accents, "ß", the Kelvin sign (lower-cased to an ASCII "k"), Chinese, digits of
other scripts, apostrophes, underscores and line breaks.
"""

from __future__ import annotations

import random
import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.search import features
from bot.search.conversations import candidate_texts, coverage, coverages
from bot.search.query import STOP_WORDS
from bot.search.rows import Rows, build_rows, dense_codes
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


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcdefgh"), st.lists(_TEXT, min_size=1, max_size=4)),
    st.lists(st.sampled_from(["a", "ab", "x_", "the", "\u00e9t", "k", "'b", "\u4e1c"]), max_size=4),
)
def test_coverages_equal_coverage_per_conversation(
    texts: dict[str, list[str]], terms: list[str]
) -> None:
    expected = {conv: coverage(parts, terms) for conv, parts in texts.items()}
    assert coverages(texts, terms) == expected


def test_coverages_start_each_conversation_at_a_word_start() -> None:
    texts = {"a": ["the paint"], "b": ["paint dries"], "c": ["repaint"], "d": ["x\npaint"]}
    assert coverages(texts, ["paint"]) == {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0}
    # a term holding a line break could span two conversations: read one by one
    assert coverages({"a": ["x"], "b": ["y"]}, ["x\ny"]) == {"a": 0.0, "b": 0.0}


def _rows(conv: list[str], content: list[str]) -> Rows:
    n = len(conv)
    return Rows(
        ids=list(range(n)),
        conv=conv,
        number=list(range(n)),
        sender=[""] * n,
        timestamp=[""] * n,
        content=content,
        channel=["web"] * n,
        matrix=np.zeros((n, 0), np.float32),
        has=np.zeros(n, bool),
        codes=dense_codes(conv),
    )


def test_candidate_texts_group_in_ranked_order() -> None:
    rng = random.Random(4)
    for _ in range(200):
        n = rng.randint(0, 30)
        conv = sorted(rng.choice("pqrst") for _ in range(n))  # rows come by conversation
        rows = _rows(conv, [f"turn {i}" for i in range(n)])
        order = np.asarray(rng.sample(range(n), rng.randint(0, n)), dtype=np.int64)
        expected: dict[str, list[str]] = {}
        for i in order.tolist():
            expected.setdefault(conv[i], []).append(rows.content[i])
        got = candidate_texts(rows, order)
        assert got == expected
        assert list(got) == list(expected)  # conversations in the order first ranked


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
