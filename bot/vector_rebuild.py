"""Rebuilding the vectors: every missing or outdated one (after ``my-agent reindex`` or a
model change), and the retry of what a failed pass left, which the lifecycle's sweep
runs. A part of :class:`bot.vectors.VectorIndex` (its base): the writes themselves go
through its ``index_turns`` and ``index_abbreviation``, one at a time under its lock.

A rebuild gives way to live work: it may wait for something first (the daemon: the
notes a previous run left owed, cheap and what makes those conversations findable), it
embeds in the background (:mod:`bot.embedding_priority`: a search's or a reply's
embedding goes first), and it takes a conversation :data:`REBUILD_SLICE` windows at a
time, so a reply's own windows wait for one slice at most, not for a whole long
conversation. :attr:`VectorRebuild.progress` says how far it is (``/status``, the
status line, ``my-agent status``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.db import Database
from bot.embedding import EmbeddingService
from bot.embedding_priority import in_background
from bot.term_vectors import index_all_terms, term_count
from bot.vector_store import prune

if TYPE_CHECKING:
    from bot.vector_knn import VectorMatrices

log = logging.getLogger("my_agent.vectors")

# Windows a rebuild embeds under the index's lock at a time (a few background batches).
REBUILD_SLICE = 16


@dataclass
class RebuildProgress:
    """How far a rebuild is: waiting for what comes first, or ``done`` of ``total``
    conversations with ``windows`` turn windows embedded so far."""

    waiting: bool = False
    done: int = 0
    total: int = 0
    windows: int = 0


class VectorRebuild:
    """The rebuild half of :class:`~bot.vectors.VectorIndex`."""

    db: Database
    embedder: EmbeddingService
    stale: bool
    missing: bool
    build_terms: bool
    terms_ready: bool
    _knn: VectorMatrices | None
    _lock: asyncio.Lock
    _rebuild_lock: asyncio.Lock
    _unfinished: set[str]
    # The rebuild under way (None: none), from the moment it is asked for.
    progress: RebuildProgress | None = None

    if TYPE_CHECKING:  # VectorIndex's own

        @property
        def ready(self) -> bool: ...

        async def index_turns(self, conversation_id: str, limit: int | None = None) -> int: ...

        async def index_abbreviation(self, conversation_id: str, text: str | None) -> bool: ...

    @property
    def rebuilding(self) -> bool:
        """A rebuild (:meth:`reindex_all`) is running, or waits to: vectors are missing
        meanwhile."""
        return self._rebuild_lock.locked() or self.progress is not None

    async def reindex_all(self, after: Awaitable[Any] | None = None) -> dict[str, int]:
        """Embed every missing or outdated vector (after ``reindex`` or a model change),
        in the background (live embeddings first); ``after`` is awaited first, the
        rebuild said to be waiting meanwhile."""
        if not self.ready:
            if after is not None:
                await after
            return {"turns": 0, "abbreviations": 0, "terms": 0}
        progress = self.progress = RebuildProgress(waiting=after is not None)
        try:
            if after is not None:
                await after
            progress.waiting = False
            async with self._rebuild_lock:
                with in_background():
                    return await self._reindex_all(progress)
        finally:
            if self.progress is progress:
                self.progress = None

    async def _reindex_all(self, progress: RebuildProgress) -> dict[str, int]:
        rows = await self.db.fetchall("SELECT id, abbreviation FROM conversations ORDER BY updated")
        progress.total = len(rows)
        done = {"turns": 0, "abbreviations": 0}
        words_before = await term_count(self.db) if self.build_terms else 0
        failed = 0
        for conv_id, abbreviation in rows:
            # One error (a text the model chokes on, memory for a moment) ended the whole
            # rebuild: every conversation after it kept no vector until a restart.
            failed += not await self._embed_conversation(str(conv_id), abbreviation, done)
            progress.done += 1
            progress.windows = done["turns"]
            await asyncio.sleep(0)  # let interactive work in between conversations
        terms = 0
        if self.build_terms:
            failed += not await self._complete_terms()
            terms = await term_count(self.db) - words_before
        # No reload of the in-memory matrix here: open() read it, every write upserts
        # into it and the prune takes out what it drops. Before session 39 the matrix
        # was read again at this point, outside the lock: a turn embedded meanwhile (a
        # message of the backlog delivered at start) went into the old matrix only, and
        # search by meaning missed it until a restart.
        await self._prune()
        self.stale = failed > 0  # retry_unfinished (the lifecycle's sweep) finishes it
        # every conversation was embedded but those recorded: only theirs are missing
        # (word vectors that failed leave the soft features out, nobody is missed)
        self.missing = bool(self._unfinished)
        # every start runs this: with nothing to do, it is not news
        log.log(
            logging.INFO if failed or terms or any(done.values()) else logging.DEBUG,
            "reindexed vectors: %d turn windows, %d abbreviations, %d words (%d failed)",
            done["turns"],
            done["abbreviations"],
            terms,
            failed,
        )
        return {**done, "terms": terms}

    async def _embed_conversation(
        self, conv_id: str, abbreviation: str | None, done: dict[str, int]
    ) -> bool:
        """Embed one conversation's outdated windows and its abbreviation, counting them
        in ``done``; False (logged, and kept for :meth:`retry_unfinished`) if it failed."""
        try:
            while True:  # a slice at a time: the lock is free for a reply in between
                written = await self.index_turns(conv_id, limit=REBUILD_SLICE)
                done["turns"] += written
                if written < REBUILD_SLICE:
                    break
            if abbreviation and await self.index_abbreviation(conv_id, str(abbreviation)):
                done["abbreviations"] += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._unfinished.add(conv_id)
            log.warning("embedding %s failed (%s); rebuilding the others", conv_id, exc)
            return False
        self._unfinished.discard(conv_id)
        return True

    async def _complete_terms(self) -> bool:
        """A full scan of every turn's words, when the term vectors are incomplete;
        False if it failed (ranked without them until a retry completes them)."""
        if not self.build_terms or self.terms_ready:
            return True
        async with self._lock:
            try:
                _, complete = await index_all_terms(self.db, self.embedder)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("embedding the term vectors failed (%s)", exc)
                return False
            self.terms_ready = complete
        return True

    async def retry_unfinished(self) -> bool | None:
        """Embed again what a failed pass left (``stale``): the conversations whose
        embedding failed, the term vectors; a full :meth:`reindex_all` when the rebuild
        never ran to its end. True when the vectors are now complete, False when some
        failed again, None when there was nothing to do or a rebuild is running.

        Before, a partly failed rebuild (a model that fails on some texts) was finished
        only by the next start or ``my-agent reindex``: those conversations were found by
        keyword only meanwhile. The caller (the lifecycle's sweep) backs off on False.
        """
        if not self.ready or not self.stale or self.rebuilding:
            return None  # (a rebuild waiting for the owed notes is not to be overtaken)
        if not self._unfinished and (self.terms_ready or not self.build_terms):
            await self.reindex_all()  # stale with nothing recorded: a rebuild cut short
            return not self.stale
        async with self._rebuild_lock:
            with in_background():  # (live embeddings first, as in a rebuild)
                return await self._retry_each()

    async def _retry_each(self) -> bool:
        """Embed the conversations recorded as unfinished, then the term vectors."""
        failed = 0
        done = {"turns": 0, "abbreviations": 0}
        for conv_id in sorted(self._unfinished):
            row = await self.db.fetchone(
                "SELECT abbreviation FROM conversations WHERE id = ?", (conv_id,)
            )
            if row is None:  # deleted meanwhile
                self._unfinished.discard(conv_id)
                continue
            failed += not await self._embed_conversation(conv_id, row[0], done)
            await asyncio.sleep(0)
        failed += not await self._complete_terms()
        self.stale = failed > 0
        self.missing = bool(self._unfinished)
        log.info(
            "retried unfinished vectors: %d turn windows, %d abbreviations (%d failed)",
            done["turns"],
            done["abbreviations"],
            failed,
        )
        return not self.stale

    async def _prune(self) -> None:
        """Drop the vectors of turns that are gone or are readouts (:func:`prune`), from
        the tables and the in-memory matrix together (under the lock: no write comes
        in between)."""
        async with self._lock:
            gone = await self.db.run(prune)
            if gone and self._knn is not None:
                self._knn.turns.remove(set(gone))
