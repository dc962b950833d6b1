"""SearchService: the one engine behind ``search_conversations``, ``my-agent search`` and
``/search`` (SPEC.md "Search").

The keyword stage (:mod:`bot.search.keyword`) and the vector stage (:mod:`bot.vectors`) run
side by side; their candidates and neighbour windows are loaded in one hop
(:mod:`bot.search.rows`) and fused (:mod:`bot.search.fusion`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.search.fusion import Ranked, Scored, fuse, snippet
from bot.search.keyword import DocFreqs, fts_candidates
from bot.search.query import fts_parts, name_terms, or_terms, query_terms
from bot.search.results import (
    Filters,
    Ranking,
    SearchPage,
    SearchResult,
    decode_cursor,
    encode_cursor,
    fingerprint,
)
from bot.search.rows import Rows, load_rows

if TYPE_CHECKING:
    from bot.vectors import VectorIndex

log = logging.getLogger("my_agent.search")

_CACHED_QUERIES = 64  # query embeddings and rankings kept (LRU)
_PAGE_TTL = 120.0  # seconds a ranking serves the next pages of its cursor


class SearchService:
    """Hybrid (keyword + vector) search over conversations, keyword-only without vectors.

    ``db`` is the ``conversations.db`` :class:`~bot.db.Database`; ``embedder`` the shared
    :class:`~bot.embedding.EmbeddingService`. The service owns the
    :class:`~bot.vectors.VectorIndex` (``self.vectors``) that the lifecycle feeds. When no
    model or no sqlite-vec is available every search is keyword-only and says so
    (``SearchPage.method``).
    """

    def __init__(
        self,
        config: AppConfig,
        db: Database,
        embedder: EmbeddingService | None = None,
        vectors: VectorIndex | None = None,
    ) -> None:
        self.config = config
        self.db = db
        self.embedder = embedder
        if vectors is None and embedder is not None:
            from bot.vectors import VectorIndex

            vectors = VectorIndex(config, db, embedder)
        self.vectors = vectors
        self._opened = False
        self._open_lock = asyncio.Lock()
        self._sender_cache: tuple[float, set[str]] | None = None
        self._freqs = DocFreqs()
        # per-query work kept for repeats: query embeddings (the same question asked again,
        # by the agent or another page) and rankings (a cursor continues the same ranking)
        self._query_vectors: dict[str, np.ndarray] = {}
        self._pages: dict[str, tuple[float, Scored]] = {}

    async def start(self) -> bool:
        """Open the vector index (loads the model); True when search is hybrid."""
        async with self._open_lock:
            if not self._opened:
                self._opened = True
                if self.vectors is not None:
                    try:
                        await self.vectors.open()
                    except Exception:
                        log.exception("vector index failed to open; search is keyword-only")
        return self.hybrid

    @property
    def hybrid(self) -> bool:
        return self.vectors is not None and self.vectors.ready

    async def search(
        self,
        query: str,
        *,
        channel: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        conversation_id: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> SearchPage:
        """Conversations matching ``query``, best first, ``limit`` per page.

        Raises :class:`InvalidCursor` for a cursor from another query.
        """
        filters = Filters(channel, date_from, date_to, conversation_id)
        limit = max(1, min(int(limit), 100))
        offset = decode_cursor(cursor, query, filters) if cursor else 0
        key = fingerprint(query, filters)
        cached = self._pages.get(key) if cursor else None
        if cached is not None and time.monotonic() - cached[0] < _PAGE_TTL:
            # the next page of a ranking made moments ago: the same order, no re-ranking
            scored = cached[1]
        else:
            scored = await self._score(query, filters)
            self._pages[key] = (time.monotonic(), scored)
            while len(self._pages) > _CACHED_QUERIES:
                self._pages.pop(next(iter(self._pages)))
        ranked = scored.conversations
        page = [scored.conversation(c, score) for c, score in ranked[offset : offset + limit]]
        results = await self._materialise(page, query)
        more = offset + limit < len(ranked)
        next_cursor = encode_cursor(offset + limit, query, filters) if more else None
        return SearchPage(results, next_cursor, len(ranked), scored.method)

    async def rank(self, query: str, filters: Filters | None = None) -> Ranking:
        """The full ranking behind :meth:`search`: every turn and conversation, best first.

        Used by benchmarks and diagnostics (turn-level recall needs the turn order).
        """
        scored = await self._score(query, filters or Filters())
        return Ranking(
            turns=scored.hits(), conversations=scored.conversations, method=scored.method
        )

    async def _query_vector(self, query: str) -> np.ndarray | None:
        if not self._opened:
            await self.start()
        if not self.hybrid or self.embedder is None or not query.strip():
            return None
        key = f"{self.embedder.model_id}\x00{query}"
        vector = self._query_vectors.pop(key, None)
        if vector is None:
            try:
                vector = (await self.embedder.embed([query]))[0]
            except EmbeddingUnavailable:
                return None
        self._query_vectors[key] = vector  # most recently used last
        while len(self._query_vectors) > _CACHED_QUERIES:
            self._query_vectors.pop(next(iter(self._query_vectors)))
        return vector

    async def _senders(self) -> set[str]:
        """Distinct turn senders (participant names), cached for a minute."""
        now = time.monotonic()
        if self._sender_cache is None or now - self._sender_cache[0] > 60:
            rows = await self.db.fetchall("SELECT DISTINCT sender FROM turns")
            self._sender_cache = (now, {str(r[0]) for r in rows if r[0]})
        return self._sender_cache[1]

    async def _score(self, query: str, filters: Filters) -> Scored:
        cfg = self.config.search
        terms = query_terms(query)
        # Participants named in the query: their turns get a prior, and the names leave
        # the keyword query (they match every "Name:" line and greeting otherwise).
        names = name_terms(terms, await self._senders())
        rest = [t for t in terms if t not in names]
        parts = fts_parts(query) if not names or not rest else rest
        depth = cfg.candidates
        freqs = self._freqs

        def _fts(conn: SyncConn) -> list[tuple[int, str, int, float]]:
            # one hop: the (cached) frequency check, then the query
            return fts_candidates(conn, or_terms(freqs.selective(conn, parts)), filters, depth)

        async def _keyword() -> list[tuple[int, str, int, float]]:
            if not parts:
                return []
            return await self.db.run(_fts, write=False)

        async def _vectors() -> tuple[np.ndarray | None, dict[int, float], dict[str, float]]:
            qvec = await self._query_vector(query)
            if qvec is None or self.vectors is None:
                return qvec, {}, {}
            knn = await self.vectors.knn_turns(qvec, depth, conversation_id=filters.conversation_id)
            abbreviations: dict[str, float] = {}
            if cfg.abbreviation_weight > 0:
                abbreviations = await self.vectors.knn_abbreviations(qvec, depth)
            return qvec, knn, abbreviations

        # FTS (database thread) runs while the query is embedded (embedding thread) and the
        # bit prefilter scans (this thread)
        (qvec, knn, abbreviations), keyword = await asyncio.gather(_vectors(), _keyword())
        method = "hybrid" if qvec is not None else "keyword"
        if abbreviations and filters.active:
            abbreviations = await self._filter_conversations(abbreviations, filters)
        if not keyword and not knn and not abbreviations:
            return Scored.empty(method)
        rows = await self._neighbourhood(
            keyword, knn, cfg.keyword_window, cfg.vector_window, qvec is not None
        )
        return fuse(cfg, query, filters, rows, keyword, knn, abbreviations, qvec, names)

    async def _filter_conversations(
        self, scores: dict[str, float], filters: Filters
    ) -> dict[str, float]:
        """Keep the conversations that pass ``filters`` (their turns' span for dates)."""
        ids = list(scores)
        marks = ",".join("?" * len(ids))
        rows = await self.db.fetchall(
            f"SELECT id, channel, created, updated FROM conversations WHERE id IN ({marks})", ids
        )
        keep = {
            str(conv)
            for conv, channel, created, updated in rows
            if filters.accepts(str(conv), str(channel), str(updated or ""))
            and not (
                filters.date_to and str(created or "")[: len(filters.date_to)] > filters.date_to
            )
        }
        return {c: v for c, v in scores.items() if c in keep}

    async def _neighbourhood(
        self,
        keyword: list[tuple[int, str, int, float]],
        knn: dict[int, float],
        keyword_radius: int,
        vector_radius: int,
        want_vectors: bool,
    ) -> Rows:
        """Load the candidates with their windows: keyword hits +-``keyword_radius`` (their
        neighbours compete too), vector hits +-``vector_radius`` (for the centroids)."""
        radius = max(keyword_radius, vector_radius if want_vectors else 0)
        expand = self.config.search.expand
        ranges: dict[str, list[tuple[int, int]]] = {}
        for rank, (_, conv, number, _) in enumerate(keyword):
            # only the best hits bring their windows: the rest are scored with what loaded
            r = radius if rank < expand else 0
            ranges.setdefault(conv, []).append((max(1, number - r), number + r))
        found = {k[0] for k in keyword}
        ordered_knn = sorted(knn, key=lambda t: -knn[t])
        near_ids = [t for t in ordered_knn[:expand] if t not in found]
        extra = [t for t in ordered_knn[expand:] if t not in found]
        dims = self.embedder.dimensions if self.embedder is not None else 0
        near = vector_radius if want_vectors else 0

        def _read(conn: SyncConn) -> Rows:
            if near_ids:
                marks = ",".join("?" * len(near_ids))
                for conv, number in conn.execute(
                    f"SELECT conversation_id, turn_number FROM turns WHERE id IN ({marks})",
                    near_ids,
                ):
                    ranges.setdefault(str(conv), []).append(
                        (max(1, int(number) - near), int(number) + near)
                    )
            return load_rows(conn, ranges, extra + ([] if near else near_ids), want_vectors, dims)

        return await self.db.run(_read, write=False)

    async def _materialise(self, page: list[Ranked], query: str) -> list[SearchResult]:
        if not page:
            return []
        conv_ids = [r.conversation_id for r in page]

        def _load(conn: SyncConn) -> dict[str, tuple[Any, ...]]:
            marks = ",".join("?" * len(conv_ids))
            return {
                str(r[0]): r
                for r in conn.execute(
                    "SELECT id, title, channel, abbreviation, updated, topics "
                    f"FROM conversations WHERE id IN ({marks})",
                    conv_ids,
                )
            }

        meta = await self.db.run(_load, write=False)
        terms = query_terms(query)
        results = []
        for item in page:
            row = meta.get(item.conversation_id)
            if row is None:  # deleted between ranking and loading
                continue
            numbers = sorted(item.matched[:10])
            if len(numbers) > 1:
                turn_range = f"turns {numbers[0]}-{numbers[-1]}"
            else:
                turn_range = f"turn {numbers[0]}" if numbers else ""
            try:
                topics = [str(t) for t in json.loads(row[5] or "[]")]
            except ValueError:
                topics = []
            results.append(
                SearchResult(
                    conversation_id=item.conversation_id,
                    title=row[1],
                    channel=str(row[2]),
                    abbreviation=row[3],
                    matched_turns=numbers,
                    timestamp=str(row[4]),
                    score=float(item.score),
                    topics=topics,
                    snippet=snippet(item.text or str(row[3] or ""), terms),
                    turn_range=turn_range,
                    turn_scores=list(item.turns),
                )
            )
        return results
