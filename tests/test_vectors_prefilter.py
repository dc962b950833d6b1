"""The sign-bit prefilter: blocked Hamming distances and the shortlist they give are
exactly those of the straightforward computation (the shortlist decides the ranking), ties
at the cut included."""

from __future__ import annotations

import numpy as np
import pytest

import bot.vector_codec as vectors_module
from bot.vector_codec import BitMatrix, sign_bits


def _reference_distances(bits: np.ndarray, query_bits: np.ndarray) -> np.ndarray:
    """Bit by bit: unpack both, count the differing bits per row (as uint16)."""
    rows = np.unpackbits(bits.view(np.uint8), axis=1)
    query = np.unpackbits(query_bits.view(np.uint8))
    return (rows != query).sum(axis=1).astype(np.uint16)


def _reference_shortlist(bits: np.ndarray, ids: np.ndarray, query_bits: np.ndarray, count: int):
    """The code before the blocked scan: word by word over the whole matrix."""
    distance = np.bitwise_count(bits[:, 0] ^ query_bits[0]).astype(np.uint16)
    for word in range(1, bits.shape[1]):
        distance += np.bitwise_count(bits[:, word] ^ query_bits[word])
    # the nearest, and of those tied at the cut the last loaded (the newest turns)
    order = np.lexsort((-np.arange(len(distance)), distance))
    return np.sort(ids[order[:count]])


@pytest.mark.parametrize("block", [7, 64, 65536])
def test_blocked_distances_and_shortlist_are_exact(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors_module, "_BLOCK", block)
    rng = np.random.default_rng(block)
    vectors = rng.standard_normal((3001, 384)).astype(np.float32)
    bits = sign_bits(vectors)
    ids = rng.permutation(10_000)[:3001].astype(np.int64)
    matrix = BitMatrix(ids, bits)
    for _ in range(5):
        query_bits = sign_bits(rng.standard_normal((1, 384)))[0]
        assert np.array_equal(matrix.distances(query_bits), _reference_distances(bits, query_bits))
        for count in (256, 400):
            assert np.array_equal(
                np.sort(matrix.shortlist(query_bits, count)),
                _reference_shortlist(bits, ids, query_bits, count),
            )


def test_distances_follow_upserts_and_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors_module, "_BLOCK", 100)
    rng = np.random.default_rng(1)
    bits = sign_bits(rng.standard_normal((1000, 384)))
    matrix = BitMatrix(np.arange(1000, dtype=np.int64), bits)
    more = sign_bits(rng.standard_normal((300, 384)))  # past the capacity: it doubles
    matrix.upsert(np.arange(900, 1200, dtype=np.int64), more)
    expected = np.concatenate([bits[:900], more])
    query_bits = sign_bits(rng.standard_normal((1, 384)))[0]
    assert np.array_equal(matrix.ids, np.arange(1200))
    assert np.array_equal(matrix.distances(query_bits), _reference_distances(expected, query_bits))
    assert len(BitMatrix.empty(6).distances(query_bits)) == 0
    assert len(BitMatrix.empty(6).shortlist(query_bits, 10)) == 0


@pytest.mark.parametrize("in_id_order", [True, False])
def test_shortlist_among_keeps_the_nearest_of_the_allowed_turns(in_id_order: bool) -> None:
    """A filtered search's sign-bit stage (bot.search.pool): only the allowed ids, the
    nearest of them, ids without a vector skipped, and it follows upserts and removals;
    with the ids in id order (a binary search) or not (the id -> position dict)."""
    rng = np.random.default_rng(7)
    ids = np.arange(10, 5010, dtype=np.int64)
    if not in_id_order:
        ids = rng.permutation(ids)
    matrix = BitMatrix(ids, sign_bits(rng.standard_normal((len(ids), 384)).astype(np.float32)))
    query = sign_bits(rng.standard_normal((1, 384)).astype(np.float32))[0]
    distance = dict(zip(matrix.ids.tolist(), matrix.distances(query).tolist(), strict=True))
    allowed = [*rng.choice(ids, 700, replace=False).tolist(), 999_999]  # one has no vector
    got = matrix.shortlist_among(query, 100, allowed).tolist()
    assert len(got) == 100 and set(got) <= set(allowed)
    rest = set(allowed) - set(got) - {999_999}
    assert max(distance[i] for i in got) <= min(distance[i] for i in rest)
    # fewer allowed than asked for: all of them that have a vector
    assert sorted(matrix.shortlist_among(query, 100, allowed[:40]).tolist()) == sorted(allowed[:40])
    # a new vector is found (after the others, or before them: no longer in id order),
    # a removed one is not
    matrix.upsert(np.array([999_999]), query.reshape(1, -1))
    assert 999_999 in matrix.shortlist_among(query, 100, allowed).tolist()
    matrix.upsert(np.array([3]), query.reshape(1, -1))
    assert 3 in matrix.shortlist_among(query, 100, [*allowed, 3]).tolist()
    assert set(matrix.shortlist_among(query, 100, allowed[:40]).tolist()) == set(allowed[:40])
    matrix.remove({999_999})
    assert 999_999 not in matrix.shortlist_among(query, 100, allowed).tolist()
    assert matrix.shortlist_among(query, 5, [1, 2, 4]).tolist() == []


def test_a_tie_at_the_cut_keeps_the_newest() -> None:
    """Of the vectors at the cut distance, the last loaded (the newest turns) are kept:
    before, which of them ``argpartition`` kept was its own choice."""
    distance = np.array([3, 1, 3, 0, 3, 3, 2, 3], dtype=np.uint16)
    assert sorted(vectors_module.nearest(distance, 4).tolist()) == [1, 3, 6, 7]
    assert sorted(vectors_module.nearest(distance, 6).tolist()) == [1, 3, 4, 5, 6, 7]
    assert sorted(vectors_module.nearest(distance, 3).tolist()) == [1, 3, 6]
    assert sorted(vectors_module.nearest(distance, 1).tolist()) == [3]
