"""The in-memory side of vector KNN (see :mod:`bot.vectors`, SPEC.md "Vector search cost").

:class:`VectorMatrices` holds what interactive search scans without touching SQLite: the
sign bits of every turn window (:class:`~bot.vector_codec.BitMatrix`, the first stage of
the two-stage turn KNN) and a float copy of every abbreviation vector
(:class:`~bot.abbreviation_matrix.AbbreviationMatrix`, one per conversation: scored
exactly up to 20,000 of them). The exact stage of the turn KNN reads float16 copies from
``turn_vectors`` on a connection's thread (:meth:`VectorMatrices.rescore_turns`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from bot.abbreviation_matrix import AbbreviationMatrix
from bot.db import SyncConn
from bot.vector_codec import BitMatrix, query_sign_bits, rescore, shortlist_size


class VectorMatrices:
    """Turn-window sign bits and abbreviation vectors, in memory, kept in step with the
    tables by :class:`~bot.vectors.VectorIndex`."""

    def __init__(self, dims: int, turns: BitMatrix, abbr_ids: list[str], abbr: np.ndarray):
        self.dims = dims
        self.turns = turns
        self._notes = AbbreviationMatrix(abbr_ids, abbr, dims)

    @classmethod
    def read(cls, conn: SyncConn, dims: int) -> VectorMatrices:
        """Load both matrices from ``turn_vectors`` and ``abbreviation_vectors`` (on the
        connection's thread)."""
        words = (dims + 63) // 64
        rows = conn.execute("SELECT turn_id, bits FROM turn_vectors").fetchall()
        if rows:
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            bits = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.uint64)
            turns = BitMatrix(ids, bits.reshape(len(rows), words).copy())
        else:
            turns = BitMatrix.empty(words)
        rows = conn.execute("SELECT conversation_id, vector FROM abbreviation_vectors").fetchall()
        abbr_ids = [str(r[0]) for r in rows]
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float16)
        # float32 in memory: numpy's float16 matmul is ~10x slower
        return cls(dims, turns, abbr_ids, matrix.reshape(len(rows), dims).astype(np.float32))

    @property
    def abbreviation_count(self) -> int:
        return len(self._notes)

    def set_abbreviation(self, conversation_id: str, vector: np.ndarray | None) -> None:
        """Replace (or, with None, drop) one conversation's abbreviation vector."""
        self._notes.set(conversation_id, vector)

    def turn_shortlist(
        self, query: np.ndarray, k: int, among: Sequence[int] | np.ndarray | None = None
    ) -> list[int]:
        """The sign-bit stage: the ``max(8k, 256)`` turn ids nearest in Hamming distance
        (with ``among``, nearest among those turns only)."""
        query_bits = query_sign_bits(query)
        count = shortlist_size(k)
        if among is not None:
            return self.turns.shortlist_among(query_bits, count, among).tolist()
        return self.turns.shortlist(query_bits, count).tolist()

    def rescore_turns(
        self,
        conn: SyncConn,
        shortlist: Sequence[int],
        query: np.ndarray,
        k: int,
        conversation_id: str | None = None,
    ) -> dict[int, float]:
        """The exact stage: cosine over the float16 copies of ``shortlist`` (or of every
        window of ``conversation_id``), on the connection's thread."""
        if conversation_id is not None:
            rows = conn.execute(
                "SELECT turn_id FROM turn_vectors WHERE conversation_id = ?", (conversation_id,)
            ).fetchall()
            shortlist = [int(r[0]) for r in rows]
        return rescore(conn, shortlist, query, k, self.dims)

    def knn_abbreviations(
        self, query: np.ndarray, k: int, among: Collection[str] | None = None
    ) -> dict[str, float]:
        """Up to ``k`` nearest abbreviations: conversation id -> cosine similarity (exact);
        with ``among``, of those conversations only."""
        return self._notes.nearest(query, k, among)


__all__ = ["VectorMatrices"]
