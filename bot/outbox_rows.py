"""The outbox's rows in ``state.db``: a message's payload, and what the rest of the core
asks of the queue (whether a key was queued, what is still pending, what was sent).

A part of :class:`bot.outbox.Outbox` (its base): the queue's writes and its workers,
which send the rows and mark them, are there.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import fields

from bot.db import Database
from bot.events import OutboundMessage

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


class OutboxRows:
    """The reads half of :class:`~bot.outbox.Outbox`."""

    db: Database

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
        row = await self.db.fetchone("SELECT count(*) FROM outbox WHERE status = 'pending'")
        return int(row[0]) if row else 0

    async def sent_messages(self, channel: str | None = None) -> list[OutboundMessage]:
        rows = await self.db.fetchall(
            "SELECT id, payload FROM outbox WHERE status = 'sent'"
            + (" AND channel = ?" if channel else "")
            + " ORDER BY id",
            (channel,) if channel else (),
        )
        return [_decode(p, i) for i, p in rows]
