"""External communications (seed 000 "External Communications"): third parties.

Each party (channel + normalised identity) has an append-only JSONL record under
``data_dir/external/{party_id}.jsonl`` (the source of truth: messages in and out, tier
changes, escalations) mirrored into the ``external_*`` tables of the index (the model and
the mirroring: :mod:`bot.parties`). They never appear in the conversation list and never
reach the owner's conversations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.config import AppConfig
from bot.db import Database, SyncConn
from bot.events import iso, utcnow
from bot.hooks import EventBus
from bot.parties import (
    TIERS,
    PartyRecord,
    apply_party_lines,
    configured_tier,
    normalise_identity,
    party_handle,
)
from bot.party_lines import inbound_lines, reply_to_of
from bot.party_reads import PartyReads
from bot.record_cache import keyed_locks
from bot.transcript import TranscriptStore
from bot.transcript_lines import Line, encode, parse_lines

log = logging.getLogger("my_agent.external")


class ExternalStore(PartyReads):
    """Third parties' records: their files (the source of truth), written and mirrored
    here; read from the index by :class:`~bot.party_reads.PartyReads`, the base."""

    def __init__(self, config: AppConfig, db: Database, bus: EventBus) -> None:
        self.config = config
        self.db = db
        self.bus = bus
        self.directory = config.external_dir
        self._files = TranscriptStore(self.directory, fsync=config.transcripts.fsync == "always")
        # party id -> lock held while their tier is read and acted on (bot/strangers.py)
        # and while it is changed or their escalations resolved (here)
        self._party_locks = keyed_locks()  # held or waited for only: thousands of parties
        # party id -> the batches whose file append succeeded and index write failed,
        # mirrored before anything else is written for the party (_apply_owed)
        self._owed: dict[str, list[tuple[list[Line], int]]] = {}
        # (party id, message ref) recorded by a call that then failed: its flow never ran
        self._unhandled: set[tuple[str, str]] = set()
        self._owed_lock = asyncio.Lock()

    def open(self, exclusive: bool = False, shared: bool = False) -> int:
        """Replay the party files' journal after a crash (see :mod:`bot.journal`).

        ``exclusive`` (the daemon): :class:`BlockingIOError` when another process holds
        it. ``shared`` (a command next to a running daemon, whose transcript journal is
        held): the journal is left to the daemon, neither locked nor replayed. Taking it
        because the daemon had not opened it yet (it opens the transcripts' first) made
        the daemon run with party files outside any journal."""
        if shared:
            return self._files.open_shared()
        return self._files.open(exclusive=exclusive)

    def close(self) -> None:
        self._files.close()

    def party_lock(self, party_id: str) -> asyncio.Lock:
        """The lock of one party (created on first use). :meth:`set_tier` and
        :meth:`resolve_escalations` take it, and the stranger flow holds it from reading
        a party's tier to escalating their message: an escalation made while the
        owner's /trust (or the dashboard's Trust) ran stayed pending, asking the owner
        to trust a party already trusted."""
        lock = self._party_locks.get(party_id)
        if lock is None:
            lock = self._party_locks[party_id] = asyncio.Lock()
        return lock

    def _path(self, party_id: str) -> Path:
        return self.directory / f"{party_id}.jsonl"

    async def _record(self, party_id: str, lines: list[Line]) -> list[int]:
        """Append to the party's file (durable), then mirror into the tables together with
        how far the file is indexed, so recovery does not replay these lines again.

        A mirror that fails (a full disk: SQLite's, not the file's) is owed: made before
        the party's next write, which is refused while it still fails. Before, the
        message's redelivery found no trace of it in the tables and appended it to the
        file a second time."""
        await self._apply_owed(party_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(party_id)
        size = await self._files.append_file(path, encode(lines))
        try:
            result: list[int] = await self.db.run(self._mirror(party_id, lines, size))
        except Exception:
            self._owed.setdefault(party_id, []).append((lines, size))
            self._unhandled.update(
                (party_id, str(line["messageRef"]))
                for line in lines
                if line.get("direction") == "in" and line.get("messageRef")
            )
            raise
        return result

    def _mirror(self, party_id: str, lines: list[Line], size: int) -> Any:
        def _apply(conn: SyncConn) -> list[int]:
            created = apply_party_lines(conn, party_id, lines, self.config)
            conn.execute(
                "INSERT INTO index_meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                "SET value = excluded.value "
                "WHERE CAST(excluded.value AS INTEGER) > CAST(index_meta.value AS INTEGER)",
                (f"ext:{party_id}", str(size)),
            )
            return created

        return _apply

    async def _apply_owed(self, party_id: str) -> None:
        """Mirror the party's batches whose index write failed, oldest first; raises
        (nothing more appended) while the index still refuses them."""
        if not self._owed.get(party_id):
            return
        async with self._owed_lock:  # two writers must not mirror the same batch twice
            owed = self._owed.get(party_id)
            while owed:
                lines, size = owed[0]
                await self.db.run(self._mirror(party_id, lines, size))
                owed.pop(0)
                log.info("party %s: a record the index refused is mirrored now", party_id)
            self._owed.pop(party_id, None)

    # -- tiers ---------------------------------------------------------------------
    def configured_tier(
        self, channel: str, party_key: str, aliases: Sequence[str] = ()
    ) -> str | None:
        return configured_tier(self.config, channel, party_key, aliases)

    # -- reading the party's file ----------------------------------------------------
    async def read_lines(self, party_id: str) -> list[Line]:
        """The party's file, line by line (empty if it has none)."""

        def _read() -> list[Line]:
            try:
                return parse_lines(self._path(party_id).read_bytes())
            except FileNotFoundError:
                return []

        return await asyncio.to_thread(_read)

    async def reply_thread(self, party_id: str) -> tuple[str | None, str | None, list[str]]:
        """(reference, subject, Reply-To) of the party's last message: where an answer
        that is not a direct reply (the owner's ``/reply``) goes in their thread, and to
        whom. Read from the party's file (the tables keep no subject); a rare,
        owner-driven read."""

        def _last() -> tuple[str | None, str | None, list[str]]:
            try:
                lines = parse_lines(self._path(party_id).read_bytes())
            except OSError:
                return None, None, []
            for line in reversed(lines):
                if line.get("type") == "message" and line.get("direction") == "in":
                    ref = line.get("replyRef") or line.get("messageRef")
                    subject = line.get("subject") or None
                    return (str(ref) if ref else None), subject, reply_to_of(line)
            return None, None, []

        return await asyncio.to_thread(_last)

    # -- writing -------------------------------------------------------------------
    async def record_inbound(
        self,
        channel: str,
        party_key: str,
        *,
        display_name: str | None,
        chat_id: str,
        text: str,
        message_ref: str,
        kind: str = "message",
        aliases: Sequence[str] = (),
        reply_ref: str | None = None,
        subject: str | None = None,
        addressed: bool = True,
        album: str | None = None,
        reply_to: Sequence[str] = (),
    ) -> tuple[PartyRecord, bool]:
        """Durably record a third party's message. Returns (party, is_duplicate).

        ``aliases``: other identities of the sender (a Telegram @username beside the
        numeric id), which ``trust.contacts`` may name instead of ``party_key``;
        ``reply_ref`` / ``subject``: what an answer threads under (an e-mail's Message-ID
        and subject), kept for the owner's later ``/reply`` (:meth:`reply_thread`), as is
        ``reply_to`` (where the mail asks to be answered, its Reply-To);
        ``addressed`` (False: a bounce, an out-of-office reply) and ``album`` (the media
        group it is a photo of): whether it expects an answer, kept for a restart that
        owes one (:mod:`bot.party_resume`)."""
        party_id = party_handle(channel, party_key)
        handles = sorted({normalise_identity(channel, a) for a in aliases if a.strip()})
        await self._apply_owed(party_id)
        if await self.is_duplicate(party_id, message_ref):
            party = await self.get(party_id)
            assert party is not None
            # recorded by a call that failed after writing it: its flow is still to run
            unhandled = (party_id, message_ref) in self._unhandled
            self._unhandled.discard((party_id, message_ref))
            return party, not unhandled
        now = iso(utcnow())
        existing = await self.get(party_id)
        configured = self.configured_tier(channel, party_key, aliases)
        lines = inbound_lines(
            party_id,
            channel,
            party_key,
            now=now,
            existing=existing,
            configured=configured,
            default_tier=self.config.trust.default_tier,
            display_name=display_name,
            chat_id=chat_id,
            text=text,
            message_ref=message_ref,
            kind=kind,
            reply_ref=reply_ref,
            subject=subject,
            addressed=addressed,
            album=album,
            handles=handles,
            reply_to=reply_to,
        )
        await self._record(party_id, lines)
        party = await self.get(party_id)
        assert party is not None
        await self.bus.emit("external_updated", party=party, message=lines[-1])
        return party, False

    async def record_outbound(
        self, party_id: str, text: str, kind: str = "reply", *, answers: str | None = None
    ) -> None:
        """Record a message to the party. ``answers``: the ref of their message it is the
        answer to (the last of those it answers), which a restart reads to know it is
        answered even without the outbox row (a lost ``state.db``)."""
        line = {
            "type": "message",
            "direction": "out",
            "content": text,
            "kind": kind,
            "timestamp": iso(utcnow()),
            **({"answers": answers} if answers else {}),
        }
        await self._record(party_id, [line])
        party = await self.get(party_id)
        if party:
            await self.bus.emit("external_updated", party=party, message=line)

    async def record_refused(self, party_id: str, ref: str, reason: str) -> None:
        """Record that the party's message ``ref`` (the last of those one answer would
        have answered) was deliberately left unanswered (``reason``: the budget's key):
        a restart does not answer it (:mod:`bot.party_resume`); ``/reply`` still can."""
        line = {
            "type": "event",
            "event": "refused",
            "ref": ref,
            "reason": reason,
            "timestamp": iso(utcnow()),
        }
        await self._record(party_id, [line])

    async def set_tier(self, party_id: str, tier: str) -> PartyRecord:
        if tier not in TIERS:
            raise ValueError(f"unknown tier {tier!r}")
        line = {
            "type": "event",
            "event": "tier",
            "tier": tier,
            "source": "owner",
            "timestamp": iso(utcnow()),
        }
        async with self.party_lock(party_id):
            await self._record(party_id, [line])
            party = await self.get(party_id)
            assert party is not None
            await self._resolve(party_id, f"tier:{tier}")
        await self.bus.emit("external_updated", party=party, message=None)
        return party

    async def reset_context(self, party_id: str) -> None:
        line = {"type": "event", "event": "reset", "timestamp": iso(utcnow())}
        await self._record(party_id, [line])

    def escalation_due(self, party: PartyRecord, now: datetime | None = None) -> bool:
        """Rate limit: at most one escalation per party per escalation interval."""
        if not party.last_escalation:
            return True
        last = datetime.fromisoformat(party.last_escalation.replace("Z", "+00:00"))
        elapsed = ((now or utcnow()) - last).total_seconds()
        # The last escalation "in the future": the clock was set back since. Waiting for
        # the clock to catch up kept the owner from hearing of this party for as long
        # (a day's jump, a day); this escalation's time restarts the interval instead.
        return elapsed < 0 or elapsed >= self.config.trust.escalation_interval_seconds

    async def add_escalation(self, party: PartyRecord, text: str) -> int:
        line = {"type": "event", "event": "escalation", "text": text, "timestamp": iso(utcnow())}
        ids = await self._record(party.id, [line])
        await self.bus.emit(
            "escalation_created", party=party, escalation_id=ids[-1] if ids else 0, text=text
        )
        return ids[-1] if ids else 0

    async def resolve_escalations(self, party_id: str, resolution: str) -> None:
        """Mark the party's pending escalations as resolved (the owner answered them,
        or set their tier)."""
        async with self.party_lock(party_id):
            await self._resolve(party_id, resolution)

    async def _resolve(self, party_id: str, resolution: str) -> None:
        line = {
            "type": "event",
            "event": "resolved",
            "resolution": resolution,
            "timestamp": iso(utcnow()),
        }
        await self._record(party_id, [line])

    # -- rebuild ---------------------------------------------------------------------
    def party_files(self) -> list[Path]:
        return sorted(self.directory.glob("p*.jsonl")) if self.directory.is_dir() else []
