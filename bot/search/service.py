"""SearchService: the one engine behind ``search_conversations``, ``my-agent search`` and
``/search`` (SPEC.md "Search").

The ranking of a query (keyword and vector stages side by side, fused) is
:class:`~bot.search.scoring.QueryScoring`, its base; this module adds the pages, the cursors
that continue them and the caches that serve the next page without ranking again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database
from bot.embedding import EmbeddingService
from bot.search import cursor as cursors
from bot.search.fusion import Ranked, Scored
from bot.search.keyword import DocFreqs
from bot.search.pages import conversation_rows, loose_count, search_results
from bot.search.query import bounded_query, fts_parts
from bot.search.results import (
    Filters,
    InvalidCursor,
    Ranking,
    SearchPage,
    SearchResult,
    check_range,
    closeness,
    fingerprint,
    iso_date,
)
from bot.search.scoring import CACHED_QUERIES, QueryScoring
from bot.search.senders import Senders
from bot.search.tail import Listing, keyword_tail

if TYPE_CHECKING:
    from bot.vectors import VectorIndex

_PAGE_TTL = 120.0  # seconds a ranking serves the next pages of its cursor
_CURSORS = 256  # cursors whose listed conversations are kept exactly (LRU)


class SearchService(QueryScoring):
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
        asked_in: str | None = None,
    ) -> SearchPage:
        """Conversations matching ``query``, best first, ``limit`` per page.

        ``asked_in``: the conversation a reply searches from, whose own message, waiting
        for its vectors, does not make the page incomplete (``vectors_incomplete``).
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
        if not fts_parts(query):
            # Only punctuation, symbols or emoji: no keyword to match, and the model
            # embeds them as its unknown token, whose "nearest" turns are any. They were
            # listed as found, the first scored 1.0 (the offline brain replied to a 👍
            # with three unrelated conversations): nothing is searched, and it says so.
            method = "hybrid" if self._will_embed(query) else "keyword"
            return SearchPage([], None, 0, method, no_words=True)
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
            while len(self._pages) > CACHED_QUERIES:
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
        scored = listing.scored
        incomplete = self._vectors_incomplete(scored.method, asked_in)
        if listing.loose is None:  # once per ranking: its later pages count the same
            listing.loose = loose_count(scored)
        return SearchPage(
            results,
            next_cursor,
            listing.known,
            scored.method,
            listing.total_exact,
            loose=listing.loose,
            match=closeness(
                scored.method, scored.shares_words(), scored.best_cosine(), scored.dated()
            ),
            vectors_incomplete=incomplete,
            vectors_rebuilding=incomplete and self.vectors is not None and self.vectors.rebuilding,
        )

    def _vectors_incomplete(self, method: str, asked_in: str | None = None) -> bool:
        """Whether a hybrid ranking had only part of the turn and note vectors
        (``VectorIndex.missing``): a new model dropped them all, turns were added while
        keyword-only, or some failed to embed and wait for a retry; or new turns wait in
        the embedding queue, other than ``asked_in``'s (``VectorIndex.waiting``: before
        session 41 a message of a second ago was found by its words at once, by meaning
        1-3 s later, and the page did not say so). Not a rebuild with
        nothing missing (the daemon's at every start: every search after a restart said
        so), nor one completing only the word vectors of soft coverage, which change the
        ranking's features and miss no conversation (``VectorIndex.stale`` counted them)."""
        vectors = self.vectors
        if method != "hybrid" or vectors is None:
            return False
        return bool(vectors.missing or vectors.waiting(asked_in))

    async def _resolve(self, listing: Listing, state: cursors.Cursor, filters: Filters) -> set[str]:
        """The conversations listed before a cursor this process does not hold, found in
        ``listing`` (whose tail is read first when the cursor may reach into it: its
        prefix covers the ranked ones, or a listed one dropped below the prefix; or, read
        after, when the ranked ones alone do not resolve it)."""
        ranked = len(listing.scored.conversations)
        if listing.saturated and listing.tail is None and (state.extra or state.prefix >= ranked):
            await self._read_tail(listing, filters)
        listed = cursors.resolve(state, listing.order())
        if listed is None and listing.saturated and listing.tail is None:
            # A new matching turn ranks its conversation among the best ``candidates``
            # turns and pushes the last ranked one into the unread tail: when that one
            # was listed, the prefix's hash names a conversation the ranked ones lack.
            # Before session 41 the cursor was refused ("changed too much") after one
            # new message whenever the words matched more turns than ``candidates``.
            # Read only here: a first page, and a cursor that resolves, never pay it.
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
            lambda c: keyword_tail(c, listing.match, filters, listed, floor, self.config.search),
            write=False,
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

    async def _materialise(
        self, page: list[Ranked], query: str, meta: dict[str, tuple[Any, ...]] | None = None
    ) -> list[SearchResult]:
        if not page:
            return []
        if meta is None:
            conv_ids = [r.conversation_id for r in page]
            meta = await self.db.run(lambda c: conversation_rows(c, conv_ids), write=False)
        # off the event loop: a snippet flattens and scans its turn, a pasted log of
        # megabytes (session 40)
        return await asyncio.to_thread(search_results, page, query, meta)
