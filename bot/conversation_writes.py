"""The append path of :class:`bot.conversations.ConversationManager`.

A durable transcript append, then the index update (:func:`bot.index_writes.apply_lines`)
and, chained after it, an optional write to another database (a reply's outbox row),
run off the event loop as one chain; and what happens when the index write fails: the
transcript stays the source of truth, the cached record is kept right in memory and the
index catches up on the next write. Apart from the manager's public API because this is
the durability protocol every change goes through, with its own failure handling.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bot.db import CHAINED, AfterWrite, Database, SyncConn
from bot.index import ConversationIndex, ConversationRecord
from bot.index_writes import apply_lines, date_by_turn
from bot.record_cache import RecordCache
from bot.transcript import TranscriptStore
from bot.transcript_lines import Line

log = logging.getLogger("my_agent.conversations")

# A write chained after a turn's index update: (database, unit of work).
Also = tuple[Database, Callable[[SyncConn], Any]]


class ConversationWrites:
    """The append half of :class:`~bot.conversations.ConversationManager` (callers hold
    the conversation's lock)."""

    store: TranscriptStore
    index: ConversationIndex
    _cache: RecordCache[ConversationRecord]
    _index_behind: set[str]

    if TYPE_CHECKING:  # the manager's own (bot.conversations)

        async def require(self, conv_id: str) -> ConversationRecord: ...

    async def _append(
        self,
        conv_id: str,
        lines: builtins.list[Line],
        also: Also | None = None,
        background: bool = False,
    ) -> ConversationRecord:
        """Durable transcript append, then index update (caller holds the lock).

        ``also`` (a database and a unit of work) is written after the index, still
        before this returns, whether or not the index update succeeded: e.g. the outbox
        row of a reply, which must only exist once the reply is durable.

        Both run off the event loop as one chain: the transcript thread writes and
        fsyncs, then queues the index update in the database's group commit; the loop
        wakes up once, when both are done. ``background`` (a reply): the transcript append
        may wait to share the next incoming message's fsync
        (:meth:`bot.journal.Journal.submit`).
        """
        rec = await self.require(conv_id)
        updated = _copy(rec)
        if conv_id in self._index_behind:
            # An earlier index write failed: catch up from the transcript instead.
            await self.store.append(conv_id, lines)
            try:
                updated = await self._catch_up(updated)
            except Exception:
                self._index_failed(conv_id, updated, lines)
            self._cache[conv_id] = updated
            self.index.note_refs(lines, updated.channel)
            if also is not None:
                await also[0].run(also[1])
            return updated
        db = self.index.db
        if also is not None:
            return await self._append_also(conv_id, updated, lines, also, background)
        async with self.store.lock(conv_id):
            write = self.store.submit_append(conv_id, lines, background)
            try:
                await db.run(
                    AfterWrite(write, lambda c, size: apply_lines(c, updated, lines, size))
                )
            except Exception as exc:
                await asyncio.wrap_future(write)  # a failed transcript write raises here
                self._index_failed(conv_id, updated, lines, exc)
        self._cache[conv_id] = updated
        self.index.note_refs(lines, updated.channel)
        return updated

    async def _append_also(
        self,
        conv_id: str,
        updated: ConversationRecord,
        lines: builtins.list[Line],
        also: Also,
        background: bool = False,
    ) -> ConversationRecord:
        """Transcript -> index -> ``also`` as one chain across three threads: the loop
        wakes up once, when the last write is committed."""
        also_db, also_fn = also
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def _after_index(ok: bool, value: Any) -> Any:
            index_error = None if ok else value
            also_db.submit(also_fn, future, lambda ok2, value2: (index_error, ok2, value2))
            return CHAINED

        async with self.store.lock(conv_id):
            write = self.store.submit_append(conv_id, lines, background)
            self.index.db.chain(
                AfterWrite(write, lambda c, size: apply_lines(c, updated, lines, size)),
                future,
                _after_index,
            )
            index_error, ok, value = await future  # a failed transcript write raises
        if index_error is not None:
            self._index_failed(conv_id, updated, lines, index_error)
        self._cache[conv_id] = updated
        self.index.note_refs(lines, updated.channel)
        if not ok:
            raise value
        return updated

    def _index_failed(
        self,
        conv_id: str,
        updated: ConversationRecord,
        lines: builtins.list[Line],
        error: BaseException | None = None,
    ) -> None:
        # The transcript is the source of truth and already has the lines; the index
        # catches up on the next write or at the next start.
        log.error("index update failed for %s; will catch up", conv_id, exc_info=error or True)
        self._index_behind.add(conv_id)
        for line in lines:  # keep the in-memory view right for routing decisions
            _apply_in_memory(updated, line)

    async def _catch_up(self, rec: ConversationRecord) -> ConversationRecord:
        lines, offset = self.store.read_from(rec.id, rec.indexed_bytes)
        fresh = _copy(rec)
        await self.index.db.run(lambda c: apply_lines(c, fresh, lines, offset))
        self._index_behind.discard(rec.id)
        return fresh


def _copy(rec: ConversationRecord) -> ConversationRecord:
    """A working copy for an index update (the cached record stays intact on failure)."""
    # a shallow copy of the fields, not dataclasses.replace or copy.copy: no __init__
    # and no pickle protocol run per message (a hot path)
    new = object.__new__(ConversationRecord)
    new.__dict__.update(rec.__dict__)
    new.topics = list(rec.topics)
    new.participants = list(rec.participants)
    new.channel_meta = dict(rec.channel_meta)
    return new


def _apply_in_memory(rec: ConversationRecord, line: Mapping[str, Any]) -> None:
    """Mirror of apply_line for the cache when the index could not be written."""
    if line.get("type") == "turn" and isinstance(line.get("turnNumber"), int):
        first = rec.turn_count == 0
        rec.turn_count = max(rec.turn_count, line["turnNumber"])
        if isinstance(line.get("timestamp"), str):
            date_by_turn(rec, line["timestamp"], first=first)
    elif line.get("type") == "event" and line.get("event") in ("meta_update", "title_assigned"):
        for key, attr in (
            ("title", "title"),
            ("model", "model"),
            ("pinned", "pinned"),
            ("manuallyNamed", "manually_named"),
        ):
            if key in line:
                setattr(rec, attr, line[key])
