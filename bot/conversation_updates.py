"""Changes to a conversation's metadata: title and topics, notes (abbreviation), model,
channel metadata, pinning and ``/new``.

Each is an event appended to the conversation's transcript like any other line (so a
rebuilt index has it), through the append path of :class:`bot.conversations.
ConversationManager`, which this class is a part of: it holds the store, the index and
the per-conversation locks this code uses.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bot.hooks import EventBus
from bot.index import ConversationIndex, ConversationRecord
from bot.labels import clip_title, plain_title
from bot.record_cache import RecordCache
from bot.transcript_lines import Line, event_line


class ConversationUpdates:
    """The metadata half of :class:`~bot.conversations.ConversationManager`."""

    bus: EventBus
    index: ConversationIndex
    _cache: RecordCache[ConversationRecord]
    _notes: RecordCache[builtins.list[str]]

    if TYPE_CHECKING:  # the manager's own (bot.conversations, bot.conversation_writes)

        def _lock(self, conv_id: str) -> asyncio.Lock: ...

        async def _append(self, conv_id: str, lines: builtins.list[Line]) -> ConversationRecord: ...

        async def require(self, conv_id: str) -> ConversationRecord: ...

        async def append_event(self, conv_id: str, event: str, **fields: Any) -> Line: ...

        async def create(
            self,
            channel: str,
            *,
            identity_key: str | None = None,
            pinned: bool = False,
            model: str | None = None,
            participants: Any = ("user",),
            channel_meta: Any = None,
            reason: str = "new",
            conv_id: str | None = None,
        ) -> ConversationRecord: ...

    async def _meta_update(
        self, conv_id: str, event: str = "meta_update", **fields: Any
    ) -> ConversationRecord:
        """Append an ``event`` line (a meta update, the notes) and announce it."""
        line = event_line(event, **fields)
        async with self._lock(conv_id):
            rec = await self._append(conv_id, [line])
        await self.bus.emit("event_appended", conversation_id=conv_id, event=line)
        await self.bus.emit("conversation_updated", conversation=rec)
        return rec

    async def rename(self, conv_id: str, title: str, manual: bool = True) -> ConversationRecord:
        title = clip_title(title)
        if not title:
            raise ValueError("a title cannot be empty")
        rec = await self._meta_update(
            conv_id, title=title, manuallyNamed=manual or None, manual=manual or None
        )
        await self.bus.emit(
            "conversation_renamed", conversation_id=conv_id, title=title, manual=manual
        )
        return rec

    async def set_title_topics(
        self,
        conv_id: str,
        title: str | None,
        topics: builtins.list[str],
        through_turn: int,
        event: str = "title_assigned",
        **extra: Any,
    ) -> ConversationRecord | None:
        """Automatic naming; never overrides a manual title. ``extra``: more event fields
        (the ``usage`` and ``cost`` of the naming call)."""
        # Controls out as for a rename (bot.labels.plain_title): a model's or a party's
        # words make these titles. Not clipped: naming keeps its own length rules.
        title = plain_title(title) if title else title
        # The check and the write under one lock: checked before waiting for it, a
        # /rename being written meanwhile went first and was then overwritten.
        async with self._lock(conv_id):
            rec = await self.require(conv_id)
            if rec.manually_named:
                title = None
            fields: dict[str, Any] = {"topics": topics, "throughTurn": through_turn, **extra}
            if title:
                fields["title"] = title
            line = event_line(event, **fields)
            rec = await self._append(conv_id, [line])
        await self.bus.emit("event_appended", conversation_id=conv_id, event=line)
        await self.bus.emit("conversation_updated", conversation=rec)
        if title:
            await self.bus.emit(
                "conversation_renamed", conversation_id=conv_id, title=title, manual=False
            )
        return rec

    async def set_model(self, conv_id: str, alias: str, **why: Any) -> ConversationRecord:
        """The conversation's model; ``why``: more fields of its ``meta_update`` event
        (the model dropped for it, bot/model_switch.py)."""
        return await self._meta_update(conv_id, model=alias, **why)

    async def set_channel_meta(self, conv_id: str, **meta: Any) -> ConversationRecord:
        return await self._meta_update(conv_id, channelMeta=meta)

    async def set_abbreviation(
        self, conv_id: str, text: str, through_turn: int | None = None, **extra: Any
    ) -> ConversationRecord:
        """The conversation's notes; ``extra``: more event fields (``usage``, ``cost``)."""
        rec = await self.require(conv_id)
        through = rec.turn_count if through_turn is None else through_turn
        return await self._meta_update(
            conv_id, "abbreviation", text=text, throughTurn=through, **extra
        )

    async def mark_needs_abbreviation(self, conv_id: str, flag: bool = True) -> None:
        """Operational flag only (derivable after a rebuild from abbreviated_turn)."""
        await self.index.db.run(
            lambda c: c.execute(
                "UPDATE conversations SET needs_abbreviation = ? WHERE id = ?", (int(flag), conv_id)
            )
        )
        rec = self._cache.get(conv_id)
        if rec is not None:
            rec.needs_abbreviation = flag

    async def flag_needs_abbreviation(self, conv_ids: builtins.list[str]) -> int:
        """Set ``needs_abbreviation`` on every one of ``conv_ids`` not flagged yet, in one
        statement; returns how many changed. (While the model is down, the lifecycle
        defers a whole queue: a read and a write each took 3.8 s for 15,000.)"""
        if not conv_ids:
            return 0
        ids = json.dumps(conv_ids)

        def flag(conn: Any) -> builtins.list[str]:
            rows = conn.execute(
                "UPDATE conversations SET needs_abbreviation = 1 WHERE needs_abbreviation = 0 "
                "AND id IN (SELECT value FROM json_each(?)) RETURNING id",
                (ids,),
            ).fetchall()
            return [row[0] for row in rows]

        changed = await self.index.db.run(flag)
        for conv_id in changed:
            rec = self._cache.get(conv_id)
            if rec is not None:
                rec.needs_abbreviation = True
        return len(changed)

    async def unflag_needs_abbreviation(self, conv_ids: builtins.list[str]) -> int:
        """Clear ``needs_abbreviation`` and ``abbreviation_failed`` of ``conv_ids``: notes
        the lifecycle stops asking the model for (its offline notes stand); returns how
        many changed. Notes owed for new turns are still queued by the idle pass
        (``abbreviated_turn < turn_count``), flag or not."""
        if not conv_ids:
            return 0
        ids = json.dumps(conv_ids)

        def unflag(conn: Any) -> builtins.list[str]:
            rows = conn.execute(
                "UPDATE conversations SET needs_abbreviation = 0, abbreviation_failed = 0 "
                "WHERE (needs_abbreviation <> 0 OR abbreviation_failed <> 0) "
                "AND id IN (SELECT value FROM json_each(?)) RETURNING id",
                (ids,),
            ).fetchall()
            return [row[0] for row in rows]

        changed = await self.index.db.run(unflag)
        for conv_id in changed:
            rec = self._cache.get(conv_id)
            if rec is not None:
                rec.needs_abbreviation = False
        return len(changed)

    async def mark_abbreviation_failed(self, conv_ids: builtins.list[str], failed: bool) -> int:
        """Record whether the last pass over each of ``conv_ids`` failed
        (``abbreviation_failed``, :mod:`bot.schema_failures`), in one statement that
        writes only the rows it changes; returns how many. Operational only, like the
        flag: ``my-agent status`` tells "failed, to retry" from "not yet written" by it."""
        if not conv_ids:
            return 0
        ids = json.dumps(conv_ids)

        def record(conn: Any) -> int:
            return int(
                conn.execute(
                    "UPDATE conversations SET abbreviation_failed = ? WHERE "
                    "abbreviation_failed <> ? AND id IN (SELECT value FROM json_each(?))",
                    (int(failed), int(failed), ids),
                ).rowcount
            )

        return int(await self.index.db.run(record))

    async def mark_notes_behind(self, conv_id: str) -> None:
        """The notes miss a line of the last turn number (a reply that landed after them,
        sharing its question's number): ``abbreviated_turn`` goes below ``turn_count``, so
        the next pass, in this run, after a restart or after ``my-agent reindex``, writes
        them again. Recorded as a ``notes_behind`` event: kept in the index only, a
        rebuild from the transcripts found the notes current and the answer never reached
        them. Nothing is written when they are behind already (the next pass reads every
        turn anyway)."""
        async with self._lock(conv_id):
            rec = await self.require(conv_id)
            if rec.abbreviated_turn < rec.turn_count:
                return
            await self._append(conv_id, [event_line("notes_behind", throughTurn=rec.turn_count)])

    async def record_message_ref(
        self, conv_id: str, channel: str, ref: str, direction: str = "out"
    ) -> None:
        await self.append_event(
            conv_id, "message_ref", channel=channel, ref=ref, direction=direction
        )

    # -- pinning and /new ------------------------------------------------------------
    async def unpin(self, conv_id: str) -> ConversationRecord:
        return await self._meta_update(conv_id, pinned=False)

    async def new_for_channel(
        self, current: ConversationRecord, conv_id: str | None = None
    ) -> ConversationRecord:
        """/new on a channel: unpin the current conversation, pin a fresh one (``conv_id``
        if given) that inherits the model, identity and channel metadata (seed 000 "/new")."""
        if current.pinned:
            await self.unpin(current.id)
        fresh = await self.create(
            current.channel,
            identity_key=current.identity_key,
            pinned=True,
            model=current.model,
            participants=current.participants,
            channel_meta=current.channel_meta,
            reason="new",
            conv_id=conv_id,
        )
        await self.bus.emit(
            "conversation_switched",
            previous_id=current.id,
            current_id=fresh.id,
            channel=current.channel,
        )
        return fresh

    # -- notes for the next reply (e.g. naming's suggestSplit) -------------------------
    def add_note(self, conv_id: str, text: str) -> None:
        self._notes[conv_id] = [*(self._notes.get(conv_id) or ()), text]

    def take_notes(self, conv_id: str) -> builtins.list[str]:
        return self._notes.pop(conv_id) or []

    def restore_notes(self, conv_id: str, notes: Iterable[str]) -> None:
        """Put back, first, the notes a reply carried without delivering them (it failed,
        was stopped, or could not be stored): the next reply carries them. Taken for
        good, the split offer of a reply that failed was never made."""
        back = list(notes)
        if back:
            self._notes[conv_id] = [*back, *(self._notes.get(conv_id) or ())]

    async def record_split_offered(self, conv_id: str) -> ConversationRecord:
        """In the transcript: a reply offered to split the conversation (naming's
        suggestSplit), so no later naming offers it again, after a restart too."""
        return await self._meta_update(conv_id, splitOffered=True)
