"""AbbreviationMatrix: the notes' vectors in memory, exact up to EXACT_UP_TO, two stages above."""

from __future__ import annotations

import numpy as np
import pytest

from bot import abbreviation_matrix
from bot.abbreviation_matrix import AbbreviationMatrix
from bot.vector_codec import sign_bits

DIMS = 384


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    # rounded through float16 as stored, so a reference product sees the same values
    v = rng.standard_normal((n, DIMS)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float16).astype(np.float32)


def _exact(vectors: dict[str, np.ndarray], query: np.ndarray, k: int) -> dict[str, float]:
    ids = sorted(vectors)
    scores = np.array([float(vectors[c] @ query) for c in ids])
    return {ids[i]: float(scores[i]) for i in np.argsort(-scores)[:k]}


def test_below_the_limit_every_note_is_scored_exactly() -> None:
    rng = np.random.default_rng(1)
    rows = _unit(rng, 500)
    ids = [f"conv-{i}" for i in range(500)]
    matrix = AbbreviationMatrix(ids, rows, DIMS)
    reference = dict(zip(ids, rows, strict=True))
    for query in _unit(rng, 5):
        got = matrix.nearest(query, 20)
        want = _exact(reference, query, 20)
        assert set(got) == set(want)
        assert all(got[c] == pytest.approx(want[c], abs=1e-5) for c in want)
        among = ids[100:200]
        chosen = matrix.nearest(query, 7, among)
        assert list(chosen) == list(_exact({c: reference[c] for c in among}, query, 7))


def test_changes_keep_rows_ids_and_sign_bits_in_step() -> None:
    rng = np.random.default_rng(2)
    matrix = AbbreviationMatrix([], np.zeros((0, DIMS), dtype=np.float32), DIMS)
    reference: dict[str, np.ndarray] = {}
    for step in range(3000):
        conv = f"conv-{int(rng.integers(0, 400))}"
        if step % 7 == 3:  # a conversation deleted (or its note dropped)
            matrix.set(conv, None)
            reference.pop(conv, None)
        else:  # a new note, or one rewritten after more turns
            vector = _unit(rng, 1)[0]
            matrix.set(conv, vector)
            reference[conv] = vector
    assert len(matrix) == len(reference)
    n = len(matrix)
    assert sorted(matrix._ids) == sorted(reference)
    assert np.array_equal(matrix._bits.ids, np.arange(n))
    assert np.array_equal(matrix._bits.bits, sign_bits(matrix._rows[:n]))
    for conv, vector in reference.items():
        assert np.array_equal(matrix._rows[matrix._pos[conv]], vector)
    query = _unit(rng, 1)[0]
    assert set(matrix.nearest(query, 25)) == set(_exact(reference, query, 25))


def test_notes_are_appended_in_place_not_copied_each_time() -> None:
    # np.vstack per new note copied the whole matrix: 150 MB each time at 100,000
    rng = np.random.default_rng(3)
    matrix = AbbreviationMatrix([], np.zeros((0, DIMS), dtype=np.float32), DIMS)
    buffers = set()
    for i, vector in enumerate(_unit(rng, 3000)):
        matrix.set(f"conv-{i}", vector)
        buffers.add(id(matrix._rows))
    assert len(buffers) <= 3  # 1,024 -> 2,048 -> 4,096 rows


def _hamming(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    # an independent count: every sign that differs
    return ((rows > 0) != (query > 0)).sum(axis=1)


def test_above_the_limit_the_sign_bits_shortlist_finds_the_nearest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(abbreviation_matrix, "EXACT_UP_TO", 1000)
    rng = np.random.default_rng(4)
    rows = _unit(rng, 4000)
    ids = [f"conv-{i}" for i in range(4000)]
    matrix = AbbreviationMatrix(ids, rows, DIMS)
    planted = rng.choice(4000, 30, replace=False)
    found = 0
    for j in planted:
        # a question close to one note (cosine ~0.9), as a paraphrase is
        query = rows[j] + 0.5 * _unit(rng, 1)[0]
        query /= np.linalg.norm(query)
        for among in (None, [*ids[:2500], f"conv-{j}"]):  # a filter's, over the limit
            got = matrix.nearest(query, 10, among)
            assert len(got) == 10 and (among is None or set(got) <= set(among))
            # the scores are the exact cosines of the notes found ...
            at = [int(c.removeprefix("conv-")) for c in got]
            assert list(got.values()) == pytest.approx((rows[at] @ query).tolist(), abs=1e-5)
            # ... which are the best of those shortlisted by sign bits (256 of them)
            pool = (
                np.arange(4000)
                if among is None
                else np.array(sorted(set(map(lambda c: int(c.removeprefix("conv-")), among))))
            )
            distance = _hamming(rows[pool], query)
            cut = np.sort(distance)[255]
            near = pool[distance < cut]
            assert _hamming(rows[at], query).max() <= cut
            left = np.setdiff1d(near, at)
            assert float((rows[left] @ query).max()) <= min(got.values()) + 1e-5
            found += max(got, key=got.__getitem__) == f"conv-{j}"
    assert found >= 57  # of 60


def test_a_new_note_in_a_large_store_copies_nothing() -> None:
    # through the search's own holder (VectorMatrices): each note written after an idle
    # conversation used to copy every note's vector (np.vstack), 30 MB here
    import tracemalloc

    from bot.vector_codec import BitMatrix
    from bot.vector_knn import VectorMatrices

    rng = np.random.default_rng(5)
    n = 20_000
    notes = VectorMatrices(DIMS, BitMatrix.empty(6), [f"c{i}" for i in range(n)], _unit(rng, n))
    notes.set_abbreviation("first-new", _unit(rng, 1)[0])  # may grow the buffer once
    fresh = _unit(rng, 10)
    tracemalloc.start()
    try:
        for i, vector in enumerate(fresh):
            notes.set_abbreviation(f"new-{i}", vector)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert notes.abbreviation_count == n + 11
    assert peak < 1_000_000, peak
