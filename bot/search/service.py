"""SearchService: the one engine behind ``search_conversations``, ``my-agent search`` and
``/search`` (SPEC.md "Search").

The keyword stage (:mod:`bot.search.keyword`) and the vector stage (:mod:`bot.vectors`) run
side by side; their candidates and neighbour windows are loaded in one hop
(:mod:`bot.search.rows`) and fused (:mod:`bot.search.fusion`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.named_dates import query_dates
from bot.owner_days import owner_zone
from bot.search import conversations as conversation_list
from bot.search import cursor as cursors
from bot.search import learned, soft
from bot.search.fusion import Ranked, Scored, fuse
from bot.search.keyword import DocFreqs, fts_candidates
from bot.search.pages import conversation_rows, search_results
from bot.search.pool import (
    Pool,
    accepted,
    dated_filters,
    narrows,
    pool_of,
    scoped_candidates,
    turn_pool,
)
from bot.search.query import (
    bounded_query,
    fts_parts,
    fts_words,
    name_terms,
    or_terms,
    query_terms,
)
from bot.search.results import (
    Filters,
    InvalidCursor,
    Ranking,
    SearchPage,
    SearchResult,
    check_range,
    fingerprint,
    iso_date,
)
from bot.search.rows import build_rows, fetch_spans, subtract
from bot.search.senders import Senders
from bot.search.spans import Hit, Spans, keyword_spans, vector_spans
from bot.search.tail import Listing, keyword_tail

if TYPE_CHECKING:
    from bot.vectors import VectorIndex

log = logging.getLogger("my_agent.search")

_CACHED_QUERIES = 64  # query embeddings and rankings kept (LRU)
_PAGE_TTL = 120.0  # seconds a ranking serves the next pages of its cursor
_CURSORS = 256  # cursors whose listed conversations are kept exactly (LRU)


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
        # a date the query names is a day of the owner's calendar (Rows.days), and
        # "yesterday" is the day before the owner's today (query_dates)
        self.zone = owner_zone(config)
        self.now: Callable[[], datetime] = lambda: datetime.now(UTC)
        if vectors is None and embedder is not None:
            from bot.vectors import VectorIndex

            vectors = VectorIndex(config, db, embedder)
        self.vectors = vectors
        self._opened = False
        self._open_lock = asyncio.Lock()
        self._sender_names = Senders()
        self._freqs = DocFreqs()
        # per-query work kept for repeats: query embeddings (the same question asked again,
        # by the agent or another page) and rankings (a cursor continues the same ranking)
        self._query_vectors: dict[str, np.ndarray] = {}
        self._pages: dict[bytes, tuple[float, Listing]] = {}
        # the conversations listed before each recent cursor of this process, exactly: a
        # cursor only summarises them (bot.search.cursor), matched against the ranking
        # when it comes from another process or an earlier run
        self._listed: dict[str, frozenset[str]] = {}
        # the learned ranker's soft coverage (``search.soft_coverage``) reads the term
        # vectors when they are complete; False ranks as without them (benchmarks
        # measure that degraded mode)
        self.term_features = True

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
        query = bounded_query(query)
        filters = Filters(
            (channel or "").strip().lower() or None,  # channel names are lower case
            iso_date(date_from, "date_from"),
            iso_date(date_to, "date_to"),
            conversation_id,
        )
        check_range(filters.date_from, filters.date_to)
        limit = max(1, min(int(limit), 100))
        key = fingerprint(query, filters)
        state = cursors.decode(cursor, key) if cursor else None
        cached = self._pages.get(key) if cursor else None
        meta: dict[str, tuple[Any, ...]] | None = None
        if cached is not None and time.monotonic() - cached[0] < _PAGE_TTL:
            # the next page of a ranking made moments ago: the same order, no re-ranking
            listing = cached[1]
        else:
            # a first page reads its rows with the ranking; a later one below, by id
            listing, rows = await self._score(query, filters, None if cursor else (0, limit))
            meta = None if cursor else rows
            self._pages[key] = (time.monotonic(), listing)
            while len(self._pages) > _CACHED_QUERIES:
                self._pages.pop(next(iter(self._pages)))
        listed: set[str] | frozenset[str] = frozenset()
        if cursor and state is not None:
            listed = self._listed.get(cursor) or await self._resolve(listing, state, filters)
        if listing.needs_tail(listed, limit):  # paging past the ranked ones (bot.search.tail)
            await self._read_tail(listing, filters)
            meta = None  # the tail's conversations were not read with the ranking
        # The conversations not listed yet, best first: whichever ranking serves the
        # page (this one, or one made again since with new turns), none comes twice and
        # none is skipped. An offset into a ranking made again did both.
        items, more = listing.page(listed, limit)
        results = await self._materialise(items, query, meta)
        next_cursor = None
        if more:
            now_listed = frozenset(listed | {item.conversation_id for item in items})
            next_cursor = cursors.encode(cursors.after(now_listed, listing.order(), key))
            self._listed[next_cursor] = now_listed
            while len(self._listed) > _CURSORS:
                self._listed.pop(next(iter(self._listed)))
        return SearchPage(
            results, next_cursor, listing.known, listing.scored.method, listing.total_exact
        )

    async def _resolve(self, listing: Listing, state: cursors.Cursor, filters: Filters) -> set[str]:
        """The conversations listed before a cursor this process does not hold, found in
        ``listing`` (whose tail is read first when the cursor may reach into it: its
        prefix covers the ranked ones, or a listed one dropped below the prefix)."""
        ranked = len(listing.scored.conversations)
        if listing.saturated and listing.tail is None and (state.extra or state.prefix >= ranked):
            await self._read_tail(listing, filters)
        listed = cursors.resolve(state, listing.order())
        if listed is None:
            raise InvalidCursor("the results changed too much since the last page: search again")
        return listed

    async def _read_tail(self, listing: Listing, filters: Filters) -> None:
        ranked = listing.scored.conversations
        listed = {c for c, _ in ranked}
        floor = ranked[-1][1] if ranked else 1.0
        listing.tail, listing.tail_complete = await self.db.run(
            lambda c: keyword_tail(c, listing.match, filters, listed, floor), write=False
        )

    async def rank(self, query: str, filters: Filters | None = None) -> Ranking:
        """The full ranking behind :meth:`search`: every turn and conversation, best first.

        Used by benchmarks and diagnostics (turn-level recall needs the turn order).
        """
        query = bounded_query(query)
        scored = (await self._score(query, filters or Filters()))[0].scored
        return Ranking(
            turns=scored.hits(), conversations=scored.conversations, method=scored.method
        )

    async def scored(self, query: str, filters: Filters | None = None) -> Scored:
        """The fused ranking with its signals, as the learned ranker's features see it:
        before the conversation list's re-scoring (``my-agent bench ranker`` trains on
        these, so training and ranking read the same conversation order)."""
        query = bounded_query(query)
        return (await self._score(query, filters or Filters(), rescore=False))[0].scored

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
        while len(self._query_vectors) > _CACHED_QUERIES:
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
        parts = fts_parts(query) if not names or not rest else fts_words(rest)
        depth = cfg.candidates
        freqs = self._freqs
        dims = self.embedder.dimensions if self.embedder is not None else 0
        # the windows' radius depends on whether the query gets a vector: guessed for the
        # keyword hop, redone in the second hop in the rare case the embedding failed
        guess = self._will_embed(query)

        match = [""]  # the keyword stage's FTS5 query, for the tail (bot.search.tail)
        # a filtered search takes its vector candidates among the turns that pass the
        # filter, and the dates a query names add their nearest turns (bot.search.pool)
        named = query_dates(query, self.now().astimezone(self.zone).date())
        dated = dated_filters(named, filters, self.zone) if guess and cfg.date_candidates else []
        narrowed = guess and narrows(filters)
        pools: list[Pool | None] = [None, None]  # the filter's, the named dates'

        def _keyword(conn: SyncConn) -> tuple[list[Hit], Spans, list[Any]]:
            if narrowed:
                pools[0] = turn_pool(conn, filters, conversations=True)
            if dated:
                pools[1] = pool_of(conn, dated)
            if not parts:
                return [], {}, []
            match[0] = or_terms(freqs.selective(conn, parts))
            hits = fts_candidates(conn, match[0], filters, depth)
            spans = keyword_spans(hits, self._radius(guess), cfg.expand)
            return hits, spans, fetch_spans(conn, spans, guess)

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
            abbr = abbreviations
            if abbr and filters.active and not (narrowed and pools[0] is not None):
                abbr = accepted(conn, abbr, filters)  # (a pool's are chosen among its own)
            if not keyword and not knn and not abbr:
                return Listing(Scored.empty(method)), {}
            kw_spans, kw_raw = spans, raw
            if want_vectors != guess:
                kw_spans = keyword_spans(keyword, self._radius(want_vectors), cfg.expand)
                kw_raw = fetch_spans(conn, kw_spans, want_vectors)
            near = cfg.vector_window if want_vectors else 0
            more = subtract(vector_spans(conn, keyword, knn, near, cfg.expand), kw_spans)
            rows = build_rows(
                kw_raw + fetch_spans(conn, more, want_vectors),
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
            if rescore:
                scored = conversation_list.rescore(scored, cfg)
            meta: dict[str, tuple[Any, ...]] = {}
            if page is not None:
                offset, limit = page
                shown = scored.conversations[offset : offset + limit]
                meta = conversation_rows(conn, [c for c, _ in shown])
            return Listing(scored, match[0], len(keyword) >= depth), meta

        return await self.db.run(_rank, write=False)

    def _radius(self, want_vectors: bool) -> int:
        """Neighbours loaded around the best keyword hits (they feed both windows)."""
        cfg = self.config.search
        return max(cfg.keyword_window, cfg.vector_window if want_vectors else 0)

    async def _materialise(
        self, page: list[Ranked], query: str, meta: dict[str, tuple[Any, ...]] | None = None
    ) -> list[SearchResult]:
        if not page:
            return []
        if meta is None:
            conv_ids = [r.conversation_id for r in page]
            meta = await self.db.run(lambda c: conversation_rows(c, conv_ids), write=False)
        return search_results(page, query, meta)
