"""What the index knows of third parties: their records, messages and escalations.

The ``external_*`` tables and ``escalations`` mirror the parties' own files
(:mod:`bot.external`, :mod:`bot.parties`): every read here is a query, none touches a
file. The base of :class:`bot.external.ExternalStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.db import Database
from bot.events import not_after
from bot.parties import PARTY_COLUMNS, PartyRecord, party_from_row


@dataclass(frozen=True)
class PartyCosts:
    """What the model's answers to third parties have cost, all told (every party's
    sums: :func:`bot.parties.apply_party_lines`): ``/status`` and the dashboard's
    Analytics."""

    cost: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    parties: int = 0  # the parties whose answers cost anything

    @property
    def any(self) -> bool:
        return bool(self.cost or self.tokens_in or self.tokens_out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cost": round(self.cost, 6),
            "tokensIn": self.tokens_in,
            "tokensOut": self.tokens_out,
            "parties": self.parties,
        }


def _history_row(row: Any) -> dict[str, Any]:
    """A row of :meth:`PartyReads.history` from ``id, direction, content, message_ref,
    timestamp, sent_at``."""
    return {
        "direction": row[1],
        "content": row[2],
        "ref": row[3],
        "timestamp": row[4],
        "sentAt": row[5],
    }


class PartyReads:
    """The index reads of :class:`~bot.external.ExternalStore` (its ``db``)."""

    db: Database

    async def get(self, party_id: str) -> PartyRecord | None:
        row = await self.db.fetchone(
            f"SELECT {PARTY_COLUMNS} FROM external_parties WHERE id = ?", (party_id,)
        )
        return party_from_row(row) if row else None

    async def find(self, reference: str) -> PartyRecord | None:
        """By handle, or by identity on any channel (``@name``, address, numeric id);
        never by display name, which a party chooses (:meth:`named`)."""
        ref = reference.strip()
        party = await self.get(ref)
        if party:
            return party
        rows = await self.db.fetchall(
            f"SELECT {PARTY_COLUMNS} FROM external_parties WHERE party_key = ? OR party_key = ? "
            "OR EXISTS (SELECT 1 FROM json_each("
            "external_parties.meta, '$.handles') WHERE value = ?) ORDER BY updated DESC",
            (ref.lower(), ref.lower().lstrip("@"), ref.lower()),
        )
        return party_from_row(rows[0]) if rows else None

    async def carrying(self, handle: str, limit: int = 5) -> list[PartyRecord]:
        """The parties whose latest message carried ``handle`` (a Telegram @username),
        newest first: more than one when the name changed hands (its holder renamed
        and someone registered it) and the earlier holder has not written since."""
        rows = await self.db.fetchall(
            f"SELECT {PARTY_COLUMNS} FROM external_parties WHERE EXISTS (SELECT 1 FROM "
            "json_each(external_parties.meta, '$.handles') WHERE value = ?) "
            "ORDER BY updated DESC LIMIT ?",
            (handle.strip().lower(), limit),
        )
        return [party_from_row(r) for r in rows]

    async def named(self, name: str, limit: int = 5) -> list[PartyRecord]:
        """The parties whose display name is ``name`` (any case), newest first."""
        rows = await self.db.fetchall(
            f"SELECT {PARTY_COLUMNS} FROM external_parties WHERE lower(display_name) = ? "
            "ORDER BY updated DESC LIMIT ?",
            (name.strip().lower(), limit),
        )
        return [party_from_row(r) for r in rows]

    async def list_parties(self, limit: int = 200) -> list[PartyRecord]:
        rows = await self.db.fetchall(
            f"SELECT {PARTY_COLUMNS} FROM external_parties ORDER BY updated DESC LIMIT ?", (limit,)
        )
        return [party_from_row(r) for r in rows]

    async def messages(self, party_id: str, limit: int = 100) -> list[dict[str, Any]]:
        rows = await self.db.fetchall(
            "SELECT id, direction, content, timestamp, kind FROM external_messages "
            "WHERE party_id = ? ORDER BY id DESC LIMIT ?",
            (party_id, limit),
        )
        return [
            {"id": r[0], "direction": r[1], "content": r[2], "timestamp": r[3], "kind": r[4]}
            for r in reversed(rows)
        ]

    async def history(
        self, party: PartyRecord, limit: int = 20, *, through: str | None = None
    ) -> list[dict[str, Any]]:
        """The party's own exchange since their last /new, for the restricted brain: its
        newest ``limit`` rows, oldest first. Each row has its ``ref``, its ``timestamp``
        (when it came) and its ``sentAt`` (when it was written, None when not known).

        ``through``: the ref of one of their messages: the exchange as of its arrival
        (what they sent after it, recorded while its answer waited its turn, is left
        out), its newest ``limit`` rows, then the newest ``limit`` of what we sent them
        since it came (the answers to their earlier messages, made while it waited).
        Before session 40 those answers counted among the ``limit``: a burst of twelve
        lines answered one by one read, at the last, our eleven answers and only eight
        of their lines (none at all at the 40th of a hundred)."""
        kinds = "kind IN ('message', 'reply', 'answer')"
        columns = "id, direction, content, message_ref, timestamp, sent_at"
        if through is None:
            rows = await self.db.fetchall(
                f"SELECT {columns} FROM external_messages"
                f" WHERE party_id = ? AND id > ? AND {kinds} ORDER BY id DESC LIMIT ?",
                (party.id, party.context_reset_at, limit),
            )
            return [_history_row(r) for r in reversed(rows)]
        arrived = "(SELECT max(id) FROM external_messages WHERE party_id = ? AND message_ref = ?)"
        # (a ref not found: everything, as if it were the newest; nothing after it)
        rows = await self.db.fetchall(
            f"SELECT {columns} FROM (SELECT * FROM ("
            f"SELECT {columns} FROM external_messages"
            f" WHERE party_id = ? AND id > ? AND {kinds} AND id <= coalesce({arrived}, id)"
            " ORDER BY id DESC LIMIT ?) UNION ALL SELECT * FROM ("
            f"SELECT {columns} FROM external_messages"
            f" WHERE party_id = ? AND id > ? AND {kinds} AND direction = 'out'"
            f" AND id > {arrived} ORDER BY id DESC LIMIT ?)) ORDER BY id",
            (
                *(party.id, party.context_reset_at, party.id, through, limit),
                *(party.id, party.context_reset_at, party.id, through, limit),
            ),
        )
        return [_history_row(r) for r in rows]

    async def arrivals(
        self, party_id: str, refs: Sequence[str]
    ) -> dict[str, tuple[str, str | None]]:
        """When the party's messages ``refs`` came and were written (None: not known),
        by ref: the messages a known party's answer answers (bot/party_context.py)."""
        if not refs:
            return {}
        marks = ",".join("?" * len(refs))
        rows = await self.db.fetchall(
            "SELECT message_ref, timestamp, sent_at FROM external_messages WHERE party_id = ?"
            f" AND direction = 'in' AND message_ref IN ({marks}) ORDER BY id",
            (party_id, *refs),
        )
        return {str(r[0]): (str(r[1]), r[2]) for r in rows}

    async def answer_costs(self) -> PartyCosts:
        """What the model's answers to all parties have cost (the sums of their files'
        ``usage`` and ``cost``, kept per party in the index)."""
        row = await self.db.fetchone(
            "SELECT coalesce(sum(cost_total), 0), coalesce(sum(tokens_in), 0),"
            " coalesce(sum(tokens_out), 0), count(*) FROM external_parties"
            " WHERE cost_total > 0 OR tokens_in > 0 OR tokens_out > 0"
        )
        if row is None:
            return PartyCosts()
        return PartyCosts(float(row[0]), int(row[1]), int(row[2]), int(row[3]))

    async def pending_escalation_count(self) -> int:
        """How many escalations wait for the owner (``/status``: counted by the index
        ``escalations_pending``, not read; a flood of strangers leaves thousands)."""
        row = await self.db.fetchone("SELECT count(*) FROM escalations WHERE status = 'pending'")
        return int(row[0]) if row else 0

    async def escalations_since(self, since: str) -> int:
        """How many escalations (any party, any status) were created at ``since`` (an
        :func:`~bot.events.iso` time) or later: the hourly budget, across restarts."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) FROM escalations WHERE created BETWEEN ? AND ?", (since, not_after())
        )
        return int(row[0]) if row else 0

    async def command_answers_since(self, since: str, party_id: str | None = None) -> int:
        """How many command answers went to ``party_id`` (else to any party) at ``since``
        (an :func:`~bot.events.iso` time) or later."""
        return await self._count_since(
            "SELECT COUNT(*) FROM external_messages WHERE kind = 'command'"
            " AND timestamp BETWEEN ? AND ?",
            "party_id",
            since,
            party_id,
        )

    async def answers_since(self, since: str, party_id: str | None = None) -> int:
        """How many of the model's answers went to ``party_id`` (else to any party) at
        ``since`` (an :func:`~bot.events.iso` time) or later: the known contacts' hourly
        budget, across restarts (one withdrawn unsent was paid all the same)."""
        return await self._count_since(
            "SELECT COUNT(*) FROM external_messages WHERE kind IN ('answer', 'withdrawn')"
            " AND timestamp BETWEEN ? AND ?",
            "party_id",
            since,
            party_id,
        )

    async def untrusted_messages_since(self, since: str, party_id: str | None = None) -> int:
        """How many messages untrusted parties (or ``party_id`` alone) sent at ``since``
        (an :func:`~bot.events.iso` time) or later: their hourly budget of storage."""
        return await self._count_since(
            "SELECT COUNT(*) FROM external_messages m JOIN external_parties p"
            " ON p.id = m.party_id WHERE m.direction = 'in' AND m.timestamp BETWEEN ? AND ?"
            " AND p.tier = 'untrusted'",
            "m.party_id",
            since,
            party_id,
        )

    async def _count_since(
        self, sql: str, party_column: str, since: str, party_id: str | None
    ) -> int:
        """``sql`` (a count from ``since`` to :func:`~bot.events.not_after`), for
        ``party_id`` alone when given."""
        args: tuple[str, ...] = (since, not_after())
        if party_id is not None:
            sql += f" AND {party_column} = ?"
            args += (party_id,)
        row = await self.db.fetchone(sql, args)
        return int(row[0]) if row else 0

    async def pending_escalations(self) -> list[dict[str, Any]]:
        rows = await self.db.fetchall(
            "SELECT e.id, e.party_id, e.created, e.text, p.display_name, p.party_key, p.channel,"
            " p.tier FROM escalations e JOIN external_parties p ON p.id = e.party_id "
            "WHERE e.status = 'pending' ORDER BY e.id"
        )
        return [
            {
                "id": r[0],
                "partyId": r[1],
                "created": r[2],
                "text": r[3],
                "name": r[4],
                "party": r[5],
                "channel": r[6],
                "tier": r[7],
            }
            for r in rows
        ]

    async def is_duplicate(self, party_id: str, message_ref: str) -> bool:
        row = await self.db.fetchone(
            "SELECT 1 FROM external_messages WHERE party_id = ? AND message_ref = ?",
            (party_id, message_ref),
        )
        return row is not None
