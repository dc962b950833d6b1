"""Rebuilding the vectors: every missing or outdated one (after ``my-agent reindex`` or a
model change), and the retry of what a failed pass left, which the lifecycle's sweep
runs. A part of :class:`bot.vectors.VectorIndex` (its base): the writes themselves go
through its ``index_turns`` and ``index_abbreviation``, one at a time under its lock.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bot.db import Database
from bot.embedding import EmbeddingService
from bot.term_vectors import index_all_terms, term_count
from bot.vector_store import prune

if TYPE_CHECKING:
    from bot.vector_knn import VectorMatrices

log = logging.getLogger("my_agent.vectors")


class VectorRebuild:
    """The rebuild half of :class:`~bot.vectors.VectorIndex`."""

    db: Database
    embedder: EmbeddingService
    stale: bool
    build_terms: bool
    terms_ready: bool
    _knn: VectorMatrices | None
    _lock: asyncio.Lock
    _rebuild_lock: asyncio.Lock
    _unfinished: set[str]

    if TYPE_CHECKING:  # VectorIndex's own

        @property
        def ready(self) -> bool: ...

        async def index_turns(self, conversation_id: str) -> int: ...

        async def index_abbreviation(self, conversation_id: str, text: str | None) -> bool: ...

        async def _load_matrix(self, level: int = logging.INFO) -> None: ...

    @property
    def rebuilding(self) -> bool:
        """A rebuild (:meth:`reindex_all`) is running: vectors are missing meanwhile."""
        return self._rebuild_lock.locked()

    async def reindex_all(self) -> dict[str, int]:
        """Embed every missing or outdated vector (after ``reindex`` or a model change)."""
        if not self.ready:
            return {"turns": 0, "abbreviations": 0, "terms": 0}
        async with self._rebuild_lock:
            return await self._reindex_all()

    async def _reindex_all(self) -> dict[str, int]:
        rows = await self.db.fetchall("SELECT id, abbreviation FROM conversations ORDER BY updated")
        done = {"turns": 0, "abbreviations": 0}
        words_before = await term_count(self.db) if self.build_terms else 0
        failed = 0
        for conv_id, abbreviation in rows:
            # One error (a text the model chokes on, memory for a moment) ended the whole
            # rebuild: every conversation after it kept no vector until a restart.
            failed += not await self._embed_conversation(str(conv_id), abbreviation, done)
            await asyncio.sleep(0)  # let interactive work in between conversations
        terms = 0
        if self.build_terms:
            failed += not await self._complete_terms()
            terms = await term_count(self.db) - words_before
        await self._prune()
        await self._load_matrix(logging.DEBUG)  # open() said the count already
        self.stale = failed > 0  # retry_unfinished (the lifecycle's sweep) finishes it
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
            done["turns"] += await self.index_turns(conv_id)
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
        if not self.ready or not self.stale or self._rebuild_lock.locked():
            return None
        if not self._unfinished and (self.terms_ready or not self.build_terms):
            await self.reindex_all()  # stale with nothing recorded: a rebuild cut short
            return not self.stale
        async with self._rebuild_lock:
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
            log.info(
                "retried unfinished vectors: %d turn windows, %d abbreviations (%d failed)",
                done["turns"],
                done["abbreviations"],
                failed,
            )
            return not self.stale

    async def _prune(self) -> None:
        """Drop the vectors of turns that are gone or are readouts (:func:`prune`)."""
        gone = await self.db.run(prune)
        if gone and self._knn is not None:
            self._knn.turns.remove(set(gone))
