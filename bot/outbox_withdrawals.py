"""The outbox's rows that are never to be sent: taken back before they went, or
recorded unsent.

A model's answer to a third party still waiting in the queue (their channel down, a
retry's backoff) is taken back once the owner made them anything but known
(:meth:`OutboxWithdrawals.withdraw`, :mod:`bot.known_answers`); the replies and answers
a restart finds without a row while ``state.db`` is older than the transcripts (put back
from a backup) are recorded as never to send (:meth:`OutboxWithdrawals.set_aside`,
:mod:`bot.resume`, :mod:`bot.party_resume`). Both are failed rows whose error starts with
:data:`WITHDRAWN`: not a failure ``my-agent status`` counts (:mod:`bot.health_store`).

A part of :class:`bot.outbox.Outbox` (a base, beside :class:`bot.outbox_rows.OutboxRows`).
"""

from __future__ import annotations

from bot.db import Database, SyncConn
from bot.events import OutboundMessage, iso, utcnow
from bot.outbox_rows import _encode

# The error of a row taken back before it was sent (a model's answer to a party the
# owner blocked since, :meth:`OutboxWithdrawals.withdraw`): failed, but not a failure.
WITHDRAWN = "withdrawn: "


class OutboxWithdrawals:
    """The rows taken back or set aside unsent (a base of :class:`bot.outbox.Outbox`)."""

    db: Database

    async def withdraw(self, party_id: str, key_suffix: str, why: str) -> list[str]:
        """Take back what still waits to be sent to the third party ``party_id`` under a
        dedup key ending in ``key_suffix``: marked failed, its error :data:`WITHDRAWN`
        and ``why`` (not a failure ``my-agent status`` counts). A row being sent now is
        marked sent if it went. Returns the dedup keys of the rows taken back, oldest
        first (their file is told which: :mod:`bot.known_answers`)."""

        def _withdraw(conn: SyncConn) -> list[str]:
            where = "status = 'pending' AND party_id = ? AND substr(dedup_key, -length(?)) = ?"
            args = (party_id, key_suffix, key_suffix)
            keys = [
                str(row[0])
                for row in conn.execute(
                    f"SELECT dedup_key FROM outbox WHERE {where} ORDER BY id", args
                )
            ]
            conn.execute(
                f"UPDATE outbox SET status = 'failed', last_error = ? WHERE {where}",
                (WITHDRAWN + why, *args),
            )
            return keys

        return await self.db.run(_withdraw)

    async def set_aside(self, messages: list[tuple[OutboundMessage, str]], why: str) -> int:
        """Record ``messages`` (each with its dedup key) as never to be sent, in one
        transaction: failed, their error :data:`WITHDRAWN` and ``why`` (a key queued
        before keeps its row). Returns how many rows were made."""
        created = iso(utcnow())

        def _insert(conn: SyncConn) -> int:
            made = 0
            for msg, key in messages:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO outbox (channel, payload, conversation_id, party_id,"
                    " dedup_key, status, created, last_error)"
                    " VALUES (?, ?, ?, ?, ?, 'failed', ?, ?)",
                    (
                        msg.channel,
                        _encode(msg, key),
                        msg.conversation_id,
                        msg.party_id,
                        key,
                        created,
                        WITHDRAWN + why,
                    ),
                )
                made += cur.rowcount
            return made

        return await self.db.run(_insert)
