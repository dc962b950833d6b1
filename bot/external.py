"""External communications (seed 000 "External Communications"): third parties.

Each party (channel + normalised identity) has an append-only JSONL record under
``data_dir/external/{party_id}.jsonl`` (the source of truth: messages in and out, tier
changes, escalations) mirrored into the ``external_*`` tables of the index (the model and
the mirroring: :mod:`bot.parties`; the append and its mirror: :mod:`bot.party_files`).
They never appear in the conversation list and never reach the owner's conversations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.config import AppConfig
from bot.db import Database
from bot.events import iso, utcnow
from bot.hooks import EventBus
from bot.moments import parse_moment
from bot.parties import (
    TIERS,
    PartyRecord,
    configured_tier,
    normalise_identity,
    party_handle,
)
from bot.party_edits import EDIT_MARK
from bot.party_files import PartyFiles
from bot.party_lines import inbound_lines
from bot.record_cache import keyed_locks


class ExternalStore(PartyFiles):
    """Third parties' records: what is written to their files (the source of truth), and
    when. The append and its mirror in the index: the base,
    :class:`~bot.party_files.PartyFiles`; the index's reads: its base,
    :class:`~bot.party_reads.PartyReads`."""

    def __init__(self, config: AppConfig, db: Database, bus: EventBus) -> None:
        super().__init__(config, db)
        self.bus = bus
        # party id -> lock held while their tier is read and acted on (bot/strangers.py)
        # and while it is changed or their escalations resolved (here)
        self._party_locks = keyed_locks()  # held or waited for only: thousands of parties

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

    # -- tiers ---------------------------------------------------------------------
    def configured_tier(
        self, channel: str, party_key: str, aliases: Sequence[str] = ()
    ) -> str | None:
        return configured_tier(self.config, channel, party_key, aliases)

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
        thread: Mapping[str, Any] | None = None,
        addressed: bool = True,
        album: str | None = None,
        attachments: Sequence[Mapping[str, Any]] = (),
        sent_at: str | None = None,
    ) -> tuple[PartyRecord, bool]:
        """Durably record a third party's message. Returns (party, is_duplicate).

        ``aliases``: other identities of the sender (a Telegram @username beside the
        numeric id), which ``trust.contacts`` may name instead of ``party_key``;
        ``thread``: what an answer threads under (:func:`bot.party_lines.thread_fields`:
        an e-mail's Message-ID, subject, References, Reply-To and Outlook thread), kept
        for the answers made or sent after a restart and the owner's later ``/reply``
        (:meth:`reply_thread`);
        ``addressed`` (False: a bounce, an out-of-office reply) and ``album`` (the media
        group it is a photo of): whether it expects an answer, kept for a restart that
        owes one (:mod:`bot.party_resume`); ``sent_at``: when it was written, as the
        channel says (:data:`bot.events.SENT_AT`), kept beside when it came."""
        party_id = party_handle(channel, party_key)
        handles = sorted({normalise_identity(channel, a) for a in aliases if a.strip()})
        await self._apply_owed(party_id)
        if await self.is_duplicate(party_id, message_ref):
            party = await self.get(party_id)
            assert party is not None
            # recorded by a call that failed after writing it: its flow is still to run
            return party, not self.take_unhandled(party_id, message_ref)
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
            thread=thread or {},
            addressed=addressed,
            album=album,
            handles=handles,
            attachments=attachments,
            sent_at=sent_at,
        )
        await self._record(party_id, lines)
        party = await self.get(party_id)
        assert party is not None
        await self.bus.emit("external_updated", party=party, message=lines[-1])
        return party, False

    async def record_outbound(
        self,
        party_id: str,
        text: str,
        kind: str = "reply",
        *,
        answers: str | None = None,
        spent: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a message to the party. ``answers``: the ref of their message it is the
        answer to (the last of those it answers), which a restart reads to know it is
        answered even without the outbox row (a lost ``state.db``); ``spent``: the
        model's answer's ``model``, ``usage`` and ``cost``
        (:func:`bot.brain.cost.reply_spent`), summed per party in the index."""
        line = {
            "type": "message",
            "direction": "out",
            "content": text,
            "kind": kind,
            "timestamp": iso(utcnow()),
            **({"answers": answers} if answers else {}),
            **(spent or {}),
        }
        await self._record(party_id, [line])
        party = await self.get(party_id)
        if party:
            await self.bus.emit("external_updated", party=party, message=line)

    async def record_refused(
        self, party_id: str, ref: str, reason: str, *, spent: Mapping[str, Any] | None = None
    ) -> None:
        """Record that the party's message ``ref`` (the last of those one answer would
        have answered) was deliberately left unanswered (``reason``: the budget's key):
        a restart does not answer it (:mod:`bot.party_resume`); ``/reply`` still can.
        ``spent``: what the answer made and then dropped cost (its ``model``, ``usage``,
        ``cost``): paid all the same, so counted in the party's sums."""
        line = {
            "type": "event",
            "event": "refused",
            "ref": ref,
            "reason": reason,
            "timestamp": iso(utcnow()),
            **(spent or {}),
        }
        await self._record(party_id, [line])

    async def record_withdrawn(self, party_id: str, answers: Sequence[str], reason: str) -> None:
        """Record that the model's answers to the party's messages ``answers`` (the refs
        their lines' ``answers`` name) were taken back unsent (``reason``: their new
        tier): each a ``withdrawn`` event with the answer's time (``at``), which takes
        it out of the exchange the model reads and marks it on the dashboard (its row
        in the index becomes kind ``withdrawn``: :func:`bot.parties.apply_party_lines`).
        Before session 41 the file kept it as if it had been sent."""
        made = {
            str(line["answers"]): str(line.get("timestamp", ""))
            for line in await self.read_lines(party_id)
            if line.get("type") == "message" and line.get("answers")
        }
        now = iso(utcnow())
        lines = [
            {
                "type": "event",
                "event": "withdrawn",
                "answers": ref,
                "at": made[ref],
                "reason": reason,
                "timestamp": now,
            }
            for ref in answers
            if ref in made
        ]
        if lines:
            await self._record(party_id, lines)

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
        await self.bus.emit("tier_changed", party=party)
        return party

    async def reset_context(self, party_id: str) -> None:
        line = {"type": "event", "event": "reset", "timestamp": iso(utcnow())}
        await self._record(party_id, [line])

    def escalation_due(self, party: PartyRecord, now: datetime | None = None) -> bool:
        """Rate limit: at most one escalation per party per escalation interval."""
        last = parse_moment(party.last_escalation)
        if last is None:
            # none yet, or a time the party's file does not hold as one (edited by hand):
            # before session 42 that raised ValueError at each of their messages, and
            # the owner heard of none of them
            return True
        elapsed = ((now or utcnow()) - last).total_seconds()
        # The last escalation "in the future": the clock was set back since. Waiting for
        # the clock to catch up kept the owner from hearing of this party for as long
        # (a day's jump, a day); this escalation's time restarts the interval instead.
        return elapsed < 0 or elapsed >= self.config.trust.escalation_interval_seconds

    async def add_escalation(
        self, party: PartyRecord, text: str, *, refs: Sequence[str] = (), edit: bool = False
    ) -> int:
        """Record an escalation (pending until the owner answers or sets the tier);
        ``refs``: the party's messages it quotes; ``edit``: a notice that one of them
        was edited (bot/party_edits.py), which leaves the escalation interval as it is."""
        line: dict[str, Any] = {
            "type": "event",
            "event": "escalation",
            "text": text,
            "timestamp": iso(utcnow()),
        }
        if refs:
            line["refs"] = list(refs)
        if edit:
            line[EDIT_MARK] = True
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
