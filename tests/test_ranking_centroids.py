"""``Neighbourhood.centroid_cosines`` (in-place masked adds, session 31) and its shifts
(both signs of an offset at once) give what the versions they replaced gave, kept here
as the references."""

from __future__ import annotations

import numpy as np

from bot.ranking import Neighbourhood, matvec


def _reference_shift(conv: np.ndarray, number: np.ndarray, offset: int, radius: int):
    n = len(conv)
    idx = np.arange(n)
    src = idx + offset
    ok = (src >= 0) & (src < n)
    rows, src = idx[ok], src[ok]
    same = (conv[src] == conv[rows]) & (np.abs(number[src] - number[rows]) <= radius)
    return rows[same], src[same]


def test_shifts_equal_the_reference() -> None:
    rng = np.random.default_rng(30)
    for trial in range(300):
        n = int(rng.integers(0, 12))
        codes = np.sort(rng.integers(0, 3, n))
        number = np.cumsum(rng.integers(0, 3, n))  # a user turn and its reply share one
        hood = Neighbourhood(codes, number)
        for offset in rng.integers(-5, 6, 6).tolist():
            radius = int(rng.integers(-1, 4))
            rows, src = hood.shift(offset, radius)
            want_rows, want_src = _reference_shift(codes, number, offset, radius)
            assert rows.tolist() == want_rows.tolist(), (trial, offset, radius)
            assert src.tolist() == want_src.tolist(), (trial, offset, radius)
            assert rows.dtype == want_rows.dtype and not rows.flags.writeable


def _reference(hood: Neighbourhood, vectors: np.ndarray, query: np.ndarray, radius: int):
    summed = vectors.copy()
    out = []
    for r in range(1, radius + 1):
        for sign in (-1, 1):
            rows, src = hood.shift(sign * r, r)
            summed[rows] += vectors[src]
        norms = np.linalg.norm(summed, axis=1)
        dots = matvec(summed, query)
        out.append(np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0))
    return out


def test_centroid_cosines_equal_the_reference_bit_for_bit() -> None:
    rng = np.random.default_rng(31)
    for trial in range(200):
        n = int(rng.integers(0, 40))
        # conversations of a few turns, with gaps in the numbers (turns not loaded)
        codes = np.sort(rng.integers(0, 5, n))
        number = np.cumsum(rng.integers(1, 4, n))
        vectors = rng.standard_normal((n, 8)).astype(np.float32)
        vectors[rng.random(n) < 0.2] = 0.0  # rows without a vector
        query = rng.standard_normal(8).astype(np.float32)
        radius = int(rng.integers(0, 4))
        got = Neighbourhood(codes, number).centroid_cosines(vectors, query, radius)
        want = _reference(Neighbourhood(codes, number), vectors, query, radius)
        assert len(got) == len(want) == radius, trial
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            assert g.tobytes() == w.tobytes(), trial
