"""QueryScoring: how SearchService ranks one query (the two hops of SPEC.md "Search").

The keyword stage (:mod:`bot.search.keyword`) and the vector stage (:mod:`bot.vectors`) run
side by side; their candidates and neighbour windows are loaded in one hop
(:mod:`bot.search.rows`) and fused (:mod:`bot.search.fusion`), then re-ordered by the
learned ranker and the conversation list. :class:`QueryScoring` is a base of
:class:`~bot.search.service.SearchService`, which adds pages, cursors and their caches on
top; it also owns the opening of the vector index and the cache of query embeddings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.named_dates import query_dates
from bot.owner_days import owner_zone
from bot.search import conversations as conversation_list
from bot.search import learned, soft
from bot.search.fusion import Scored, fuse
from bot.search.keyword import DocFreqs, fts_candidates, note_candidates
from bot.search.pages import conversation_rows
from bot.search.pool import (
    Pool,
    accepted,
    dated_filters,
    first_turns,
    narrows,
    pool_of,
    scoped_candidates,
    turn_pool,
)
from bot.search.query import fts_parts, fts_words, name_terms, or_terms, query_terms
from bot.search.results import Filters
from bot.search.rows import build_rows, fetch_spans, subtract
from bot.search.senders import Senders
from bot.search.spans import Hit, Spans, keyword_spans, vector_spans
from bot.search.tail import Listing
from bot.search.titles import title_candidates

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from bot.vectors import VectorIndex

log = logging.getLogger("my_agent.search")

CACHED_QUERIES = 64  # query embeddings and rankings kept (LRU)


class QueryScoring:
    """The ranking of a query over ``db`` (keyword + vector when the index is ready).

    The attributes below are set by :class:`~bot.search.service.SearchService`.
    """

    config: AppConfig
    db: Database
    embedder: EmbeddingService | None
    vectors: VectorIndex | None
    now: Callable[[], datetime]
    term_features: bool
    _opened: bool
    _open_lock: asyncio.Lock
    _sender_names: Senders
    _freqs: DocFreqs
    _query_vectors: dict[str, np.ndarray]

    @property
    def zone(self) -> ZoneInfo:
        """The owner's time zone, as the configuration says now: a date the query names
        is a day of the owner's calendar (Rows.days), and "yesterday" the day before the
        owner's today (query_dates). Read at each search: kept from the start, a zone
        reloaded by SIGHUP dated queries in the old one until a restart (session 39)."""
        return owner_zone(self.config)

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

    async def reopen(self) -> bool:
        """Open the vector index again when the first open left search keyword-only (a
        model that was not there then: :mod:`bot.daemon_vectors`); True when hybrid."""
        async with self._open_lock:
            self._opened = True
            if self.vectors is not None and not self.vectors.ready:
                try:
                    await self.vectors.open()
                except Exception:
                    log.exception("vector index failed to open; search is keyword-only")
        return self.hybrid

    @property
    def hybrid(self) -> bool:
        return self.vectors is not None and self.vectors.ready

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
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The model loaded but failed on this query (onnxruntime out of memory, a
                # damaged session): this search is keyword-only and says so
                # (``SearchPage.method``); the next one tries the model again. It used to
                # raise out of the search: /search, the recall tool and the offline
                # brain's reply all failed for as long as the model did.
                log.warning("query embedding failed (%s); this search is keyword-only", exc)
                return None
        self._query_vectors[key] = vector  # most recently used last
        while len(self._query_vectors) > CACHED_QUERIES:
            self._query_vectors.pop(next(iter(self._query_vectors)))
        return vector

    async def _senders(self) -> set[str]:
        """Distinct turn senders (participant names): :class:`~bot.search.senders.Senders`."""
        return await self._sender_names.read(self.db)

    def _will_embed(self, query: str) -> bool:
        """Whether :meth:`_query_vector` should return a vector (checked afterwards)."""
        return self.hybrid and self.embedder is not None and bool(query.strip())

    async def _score(
        self,
        query: str,
        filters: Filters,
        page: tuple[int, int] | None = None,
        *,
        rescore: bool = True,
    ) -> tuple[Listing, dict[str, tuple[Any, ...]]]:
        """Rank ``query``; with ``page`` (offset, limit) also read that page's
        conversation rows (for :meth:`_materialise`) in the same hop. ``rescore=False``
        leaves the conversation list by best turn (:meth:`scored`).

        Two hops to the reader thread: the keyword stage with its neighbour windows runs
        while the query is embedded; then the KNN rescoring, the vector windows, the
        fusion and the page's rows run as one unit after the in-memory bit prefilter.
        """
        if not self._opened:
            await self.start()
        cfg = self.config.search
        terms = query_terms(query)
        # Participants named in the query: their turns get a prior, and the names leave
        # the keyword query (they match every "Name:" line and greeting otherwise).
        names = name_terms(terms, await self._senders())
        rest = [t for t in terms if t not in names]
        parts = fts_parts(query) if not names or not rest else fts_words(rest, query)
        depth = cfg.candidates
        freqs = self._freqs
        dims = self.embedder.dimensions if self.embedder is not None else 0
        # the windows' radius depends on whether the query gets a vector: guessed for the
        # keyword hop, redone in the second hop in the rare case the embedding failed
        guess = self._will_embed(query)

        match = [""]  # the keyword stage's FTS5 query, for the tail (bot.search.tail)
        notes_cut = [False]  # keyword-only: more notes (or titles) matched than were ranked
        # a filtered search takes its vector candidates among the turns that pass the
        # filter, and the dates a query names add their nearest turns (bot.search.pool)
        today = self.now().astimezone(self.zone).date()
        named = query_dates(query, today)
        dated = dated_filters(named, filters, self.zone, today) if cfg.date_candidates else []
        narrowed = guess and narrows(filters)
        pools: list[Pool | None] = [None, None]  # the filter's, the named dates'
        day_turns: list[int] = []  # keyword-only: the named days' conversations

        def _keyword(conn: SyncConn) -> tuple[list[Hit], Spans, list[Any]]:
            if narrowed:
                pools[0] = turn_pool(conn, filters, conversations=True)
            if dated and guess:
                pools[1] = pool_of(conn, dated)
            elif dated:
                day_turns[:] = first_turns(conn, dated, cfg.date_candidates)
            if not parts:
                return [], {}, []
            match[0] = or_terms(freqs.selective(conn, parts))
            hits = fts_candidates(conn, match[0], filters, depth)
            spans = keyword_spans(hits, self._radius(guess), cfg.expand)
            return hits, spans, fetch_spans(conn, spans, guess, filters.active)

        async def _keyword_hop() -> tuple[list[Hit], Spans, list[Any]]:
            if not parts and not narrowed and not dated:
                return [], {}, []
            return await self.db.run(_keyword, write=False)

        async def _vectors() -> tuple[np.ndarray | None, list[int], dict[str, float]]:
            qvec = await self._query_vector(query)
            if qvec is None or self.vectors is None or narrowed:
                return qvec, [], {}  # narrowed: among the filter's turns, below
            # in memory, on this thread: the sign-bit prefilter and the abbreviations
            shortlist = self.vectors.turn_shortlist(
                qvec, depth, conversation_id=filters.conversation_id
            )
            abbreviations: dict[str, float] = {}
            if cfg.abbreviation_weight > 0:
                abbreviations = await self.vectors.knn_abbreviations(qvec, depth)
            return qvec, shortlist, abbreviations

        (qvec, shortlist, abbreviations), (keyword, spans, raw) = await asyncio.gather(
            _vectors(), _keyword_hop()
        )
        dated_short: list[int] = []
        if qvec is not None and self.vectors is not None:
            if narrowed:
                shortlist, abbreviations = await scoped_candidates(
                    self.vectors, qvec, depth, pools[0], cfg.abbreviation_weight > 0
                )
            if pools[1] is not None:
                dated_short = self.vectors.turn_shortlist(
                    qvec, cfg.date_candidates, among=pools[1].turns
                )
        want_vectors = qvec is not None
        method = "hybrid" if want_vectors else "keyword"
        vectors = self.vectors if want_vectors else None

        def _rank(conn: SyncConn) -> tuple[Listing, dict[str, tuple[Any, ...]]]:
            knn: dict[int, float] = {}
            if vectors is not None and qvec is not None and vectors.ready:
                knn = vectors.rescore_turns(conn, shortlist, qvec, depth, filters.conversation_id)
                if dated_short:
                    near_dates = vectors.rescore_turns(conn, dated_short, qvec, cfg.date_candidates)
                    for turn_id, score in near_dates.items():
                        knn.setdefault(turn_id, score)
            if not want_vectors and day_turns:
                # candidates by their day alone: no score of their own (the date prior
                # lifts them; a keyword hit still ranks above them)
                knn = dict.fromkeys(day_turns, 0.0)
            abbr = abbreviations
            if abbr and filters.active and not (narrowed and pools[0] is not None):
                abbr = accepted(conn, abbr, filters)  # (a pool's are chosen among its own)
            if not want_vectors and match[0]:
                # keyword-only: the notes' keyword index stands in for their vectors, so
                # words found only in a conversation's notes still find it (migration 10)
                abbr, notes_cut[0] = note_candidates(conn, match[0], filters, depth)
            titles: dict[str, float] = {}
            if match[0]:
                titles, titles_cut = title_candidates(conn, match[0], parts, filters, cfg)
                notes_cut[0] = notes_cut[0] or titles_cut
            if not keyword and not knn and not abbr:
                # (notes cut at the limit and all filtered out: the tail still lists the
                # rest); a title alone lists its conversation
                scored = replace(Scored.empty(method), query=query, names=names, titles=titles)
                if rescore:
                    scored = conversation_list.rescore(scored, cfg)
                meta = _page_rows(conn, scored)
                return Listing(scored, match[0], notes_cut[0]), meta
            kw_spans, kw_raw = spans, raw
            if want_vectors != guess:
                kw_spans = keyword_spans(keyword, self._radius(want_vectors), cfg.expand)
                kw_raw = fetch_spans(conn, kw_spans, want_vectors, filters.active)
            near = cfg.vector_window if want_vectors else 0
            more = subtract(vector_spans(conn, keyword, knn, near, cfg.expand), kw_spans)
            rows = build_rows(
                kw_raw + fetch_spans(conn, more, want_vectors, filters.active),
                want_vectors,
                dims,
                self.zone,
                named,
            )
            scored = fuse(cfg, query, filters, rows, keyword, knn, abbr, qvec, names)
            if (
                cfg.soft_coverage
                and self.term_features
                and vectors is not None
                and vectors.terms_ready
            ):
                soft.attach(scored, vectors.terms.bind(conn), cfg.ranker_depth)
            scored = learned.apply(scored, cfg)
            scored.titles = titles
            if rescore:
                scored = conversation_list.rescore(scored, cfg)
            meta = _page_rows(conn, scored)
            return Listing(scored, match[0], len(keyword) >= depth or notes_cut[0]), meta

        def _page_rows(conn: SyncConn, scored: Scored) -> dict[str, tuple[Any, ...]]:
            if page is None:
                return {}
            offset, limit = page
            shown = scored.conversations[offset : offset + limit]
            return conversation_rows(conn, [c for c, _ in shown])

        return await self.db.run(_rank, write=False)

    def _radius(self, want_vectors: bool) -> int:
        """Neighbours loaded around the best keyword hits (they feed both windows)."""
        cfg = self.config.search
        return max(cfg.keyword_window, cfg.vector_window if want_vectors else 0)
