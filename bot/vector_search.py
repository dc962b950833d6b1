"""Searching the vectors: the nearest turn windows of a query (a sign-bit shortlist in
memory, then an exact rescoring of their float16 copies) and the nearest abbreviations.

A part of :class:`bot.vectors.VectorIndex` (its base): the vectors are written, and
the in-memory matrices loaded and kept in step, there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService
from bot.vector_codec import read_turn_vectors

if TYPE_CHECKING:
    from bot.vector_knn import VectorMatrices


class VectorSearch:
    """The search half of :class:`~bot.vectors.VectorIndex`."""

    db: Database
    embedder: EmbeddingService
    _knn: VectorMatrices | None

    if TYPE_CHECKING:  # VectorIndex's own

        @property
        def ready(self) -> bool: ...

    async def turn_vectors(self, turn_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored vectors of ``turn_ids`` (missing ids are left out)."""
        if not self.ready or not turn_ids:
            return {}
        ids = [int(t) for t in turn_ids]
        dims = self.embedder.dimensions
        return await self.db.run(lambda c: read_turn_vectors(c, ids, dims), write=False)

    async def knn_turns(
        self, query: np.ndarray, k: int, *, conversation_id: str | None = None
    ) -> dict[int, float]:
        """Up to ``k`` nearest turn windows: turn id -> cosine similarity.

        The bit shortlist holds ``max(8k, 256)`` ids, rescored exactly; within one
        conversation every vector is scored exactly.
        """
        knn = self._knn
        if not self.ready or knn is None:
            return {}
        shortlist = self.turn_shortlist(query, k, conversation_id=conversation_id)
        return await self.db.run(
            lambda c: knn.rescore_turns(c, shortlist, query, k, conversation_id), write=False
        )

    def turn_shortlist(
        self,
        query: np.ndarray,
        k: int,
        *,
        conversation_id: str | None = None,
        among: Sequence[int] | np.ndarray | None = None,
    ) -> list[int]:
        """The in-memory sign-bit stage of :meth:`knn_turns`: ``max(8k, 256)`` turn ids
        (none within one conversation, where :meth:`rescore_turns` scores every vector;
        with ``among``, the nearest of those turns: a search's filtered pool)."""
        if not self.ready or self._knn is None or conversation_id is not None:
            return []
        return self._knn.turn_shortlist(query, k, among)

    def rescore_turns(
        self,
        conn: SyncConn,
        shortlist: Sequence[int],
        query: np.ndarray,
        k: int,
        conversation_id: str | None = None,
    ) -> dict[int, float]:
        """The exact stage of :meth:`knn_turns`, on a connection's thread (so a caller
        can run it in the same hop as other reads)."""
        if self._knn is None:
            return {}
        return self._knn.rescore_turns(conn, shortlist, query, k, conversation_id)

    async def knn_abbreviations(
        self, query: np.ndarray, k: int, among: Collection[str] | None = None
    ) -> dict[str, float]:
        """Up to ``k`` nearest abbreviations: conversation id -> cosine similarity (exact);
        with ``among``, of those conversations only."""
        if not self.ready or self._knn is None:
            return {}
        return self._knn.knn_abbreviations(query, k, among)
