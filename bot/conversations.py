"""The conversation manager: one writer for transcripts and the index.

Every change is first appended durably to the conversation's transcript, then reflected
in the index through :func:`bot.index_writes.apply_lines` (the same code recovery uses),
then announced on the :class:`~bot.hooks.EventBus`. Routing state (pinned, identity, model)
travels in the transcript too (``meta`` extensions and ``meta_update`` events), so a
deleted ``conversations.db`` is rebuilt exactly.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bot.config import AppConfig
from bot.conversation_updates import ConversationUpdates
from bot.db import CHAINED, AfterWrite, Database, SyncConn
from bot.hooks import EventBus
from bot.index import (
    SELECT_CONVERSATION,
    ConversationIndex,
    ConversationRecord,
    row_to_record,
    upsert_conversation,
)
from bot.index_writes import apply_lines, record_from_meta
from bot.transcript import (
    Line,
    TranscriptStore,
    event_line,
    meta_line,
    new_conversation_id,
    recallable,
    turn_line,
)

log = logging.getLogger("my_agent.conversations")

# A write chained after a turn's index update: (database, unit of work).
Also = tuple[Database, Callable[[SyncConn], Any]]


class ConversationNotFound(LookupError):
    pass


class ConversationManager(ConversationUpdates):
    """Create, resume, switch, rename and append to conversations (the metadata
    changes: :class:`~bot.conversation_updates.ConversationUpdates`)."""

    def __init__(
        self, config: AppConfig, store: TranscriptStore, index: ConversationIndex, bus: EventBus
    ) -> None:
        self.config = config
        self.store = store
        self.index = index
        self.bus = bus
        self._cache: dict[str, ConversationRecord] = {}
        self._pins: dict[str, str] = {}  # identity_key -> pinned conversation id
        self._locks: dict[str, asyncio.Lock] = {}
        self._notes: dict[str, list[str]] = {}
        self._index_behind: set[str] = set()

    def _lock(self, conv_id: str) -> asyncio.Lock:
        lock = self._locks.get(conv_id)
        if lock is None:
            lock = self._locks[conv_id] = asyncio.Lock()
        return lock

    # -- reading ----------------------------------------------------------------------
    async def get(self, conv_id: str) -> ConversationRecord | None:
        rec = self._cache.get(conv_id)
        if rec is None:
            rec = await self.index.get(conv_id)
            if rec is not None:
                self._cache[conv_id] = rec
        return rec

    async def require(self, conv_id: str) -> ConversationRecord:
        rec = await self.get(conv_id)
        if rec is None:
            raise ConversationNotFound(conv_id)
        return rec

    async def list(
        self,
        channel: str | None = None,
        limit: int = 50,
        offset: int = 0,
        pinned: bool | None = None,
    ) -> list[ConversationRecord]:
        return await self.index.list(channel=channel, limit=limit, offset=offset, pinned=pinned)

    async def most_recent(self, channel: str = "web") -> ConversationRecord | None:
        found = await self.index.list(channel=channel, limit=1)
        return found[0] if found else None

    async def pinned_for(self, identity_key: str) -> ConversationRecord | None:
        # Every pin change goes through this manager, so the cached record is authoritative.
        cached = self._cache.get(self._pins.get(identity_key, ""))
        if cached is not None and cached.pinned and cached.identity_key == identity_key:
            return cached
        row = await self.index.db.fetchone(
            f"{SELECT_CONVERSATION} WHERE identity_key = ? AND pinned = 1", (identity_key,)
        )
        if row is None:
            return None
        rec = row_to_record(row)
        rec = self._cache.setdefault(rec.id, rec)
        self._pins[identity_key] = rec.id
        return rec

    def read_lines(self, conv_id: str) -> builtins.list[Line]:
        return self.store.read_lines(conv_id)

    async def read_turns(
        self,
        conv_id: str,
        from_turn: int | None = None,
        to_turn: int | None = None,
        *,
        readouts: bool = True,
    ) -> builtins.list[Line]:
        """Turn lines (both roles) with ``from_turn <= turnNumber <= to_turn``; without
        the offline brain's readouts when ``readouts`` is False (notes and naming read
        what was said, :func:`bot.transcript.recallable`)."""
        lines = await self.store.aread_lines(conv_id)
        out = []
        for line in lines:
            if line.get("type") != "turn" or not (readouts or recallable(line)):
                continue
            number = line.get("turnNumber", 0)
            if from_turn is not None and number < from_turn:
                continue
            if to_turn is not None and number > to_turn:
                continue
            out.append(line)
        return out

    # -- creating ---------------------------------------------------------------------
    async def create(
        self,
        channel: str,
        *,
        identity_key: str | None = None,
        pinned: bool = False,
        model: str | None = None,
        participants: Iterable[str] = ("user",),
        channel_meta: Mapping[str, Any] | None = None,
        reason: str = "new",
        conv_id: str | None = None,
    ) -> ConversationRecord:
        """A new conversation; ``conv_id`` when its id was chosen (and recorded) before,
        so that it can be recognised after a crash (``/new``, bot/command_runs.py)."""
        conv_id = conv_id or new_conversation_id()
        meta = meta_line(conv_id, channel, participants)
        if identity_key:
            meta["identityKey"] = identity_key
        if pinned:
            meta["pinned"] = True
        meta["model"] = model or self.config.models.default
        if channel_meta:
            meta["channelMeta"] = dict(channel_meta)
        await self.store.create(meta)
        rec = record_from_meta(meta)
        size = self.store.path(conv_id).stat().st_size

        def _insert(conn: SyncConn) -> None:
            if rec.pinned and rec.identity_key:
                conn.execute(
                    "UPDATE conversations SET pinned = 0 WHERE identity_key = ? AND pinned = 1",
                    (rec.identity_key,),
                )
            rec.indexed_bytes = size
            upsert_conversation(conn, rec)

        await self.index.db.run(_insert)
        if rec.pinned and rec.identity_key:
            for other in self._cache.values():  # the index unpinned them just now
                if other.identity_key == rec.identity_key and other.pinned:
                    other.pinned = False
            self._pins[rec.identity_key] = conv_id
        self._cache[conv_id] = rec
        log.info("created %s (%s%s)", conv_id, channel, ", pinned" if pinned else "")
        await self.bus.emit("conversation_created", conversation=rec, reason=reason)
        return rec

    # -- appending --------------------------------------------------------------------
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

    async def append_turn(
        self,
        conv_id: str,
        role: str,
        content: str,
        *,
        turn_number: int | None = None,
        channel: str | None = None,
        sender: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        also: Also | None = None,
        background: bool = False,
        **extra: Any,
    ) -> tuple[ConversationRecord, Line]:
        """Append a user or assistant turn. A user turn gets the next turn number; an
        assistant turn shares the number of the user turn it answers. ``also``: a write
        made right after (e.g. the reply's outbox row); ``background``: a reply, whose
        append may wait for the next incoming message's fsync; see :meth:`_append`."""
        async with self._lock(conv_id):
            rec = await self.require(conv_id)
            if turn_number is None:
                turn_number = rec.turn_count + 1 if role == "user" else max(rec.turn_count, 1)
            line = turn_line(
                role,
                content,
                turn_number,
                channel=channel,
                sender=sender,
                metadata=dict(metadata) if metadata else None,
                **extra,
            )
            rec = await self._append(conv_id, [line], also, background)
        await self.bus.emit("turn_appended", conversation_id=conv_id, turn=line, conversation=rec)
        return rec, line

    async def append_event(self, conv_id: str, event: str, **fields: Any) -> Line:
        line = event_line(event, **fields)
        async with self._lock(conv_id):
            await self._append(conv_id, [line])
        await self.bus.emit("event_appended", conversation_id=conv_id, event=line)
        return line


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
        rec.turn_count = max(rec.turn_count, line["turnNumber"])
        if isinstance(line.get("timestamp"), str):
            rec.updated = max(rec.updated, line["timestamp"])
    elif line.get("type") == "event" and line.get("event") in ("meta_update", "title_assigned"):
        for key, attr in (
            ("title", "title"),
            ("model", "model"),
            ("pinned", "pinned"),
            ("manuallyNamed", "manually_named"),
        ):
            if key in line:
                setattr(rec, attr, line[key])
