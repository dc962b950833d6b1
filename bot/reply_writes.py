"""Writing a reply: its transcript turn, then its outbox row in the same chain of writes,
tried again while the storage refuses it (a full disk, a locked ``state.db``), holding
the conversation's later messages back so that order is kept.

A part of :class:`bot.replies.ReplyEngine` (its base): the reply is produced there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bot.brain.base import BrainReply
from bot.brain.cost import usage_fields

if TYPE_CHECKING:
    from bot.replies import ReplyTarget
    from bot.services import Services

log = logging.getLogger("my_agent.replies")

# A reply that cannot be written (disk full) is tried again after 1, 2, 4 ... 30 s.
STORAGE_RETRY_FIRST = 1.0
STORAGE_RETRY_MAX = 30.0


class ReplyWrites:
    """The writes half of :class:`~bot.replies.ReplyEngine`."""

    s: Services
    # conversations whose reply is written and waits for the storage to take it
    storage_waiting: set[str]

    async def _store_retrying(
        self, conv_id: str, turn: int, reply: BrainReply, target: ReplyTarget
    ) -> None:
        """Store the reply (:meth:`_store`), trying again while storage refuses it.

        The disk is full or failing, or another process holds state.db's write lock
        longer than its busy timeout (SQLite's ``OperationalError``: locked, full, I/O):
        the user's turn is durable and stays unanswered until the reply can be written;
        keep trying while running (a stop leaves it to the next start), holding this
        conversation's later messages back so that order is kept. Once the reply is in
        the transcript (its outbox row failed, or its bytes landed before the journal's
        sync failed) only its outbox row is queued, never the reply written twice
        (before session 18 an outbox row refused by a locked state.db failed the job:
        the reply stayed unsent until the next start).
        """
        refused = (OSError, self.s.state.driver.module.OperationalError)
        delay = STORAGE_RETRY_FIRST
        recorded = False
        while True:
            try:
                if recorded:
                    await self.s.outbox.enqueue(
                        target.answer(reply, conv_id), dedup_key=f"{conv_id}:{turn}:reply"
                    )
                else:
                    await self._store(conv_id, turn, reply, target)
                break
            except refused as exc:
                if not recorded and await self._reply_on_disk(conv_id, turn):
                    recorded = True
                    continue  # its outbox row from the transcript's copy, now
                self.storage_waiting.add(conv_id)
                log.error(
                    "cannot store the reply to %s turn %d (%s); trying again in %.0f s",
                    conv_id, turn, exc, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, STORAGE_RETRY_MAX)
        if conv_id in self.storage_waiting:
            self.storage_waiting.discard(conv_id)
            log.info("reply to %s turn %d stored after the storage trouble", conv_id, turn)

    async def _reply_on_disk(self, conv_id: str, turn: int) -> bool:
        """Whether the reply to ``turn`` is in the transcript (a failed append whose bytes
        were written before the journal's sync failed, or one whose outbox row failed)."""
        try:
            lines = await asyncio.to_thread(self.s.store.read_lines, conv_id)
        except OSError:
            return False
        return any(
            line.get("type") == "turn"
            and line.get("role") == "assistant"
            and line.get("turnNumber") == turn
            for line in lines
        )

    async def _store(self, conv_id: str, turn: int, reply: BrainReply, target: ReplyTarget) -> None:
        """The reply's transcript turn, then its outbox row, then wake the channel."""
        extra = {}
        # The first reply row of a process is synced: the anchor that lets the later
        # ones skip their own sync (Outbox.insert_unit).
        anchored = self.s.outbox.anchored
        if reply.usage is not None:
            extra["usage"] = usage_fields(reply.usage)
        await self.s.conversations.append_turn(
            conv_id,
            "assistant",
            reply.text,
            turn_number=turn,
            channel=target.channel,
            usage=extra.get("usage"),
            cost=reply.cost,
            thinkingText=reply.thinking_text,
            model=reply.model,
            # Queued in the same chain of writes, right after the reply is durable.
            also=(
                self.s.state,
                self.s.outbox.insert_unit(
                    target.answer(reply, conv_id),
                    dedup_key=f"{conv_id}:{turn}:reply",
                    recoverable=True,
                ),
            ),
            background=True,  # the next incoming message's writes go first
            **reply.extra,
        )
        if not anchored:
            self.s.outbox.anchored = True  # that row was committed with a sync
        self.s.outbox.wake(target.channel)
