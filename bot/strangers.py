"""Third parties: everyone who writes and is not the owner.

Seed 000 "External Communications" and SPEC.md "Routing and trust". A party's messages
are kept in its own record (:class:`~bot.external.ExternalStore`), never in the owner's
conversations. By tier: ``blocked`` is recorded and not answered; ``known`` is answered
through the restricted brain profile (no recall tools, no owner data); ``untrusted`` (the
default) gets the configured acknowledgement, if any, and the owner an escalation with
Trust / Block / Reply actions on the configured channel, both rate-limited per party.
An album (photos sent together, one message each) is one message here: handled once,
when complete. Here: what a message gets; how it is given: a message to the party,
:mod:`bot.party_sends`; an escalation to the owner, :mod:`bot.party_escalations`; a known
party's answer by the model: :mod:`bot.known_answers`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.bursts import Bursts
from bot.commands import COMMANDS, parse_command
from bot.events import InboundMessage, iso, utcnow
from bot.known_answers import KnownAnswers
from bot.parties import PartyRecord, normalise_identity, party_handle, sent_at_of
from bot.party_budget import KnownBudget
from bot.party_edits import edit_notice_due, escalated, message_key, message_keys
from bot.party_escalations import attachments_of
from bot.party_limits import forged_known, kept
from bot.party_lines import thread_fields
from bot.replies import ALBUM_SETTLE_SECONDS, ReplyTarget

if TYPE_CHECKING:
    from bot.commands import Commands
    from bot.services import Services

log = logging.getLogger("my_agent.router")

# What an escalation says of a known party whose mail the server did not vouch for.
UNVERIFIED = "a known contact, but this mail is not verified as theirs (it may be forged)"
# The kind of such a mail in the party's file and the index.
UNVERIFIED_KIND = "unverified"


class StrangerFlow(KnownAnswers):
    """What the router does with a message that is not the owner's."""

    def __init__(
        self,
        services: Services,
        commands: Commands,
        contact_lock: Callable[[str], asyncio.Lock],
    ) -> None:
        self.s = services
        self.commands = commands
        self._contact_lock = contact_lock  # the router's, per identity key (PartyEscalations)
        # A party's albums, by (party, media group): the last photo noted (by the
        # party's message count) and the photos so far, answered once together.
        self._albums = Bursts()
        self._album_items: dict[tuple[str, str], list[InboundMessage]] = {}
        self.budget = KnownBudget(services)
        self._burst_said = {}  # KnownAnswers: a known party's burst being collected
        services.bus.subscribe("tier_changed", self.withdraw_answers)

    async def handle(self, msg: InboundMessage, target: ReplyTarget) -> None:
        """Record ``msg`` from a third party, then answer it by the party's tier: blocked
        -> nothing, known -> the restricted brain, untrusted -> acknowledgement (if
        configured) and an escalation to the owner, both rate-limited."""
        party_key = normalise_identity(msg.channel, msg.sender_id)
        album = msg.metadata.get("media_group")
        album = str(album) if album and not msg.metadata.get("edited") else None
        async with self.s.external.party_lock(party_handle(msg.channel, party_key)):
            await self._handle(msg, target, party_key, album)

    async def _handle(
        self, msg: InboundMessage, target: ReplyTarget, party_key: str, album: str | None
    ) -> None:
        msg = await kept(self.s, msg, party_key)  # a huge message, a flood: cut, said so
        # A mail only claiming a known contact's address is kept apart from their own
        # messages (its kind): never in their exchange the model reads, nor answered by
        # a restart as a message of theirs left unanswered (bot/party_resume.py).
        forged = await forged_known(self.s, msg, party_key)
        party, duplicate = await self.s.external.record_inbound(
            msg.channel,
            party_key,
            display_name=msg.sender_name,
            chat_id=msg.chat_id,
            text=msg.text,
            message_ref=msg.message_id,
            kind=UNVERIFIED_KIND if forged else "message",
            aliases=msg.sender_aliases,
            thread=thread_fields(msg),
            addressed=msg.addressed,
            album=album,
            attachments=[asdict(a) for a in msg.attachments],
            sent_at=sent_at_of(msg.metadata),
        )
        if duplicate:
            return
        if msg.replayed:
            # Handled by an earlier run (an older backup of the data directory restored):
            # they had their acknowledgement, the owner the escalation (session 40).
            log.info(
                "message %s of party %s recorded again, not answered", msg.message_id, party.id
            )
            return
        if party.tier == "blocked":
            log.info("message from blocked party %s recorded, not answered", party.id)
            return
        if album:
            # An album is one message to the owner's eyes: its photos are handled once,
            # together (one answer, or one acknowledgement and one escalation quoting
            # every caption); before, an untrusted party's later photos came marked as
            # unaddressed, and the escalation quoted the first caption only.
            self._album_item(party, msg, album, target)
            return
        if party.tier != "known" and self.s.replies.queue.busy(party.id):
            # Their album is still being collected: what they sent after it is
            # handled after it (an escalation quoting this alone went first, and the
            # album's, no longer due, never went).
            self.s.replies.queue.submit(party.id, lambda: self._respond_later(party, msg, target))
            return
        await self._respond(party, msg, target)

    async def _respond_later(
        self, party: PartyRecord, msg: InboundMessage, target: ReplyTarget
    ) -> None:
        """:meth:`_respond`, queued behind their album: as the party is now (the album's
        escalation counts against the rate limit; the owner may have trusted them)."""
        async with self.s.external.party_lock(party.id):
            now = await self.s.external.get(party.id) or party
            if now.tier != "blocked":
                await self._respond(now, msg, target)

    async def _respond(self, party: PartyRecord, msg: InboundMessage, target: ReplyTarget) -> None:
        """Answer one recorded message (not an album's photo) of a party not blocked."""
        ext = self.s.external
        if not msg.addressed:
            # A bounce or an out-of-office reply: answering it (a known party's model
            # reply, an acknowledgement) risks a mail loop. The owner still hears of it.
            if ext.escalation_due(party):
                await self.escalate(party, msg.text, said=msg)
            return
        if party.tier == "known" and msg.identity_verified is False:
            # Their address, not vouched for by the receiving server (e-mail): anyone
            # can write as a known contact, and had the model answer with the contact's
            # exchange in its context. The owner hears of it; nothing is answered, nor
            # run: their commands, answered without a stranger's limit, went to the
            # contact's inbox, and a forged /new wiped the contact's context.
            log.warning("known party %s: a mail not verified as theirs, escalated", party.id)
            if ext.escalation_due(party):
                await self.escalate(party, msg.text, standing=UNVERIFIED, said=msg)
            return
        command = parse_command(msg.text)
        # Only the commands we know are commands: anything else from a stranger is a
        # message like any other, above all Telegram's "/start", a new user's first
        # message, which used to get "Unknown command" and never reached the owner.
        if command is not None and command[0] in COMMANDS:
            if party.tier != "known" and ext.escalation_due(party):
                # Their words reach the owner, command or not: "/help your basement is
                # flooding, call me" got the command list and no escalation, and a mail
                # forged as the owner's running /trust went unnoticed (session 38).
                await self.escalate(party, msg.text, said=msg)
            if party.tier != "known" and not await self._command_answer_due(party):
                log.info("command of untrusted party %s recorded, not answered (limit)", party.id)
                return
            result = await self.commands.run_stranger(command[0], command[1], party)
            await self.send_to_party(
                party,
                result.text,
                kind="command",
                dedup=f"{msg.channel}:{msg.message_id}:command",
                answering=msg,
            )
            return
        if party.tier == "known":
            # under a flood, storing it goes first; a burst gets one answer
            self.queue_answer(party, [msg], target, wait=self.s.incoming.pause)
            return
        if msg.metadata.get("edited") and await self._edited_escalated(party, msg):
            return
        await self._acknowledge_and_escalate(party, [msg])

    async def _edited_escalated(self, party: PartyRecord, msg: InboundMessage) -> bool:
        """Whether ``msg`` edits a message of theirs the owner was told of. Then the owner
        is told of the edit, when due (:mod:`bot.party_edits`), and nothing else is done:
        no new escalation, no second acknowledgement."""
        lines = await self.s.external.read_lines(party.id)
        if not escalated(lines, message_key(msg)):
            return False
        if edit_notice_due(lines, utcnow()):
            await self.notice_edit(party, msg)
        else:
            log.info("edit by party %s recorded; the owner was told of one just now", party.id)
        return True

    async def _command_answer_due(self, party: PartyRecord) -> bool:
        """Whether an untrusted party's command is answered: once per escalation
        interval per party, and within the hourly escalation budget for all parties
        together (counted in the index: a restart resets nothing). Each answer went out
        before, and by e-mail to a From address anyone can forge."""
        ext, trust = self.s.external, self.s.config.trust
        now = utcnow()
        recent = iso(now - timedelta(seconds=trust.escalation_interval_seconds))
        if trust.escalation_interval_seconds and await ext.command_answers_since(recent, party.id):
            return False
        hour = iso(now - timedelta(hours=1))
        return await ext.command_answers_since(hour) < trust.escalations_per_hour

    async def escalate_owed(
        self, party: PartyRecord, said: list[InboundMessage], at: datetime
    ) -> None:
        """Acknowledge and escalate an untrusted party's album that a restart found cut
        short (:mod:`bot.party_resume`), as it would have been ``at`` its end."""
        async with self.s.external.party_lock(party.id):
            await self._acknowledge_and_escalate(party, said, at)

    async def _acknowledge_and_escalate(
        self, party: PartyRecord, said: list[InboundMessage], at: datetime | None = None
    ) -> None:
        """What an untrusted party ``said`` (a message, or an album's photos): the
        acknowledgement (if configured) and an escalation to the owner, both
        rate-limited per party (as of ``at``, else now)."""
        ext = self.s.external
        msg = said[-1]
        text = "\n".join(m.text for m in said)
        due = ext.escalation_due(party, at)
        ack = self.s.config.trust.acknowledgement
        refs = {m.message_id for m in said}
        if not due and not _opener(text) and await self._said_nothing_yet(party, refs):
            # Their escalation quoted only Telegram's "/start": these are their first
            # words, which the owner hears (they were acknowledged already).
            await self.escalate(
                party, text, said=msg, attachments=attachments_of(said), refs=message_keys(said)
            )
            return
        if not due:
            return
        # The owner hears of it first: a stop or a crash between the two leaves the party
        # unacknowledged rather than the owner uninformed (the acknowledgement came first,
        # and its line in their file hid the missed escalation from the next start's
        # check, bot.party_resume.escalate_cut_messages).
        await self.escalate(
            party, text, said=msg, attachments=attachments_of(said), refs=message_keys(said)
        )
        if ack and await self.escalations_in_budget():
            # Past the hourly budget of all parties' escalations (identities rotated
            # per message) no acknowledgement either: by e-mail each went to a sender
            # address nobody checked, backscatter for whoever forged it.
            await self.send_to_party(
                party,
                ack,
                kind="acknowledgement",
                dedup=f"{msg.channel}:{msg.message_id}:ack",
                answering=msg,
            )

    async def _said_nothing_yet(self, party: PartyRecord, refs: set[str]) -> bool:
        """Whether all the party sent before ``refs`` (their latest message, or album,
        already recorded) was Telegram's "/start" (the Start button, perhaps with a
        deep-link payload)."""
        said = [h for h in await self.s.external.history(party) if h["direction"] == "in"]
        before = [h for h in said if h["ref"] not in refs]
        return bool(before) and all(_opener(h["content"]) for h in before)

    def _album_item(
        self, party: PartyRecord, msg: InboundMessage, album: str, target: ReplyTarget
    ) -> None:
        """Queue what is done with a party's album, once for all its photos (as the
        owner's albums are answered, :mod:`bot.bursts`): a known party's answer (at its
        first photo alone, the other captions never reached the model), an untrusted
        party's acknowledgement and escalation."""
        key = (party.id, album)
        self._album_items.setdefault(key, []).append(msg)
        seq = party.message_count  # theirs, counted as recorded: the photo's place
        self._albums.note(key, seq)

        async def handle_album() -> None:
            if await self._albums.answered_by(key, seq, ALBUM_SETTLE_SECONDS) is not None:
                return  # a later photo of it answers
            items = self._album_items.pop(key, [msg])
            async with self.s.external.party_lock(party.id):
                # their tier as it is now: the owner may have trusted or blocked them
                # while the album came
                now = await self.s.external.get(party.id) or party
                if now.tier == "untrusted":
                    await self._acknowledge_and_escalate(now, items)
                    return
            if now.tier != "known":  # (the model's answer is not made under the lock)
                return
            pause = self.s.replies.debounce(target.channel)
            if not pause:
                await self._answer_known(now, items, target)
                return
            # one burst with what they say before and after it (session 41)
            await self._answer_burst(now, self._join_burst(now, items, seq), target, pause)

        self.s.replies.queue.submit(party.id, handle_album)


def _opener(text: str) -> bool:
    """Telegram's "/start": what the Start button sends before anyone says a word."""
    command = parse_command(text)
    return command is not None and command[0] == "start"
