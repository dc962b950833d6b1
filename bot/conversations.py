"""The conversation manager: one writer for transcripts and the index.

Every change is first appended durably to the conversation's transcript, then reflected
in the index through :func:`bot.index_writes.apply_lines` (the same code recovery uses),
then announced on the :class:`~bot.hooks.EventBus` (the append path itself:
bot/conversation_writes.py). Routing state (pinned, identity, model)
travels in the transcript too (``meta`` extensions and ``meta_update`` events), so a
deleted ``conversations.db`` is rebuilt exactly.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from bot.config import AppConfig
from bot.conversation_updates import ConversationUpdates
from bot.conversation_writes import Also, ConversationWrites
from bot.db import SyncConn
from bot.hooks import EventBus
from bot.index import (
    SELECT_CONVERSATION,
    ConversationIndex,
    ConversationRecord,
    row_to_record,
    upsert_conversation,
)
from bot.index_writes import conversation_meta, meta_from_record, record_from_meta
from bot.record_cache import RECORDS, RecordCache, keyed_locks
from bot.transcript import TranscriptStore
from bot.transcript_lines import (
    Line,
    event_line,
    new_conversation_id,
    recallable,
    turn_line,
)

log = logging.getLogger("my_agent.conversations")


class ConversationNotFound(LookupError):
    pass


class ConversationManager(ConversationWrites, ConversationUpdates):
    """Create, resume, switch, rename and append to conversations (the metadata
    changes: :class:`~bot.conversation_updates.ConversationUpdates`; the append path:
    :class:`~bot.conversation_writes.ConversationWrites`)."""

    def __init__(
        self, config: AppConfig, store: TranscriptStore, index: ConversationIndex, bus: EventBus
    ) -> None:
        self.config = config
        self.store = store
        self.index = index
        self.bus = bus
        self._index_behind: set[str] = set()
        # The records read lately (bounded: the daemon runs for months); a record ahead
        # of the index (a failed index write) is the only copy of its state: kept.
        self._cache: RecordCache[ConversationRecord] = RecordCache(
            RECORDS, keep=self._index_behind.__contains__
        )
        # identity_key -> pinned conversation id, as many as records are kept: a pin
        # dropped is read from the index again (pinned_for). Before session 41 one stayed
        # per e-mail thread and group ever seen, for the life of the daemon.
        self._pins: RecordCache[str] = RecordCache(RECORDS)
        self._locks = keyed_locks()
        # notes for the next reply (a split offer), of the latest conversations only:
        # before session 41 those no reply ever carried stayed for the life of the daemon
        self._notes: RecordCache[list[str]] = RecordCache(RECORDS)
        # channel -> the conversation created or given a turn last by this process (see
        # most_recent)
        self._latest: dict[str, str] = {}
        store.meta_for = self._meta_for

    def _meta_for(self, conv_id: str) -> Line | None:
        """The meta line of a conversation whose transcript is gone (deleted while the
        daemon runs): the next append recreates the file with it (on a writing thread)."""
        rec = self._cache.peek(conv_id)
        return meta_from_record(rec) if rec is not None else None

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
        """The ``channel``'s conversation with the latest activity: the one this process
        created or gave a turn last, else the index's latest ``updated``. By timestamps
        alone, once the clock was set back, a conversation started after ``/new`` dated
        before the previous one's last turn, and the next message went to the previous
        one until the clock caught up."""
        latest = self._latest.get(channel)
        if latest is not None:
            rec = await self.get(latest)
            if rec is not None and rec.channel == channel:
                return rec
        found = await self.index.list(channel=channel, limit=1)
        return found[0] if found else None

    async def pinned_for(self, identity_key: str) -> ConversationRecord | None:
        # Every pin change goes through this manager, so the cached record is authoritative.
        cached = self._cache.get(self._pins.get(identity_key) or "")
        if cached is not None and cached.pinned and cached.identity_key == identity_key:
            return cached
        row = await self.index.db.fetchone(
            f"{SELECT_CONVERSATION} WHERE identity_key = ? AND pinned = 1", (identity_key,)
        )
        if row is None:
            return None
        rec = self._cache.get(row[0]) or row_to_record(row)
        self._cache[rec.id] = rec
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
        what was said, :func:`bot.transcript_lines.recallable`)."""
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
        meta = conversation_meta(
            conv_id,
            channel,
            participants,
            identity_key=identity_key,
            pinned=pinned,
            model=model or self.config.models.default,
            channel_meta=channel_meta,
        )
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

        try:
            await self.index.db.run(_insert)
        except Exception:
            # The unit rolled back (a full disk): the file holds nothing anyone sent, and
            # left there it came back after a restart as an empty extra conversation
            # beside the one the message's retry created.
            await self.store.discard_created(conv_id, size)
            raise
        if rec.pinned and rec.identity_key:
            for other in self._cache.values():  # the index unpinned them just now
                if other.identity_key == rec.identity_key and other.pinned:
                    other.pinned = False
            self._pins[rec.identity_key] = conv_id
        self._cache[conv_id] = rec
        self._latest[rec.channel] = conv_id
        log.info("created %s (%s%s)", conv_id, channel, ", pinned" if pinned else "")
        await self.bus.emit("conversation_created", conversation=rec, reason=reason)
        return rec

    # -- appending (the write path itself: bot/conversation_writes.py) -----------------
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
            self._latest[rec.channel] = conv_id
        await self.bus.emit("turn_appended", conversation_id=conv_id, turn=line, conversation=rec)
        return rec, line

    async def append_event(self, conv_id: str, event: str, **fields: Any) -> Line:
        line = event_line(event, **fields)
        async with self._lock(conv_id):
            await self._append(conv_id, [line])
        await self.bus.emit("event_appended", conversation_id=conv_id, event=line)
        return line
