"""The outbox's rows in ``state.db``: a message's payload, what the rest of the core
asks of the queue (whether a key was queued, what is still pending, what was sent), and
which row a channel's worker sends next (in order per chat).

A part of :class:`bot.outbox.Outbox` (its base): the queue's writes and its workers,
which send the rows and mark them, are there.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import fields

from bot.channel import Channel
from bot.db import Database, SyncConn
from bot.events import OutboundMessage, SendResult

log = logging.getLogger("my_agent.outbox")

# A row whose retry time lies further ahead than this, and that this process did not
# mark, was marked before the wall clock was set back (or by a clock that ran ahead): it
# is tried after this long at most rather than when the clock catches up (a day's jump
# stalled its channel for a day). Longer than the backoff's cap; a longer flood-control
# wait from the last run is at worst asked once more, and refused again.
STALE_WAIT_SECONDS = 3600.0

_FIELDS = tuple(f.name for f in fields(OutboundMessage))  # fields() costs a reply's worth


def _encode(msg: OutboundMessage, dedup_key: str | None = None) -> str:
    data = {name: getattr(msg, name) for name in _FIELDS}
    data["metadata"] = dict(msg.metadata)
    data["send_key"] = msg.send_key or dedup_key or f"row:{secrets.token_hex(12)}"
    return json.dumps(data, ensure_ascii=False, default=str)


def _decode(payload: str, outbox_id: int) -> OutboundMessage:
    data = json.loads(payload)
    data["thread_refs"] = tuple(data.get("thread_refs") or ())
    data["actions"] = tuple(tuple(a) for a in data.get("actions") or ())
    data["outbox_id"] = outbox_id
    return OutboundMessage(**data)


def reply_key_taken(conn: SyncConn, key: str, msg: OutboundMessage) -> str | None:
    """A reply whose key (``<conv>:<turn>:reply``) has a row already: queuing it again is
    a no-op (a retry, a re-queue), unless the row holds another reply: one to another
    channel message, or another text. Then transcripts
    put back from an older copy gave a new message a lost turn's number (before session
    40 its reply was dropped silently): logged loudly, and when both answer a channel
    message and not the same one, the key for this one (``<key>:<its message>``) is
    returned, to queue it under; ``None`` when it stays unsent."""
    row = conn.execute("SELECT payload, status FROM outbox WHERE dedup_key = ?", (key,)).fetchone()
    if row is None:
        return None
    queued = json.loads(row[0])
    before = queued.get("in_reply_to")
    if before and msg.in_reply_to and str(before) != str(msg.in_reply_to):
        log.error(
            "reply key %s was taken by the reply to another message (%s, %s): this one is "
            "queued under its own key (transcripts put back from an older copy?)",
            key,
            before,
            row[1],
        )
        return f"{key}:{msg.in_reply_to}"
    if queued.get("text") == msg.text:
        return None  # the same reply
    log.error(
        "reply key %s was queued before for another reply (%s): this one is not sent "
        "(transcripts put back from an older copy?)",
        key,
        row[1],
    )
    return None


class OutboxRows:
    """The reads half of :class:`~bot.outbox.Outbox`."""

    db: Database
    clock: Callable[[], float]
    _delays: dict[int, float]  # outbox id -> the retry delay this process gave it
    _channels: dict[str, Channel]
    _unmarked: dict[int, SendResult]  # outbox id -> a send whose "sent" mark is not written

    async def has_key(self, dedup_key: str) -> bool:
        row = await self.db.fetchone("SELECT 1 FROM outbox WHERE dedup_key = ?", (dedup_key,))
        return row is not None

    async def told_under(self, dedup_key: str, since: str) -> bool:
        """Whether a message queued under ``dedup_key`` or ``dedup_key:<anything>`` is
        still waiting to be sent, or was sent at or after ``since`` (ISO time)."""
        row = await self.db.fetchone(
            "SELECT 1 FROM outbox WHERE (status = 'pending' OR sent >= ?) AND (dedup_key = ?"
            " OR (dedup_key > ? AND dedup_key < ?)) LIMIT 1",
            # ";" follows ":": the range is every key that starts with "dedup_key:"
            (since, dedup_key, f"{dedup_key}:", f"{dedup_key};"),
        )
        return row is not None

    async def conversation_for_key(self, dedup_key: str) -> str | None:
        """The conversation of the message queued under ``dedup_key``, if any."""
        row = await self.db.fetchone(
            "SELECT conversation_id FROM outbox WHERE dedup_key = ?", (dedup_key,)
        )
        return str(row[0]) if row and row[0] else None

    async def pending_count(self) -> int:
        """Rows not marked sent yet (nor failed)."""
        row = await self.db.fetchone("SELECT count(*) FROM outbox WHERE status = 'pending'")
        return int(row[0]) if row else 0

    async def undelivered_count(self) -> int:
        """Messages not delivered yet, as the owner is told (``/status``, the systemd
        status line): the pending rows, less those a channel has already taken whose
        "sent" mark is still being written (or waits for a state.db that refuses it,
        :attr:`_unmarked`).

        Before session 42 such a row counted: ``/status`` asked right after a reply
        arrived (the mark's synced commit takes 5-40 ms, longer under load) said
        "outbox pending: 1" with every reply received."""
        taken = sorted(self._unmarked)  # before the read: a mark landing meanwhile is fine
        if not taken:
            return await self.pending_count()
        row = await self.db.fetchone(
            "SELECT count(*) FROM outbox WHERE status = 'pending'"
            " AND id NOT IN (SELECT value FROM json_each(?))",
            (json.dumps(taken),),
        )
        return int(row[0]) if row else 0

    async def sent_messages(self, channel: str | None = None) -> list[OutboundMessage]:
        rows = await self.db.fetchall(
            "SELECT id, payload FROM outbox WHERE status = 'sent'"
            + (" AND channel = ?" if channel else "")
            + " ORDER BY id",
            (channel,) if channel else (),
        )
        return [_decode(p, i) for i, p in rows]

    async def deliverable_count(self) -> int:
        """Pending messages a running worker would send now: their channel is attached
        and no row of their chat (sent strictly in order) is waiting for a retry. A stop
        waits for these only: rows for a channel that is not running (disabled since, or
        a failed start) or behind a backoff stay queued for the next start either way."""
        channels = sorted(self._channels)
        if not channels:
            return 0
        marks = ", ".join("?" for _ in channels)
        now = self.clock()
        row = await self.db.fetchone(
            "SELECT count(*) FROM outbox o WHERE o.status = 'pending' AND o.next_attempt <= ?"
            f" AND o.channel IN ({marks}) AND NOT EXISTS (SELECT 1 FROM outbox w WHERE"
            " w.status = 'pending' AND w.next_attempt > ? AND w.channel = o.channel AND"
            " json_extract(w.payload, '$.chat_id') = json_extract(o.payload, '$.chat_id'))",
            (now, *channels, now),
        )
        return int(row[0]) if row else 0

    async def _next_due(self, channel: str) -> tuple[OutboundMessage, int, float | None] | None:
        """The row ``channel`` sends next, its attempts and None; when every chat with
        pending rows waits for a retry, the one due first and its wait; None when nothing
        is pending.

        The order is strict per chat, not per channel: a chat's rows go oldest first, and
        one whose oldest waits (flood control in a busy group, a recipient's server
        refusing for now) holds back only that chat. Before, one worker's head held back
        the whole channel: a group's 60 s flood-control wait, or a stranger's server
        greylisting an acknowledgement for minutes, delayed the owner's replies with it.
        """
        now = self.clock()
        waiting = await self.db.fetchall(
            "SELECT id, payload, attempts, next_attempt FROM outbox WHERE status = 'pending'"
            " AND next_attempt > ? AND channel = ? ORDER BY id",
            (now, channel),
        )
        blocked: set[str] = set()  # chats whose oldest row waits
        first: tuple[OutboundMessage, int, float] | None = None  # the wait that ends first
        over: list[tuple[OutboundMessage, int]] = []  # waits over by STALE_WAIT_SECONDS
        heads: set[str] = set()  # chats whose oldest row was read (rows come oldest first)
        for outbox_id, payload, attempts, next_attempt in waiting:
            row = _decode(payload, outbox_id)
            if row.chat_id in heads:
                continue  # not the chat's oldest row
            heads.add(row.chat_id)
            wait = min(next_attempt - now, self._delays.get(outbox_id, STALE_WAIT_SECONDS))
            if wait > 0:
                blocked.add(row.chat_id)
                if first is None or wait < first[2]:
                    first = (row, attempts, wait)
            else:
                over.append((row, attempts))
        rows = await self.db.fetchall(
            "SELECT id, payload, attempts FROM outbox WHERE status = 'pending'"
            " AND next_attempt <= ? AND channel = ?"
            + (
                " AND json_extract(payload, '$.chat_id') NOT IN (SELECT value FROM json_each(?))"
                if blocked
                else ""
            )
            + " ORDER BY id LIMIT 1",
            (now, channel, json.dumps(sorted(blocked))) if blocked else (now, channel),
        )
        due = [(_decode(payload, outbox_id), attempts) for outbox_id, payload, attempts in rows]
        if due or over:
            row, attempts = min(due + over, key=lambda item: item[0].outbox_id or 0)
            return row, attempts, None
        return first
