"""Vector encodings and the sign-bit prefilter behind turn KNN (see :mod:`bot.vectors`).

- float32 blobs for sqlite-vec, float16 copies in ``turn_vectors`` (decoded through an
  exact lookup table) and their exact cosine rescoring;
- :class:`BitMatrix`: the sign bits of every turn vector in memory, scanned in blocks by
  Hamming distance (XOR + popcount) to shortlist candidates for the rescoring.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bot.db import SyncConn
from bot.ranking import matvec


def read_turn_vectors(conn: SyncConn, ids: Sequence[int], dims: int) -> dict[int, np.ndarray]:
    """float32 vectors of ``ids`` from ``turn_vectors`` (on the connection's thread)."""
    out: dict[int, np.ndarray] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for rowid, blob in conn.execute(
            f"SELECT turn_id, vector FROM turn_vectors WHERE turn_id IN ({marks})", chunk
        ):
            out[int(rowid)] = from_half(blob, dims)
    return out


def read_turn_matrix(
    conn: SyncConn, ids: Sequence[int], dims: int
) -> tuple[np.ndarray, np.ndarray]:
    """(ids found, (n, dims) float32 matrix) for ``ids``: one statement per 500 ids, rows
    in id order (B-tree order), converted from float16 in one numpy call."""
    found: list[int] = []
    blobs: list[bytes] = []
    ordered = sorted(map(int, ids))
    for start in range(0, len(ordered), 500):
        chunk = ordered[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT turn_id, vector FROM turn_vectors WHERE turn_id IN ({marks}) ORDER BY turn_id",
            chunk,
        ).fetchall()
        if rows:  # columns by zip (C): two appends per row cost ~0.3 ms of a shortlist's 400
            chunk_ids, chunk_blobs = zip(*rows, strict=True)
            found.extend(chunk_ids)
            blobs.extend(chunk_blobs)
    return np.asarray(found, dtype=np.int64), half_matrix(b"".join(blobs), len(found), dims)


# float16 -> float32 by table lookup: exact (every float16 is a float32) and about twice
# as fast as ``astype`` on this machine (256 KB, built once)
_HALF_TO_FLOAT = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


def half_matrix(blob: bytes, n: int, dims: int) -> np.ndarray:
    """``n`` concatenated float16 vectors -> (n, dims) float32 (the same values)."""
    halves = np.frombuffer(blob, dtype=np.uint16, count=n * dims).reshape(n, dims)
    return _HALF_TO_FLOAT.take(halves)


def rescore(
    conn: SyncConn, shortlist: Sequence[int], query: np.ndarray, k: int, dims: int
) -> dict[int, float]:
    """The ``k`` best of ``shortlist`` by exact cosine (float16 copies from
    ``turn_vectors``): turn id -> similarity, best first. On the connection's thread."""
    if not len(shortlist):
        return {}
    ids, matrix = read_turn_matrix(conn, shortlist, dims)
    if not len(ids):
        return {}
    scores = matvec(matrix, query)
    top = np.argsort(-scores, kind="stable")[:k]
    return {int(ids[i]): float(scores[i]) for i in top}


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def to_half(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float16).tobytes()


def from_half(blob: bytes, dims: int) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float16, count=dims).astype(np.float32)


def shortlist_size(k: int) -> int:
    """Vectors the sign-bit stage keeps for ``k`` exact nearest ones: 8x (99.6% of the
    exact top 10 of LoCoMo's turn windows, docs/search.md "KNN design"), at least 256."""
    return max(8 * k, 256)


def query_sign_bits(query: np.ndarray) -> np.ndarray:
    """The sign bits of one query vector (its row of :func:`sign_bits`)."""
    return sign_bits(np.asarray(query).reshape(1, -1))[0]


def sign_bits(vectors: np.ndarray) -> np.ndarray:
    """Pack the signs of ``vectors`` (n, d) into (n, ceil(d/64)) uint64 words."""
    packed = np.packbits(np.asarray(vectors) > 0, axis=1)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


class BitMatrix:
    """In-memory sign bits of every turn vector, appended to and patched in place.

    Stored column-major (one row of words per 64 dimensions, a column per vector) with
    spare capacity: XOR + popcount then runs over contiguous memory, 12x faster than
    over row-major (n, words) on this machine (1.2 ms for 200,000 vectors).
    """

    def __init__(self, ids: np.ndarray, bits: np.ndarray) -> None:
        words = bits.shape[1] if bits.ndim == 2 else 0
        self._n = len(ids)
        capacity = max(1024, self._n)
        self._ids = np.zeros(capacity, dtype=np.int64)
        self._ids[: self._n] = ids
        self._cols = np.zeros((words, capacity), dtype=np.uint64)
        self._cols[:, : self._n] = bits.T
        self._pos = {int(t): i for i, t in enumerate(ids.tolist())}
        # loaded in id order and appended with new (higher) ids, the ids are usually
        # ascending: then a binary search finds them (_positions)
        self._ascending = bool(np.all(ids[1:] > ids[:-1])) if len(ids) > 1 else True

    @classmethod
    def empty(cls, words: int) -> BitMatrix:
        return cls(np.zeros(0, dtype=np.int64), np.zeros((0, words), dtype=np.uint64))

    @property
    def ids(self) -> np.ndarray:
        return self._ids[: self._n]

    @property
    def bits(self) -> np.ndarray:
        return self._cols[:, : self._n].T

    def upsert(self, ids: np.ndarray, bits: np.ndarray) -> None:
        for turn_id, row in zip(ids.tolist(), bits, strict=True):
            at = self._pos.get(int(turn_id))
            if at is None:
                if self._n == len(self._ids):  # grow by doubling
                    self._ids = np.concatenate([self._ids, np.zeros_like(self._ids)])
                    self._cols = np.concatenate([self._cols, np.zeros_like(self._cols)], axis=1)
                at = self._n
                if at and turn_id <= self._ids[at - 1]:
                    self._ascending = False
                self._n += 1
                self._ids[at] = turn_id
                self._pos[int(turn_id)] = at
            self._cols[:, at] = row

    def remove(self, ids: set[int]) -> None:
        keep = ~np.isin(self.ids, np.fromiter(ids, dtype=np.int64, count=len(ids)))
        kept_ids, kept_bits = self.ids[keep].copy(), self.bits[keep].copy()
        self.__init__(kept_ids, kept_bits)  # type: ignore[misc]

    def shortlist(self, query_bits: np.ndarray, count: int) -> np.ndarray:
        """Turn ids of the ``count`` smallest Hamming distances (unordered; of the
        vectors tied at the cut, the last loaded: :func:`nearest`)."""
        n = self._n
        if n <= count:
            return self.ids.copy()
        return self._ids[nearest(self.distances(query_bits), count)]

    def shortlist_among(
        self, query_bits: np.ndarray, count: int, ids: Sequence[int] | np.ndarray
    ) -> np.ndarray:
        """:meth:`shortlist` over the vectors of ``ids`` only (the turns a search's filter
        or named dates allow); ids without a vector are skipped."""
        at = self._positions(np.asarray(ids, dtype=np.int64))
        if not len(at):
            return np.zeros(0, dtype=np.int64)
        if len(at) <= count:
            return self._ids[at].copy()
        cols = self._cols[:, at]
        query = np.asarray(query_bits, dtype=np.uint64).reshape(cols.shape[0], 1)
        distance = np.bitwise_count(np.bitwise_xor(cols, query)).sum(axis=0, dtype=np.uint16)
        return self._ids[at[nearest(distance, count)]]

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        """Where the vectors of ``ids`` are (those without one left out): a binary search
        while the ids are ascending (a dict lookup per id took 11 ms for a month's 16,000
        turns among 2,000,000; sorting them after each change, 270 ms), else the dict."""
        if not self._ascending:
            found = np.fromiter((self._pos.get(int(i), -1) for i in ids), np.int64, len(ids))
            return found[found >= 0]
        known = self.ids
        if not len(known):
            return np.zeros(0, dtype=np.int64)
        at = np.searchsorted(known, ids).clip(0, len(known) - 1)
        return at[known[at] == ids]

    def distances(self, query_bits: np.ndarray) -> np.ndarray:
        """Hamming distance of every vector to ``query_bits`` (uint16, in load order).

        XOR + popcount + sum over blocks of :data:`_BLOCK` vectors, all words at once,
        into reused buffers: the temporaries stay in cache, which at 2,000,000 vectors
        took 10 ms instead of 15-18 ms word by word over the whole matrix.
        """
        n = self._n
        cols = self._cols
        words = cols.shape[0]
        query = np.asarray(query_bits, dtype=np.uint64).reshape(words, 1)
        block = min(_BLOCK, max(n, 1))
        xor = np.empty((words, block), dtype=np.uint64)
        ones = np.empty((words, block), dtype=np.uint8)
        distance = np.empty(n, dtype=np.uint16)
        for start in range(0, n, block):
            stop = min(n, start + block)
            width = stop - start
            np.bitwise_xor(cols[:, start:stop], query, out=xor[:, :width])
            np.bitwise_count(xor[:, :width], out=ones[:, :width])
            np.sum(ones[:, :width], axis=0, dtype=np.uint16, out=distance[start:stop])
        return distance


# vectors per block of the Hamming scan (XOR buffer 1.5 MB for 6 words): the fastest of
# 16,384-65,536 on this machine (512 KiB of L2 per core, 8 MiB of L3 shared); session 31,
# same distances: 200,000 vectors 2.5 ms against 2.8 at 65,536, 2,000,000 25 against 30
# (thread CPU, load ~10)
_BLOCK = 32768


def nearest(distance: np.ndarray, count: int) -> np.ndarray:
    """Positions of the ``count`` smallest of ``distance`` (small non-negative integers,
    ``count < len(distance)``), unordered: every one below the cut, then those at the
    cut from the last position back (the last loaded are the newest turns).

    A count of each distance finds the cut (0.3 ms for 200,000 Hamming distances, where
    ``argpartition`` took 1.6 ms), and the tie rule is ours: which of the vectors tied at
    the cut ``argpartition`` kept was its introselect's choice.
    """
    cut = int(np.searchsorted(np.cumsum(np.bincount(distance)), count))
    below = np.flatnonzero(distance < cut)
    tied = np.flatnonzero(distance == cut)
    return np.concatenate([below, tied[len(tied) - (count - len(below)) :]])
