"""A known party's answers: the restricted brain's reply to what they said.

Known parties (``trust.contacts``, or the owner's ``/trust``) are answered by the model
through the restricted profile (no recall tools, no owner data), given their own
exchange, within the hourly budget of such answers (:mod:`bot.party_budget`). A base of
:class:`bot.strangers.StrangerFlow`, which decides which messages get one; a restart
that finds one owed queues it here too (:mod:`bot.party_resume`). With no model
configured (the offline brain) nothing answers them: their message goes to the owner as
an escalation (:meth:`KnownAnswers._escalate_offline`).

On a channel with a debounce (``brain.debounce_seconds``, as the owner's messages are
answered: :mod:`bot.bursts`) an answer first waits until the party's messages pause
that long, and what they sent meanwhile (or while an earlier answer was being made) is
answered with it: one answer, to the burst's last message, whose request holds every
message of it. Before session 41 "hi", "are you there?" and "I need the address" sent
in three quick messages got three paid model calls and three answers. The answer is
keyed by the last message (``{channel}:{ref}:reply``, ``answers`` in their file), which
tells a restart that the burst's earlier messages are answered too; a restart answers
what it finds owed once, with what the channel delivers first if it joins the burst.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bot.brain.cost import reply_spent
from bot.brain.offline import OFFLINE_LABEL
from bot.events import InboundMessage
from bot.parties import PartyRecord
from bot.party_budget import KnownBudget
from bot.party_context import answer_request
from bot.party_edits import message_keys
from bot.party_escalations import PartyEscalations, attachments_of
from bot.party_sends import PartySends
from bot.replies import ReplyTarget

log = logging.getLogger("my_agent.router")

# What a known party is told offline, once per escalation interval.
OFFLINE_NOTICE = (
    f"{OFFLINE_LABEL} No one answers automatically right now; the owner has been told "
    "of your message and can reply."
)
# How the owner's escalation describes them.
OFFLINE_STANDING = "a known contact, not answered: no language model is configured"
# Their message's ``refused`` reason in their file (a restart does not answer it).
OFFLINE_REASON = "offline"


class KnownAnswers(PartySends, PartyEscalations):
    """The model's answers to known parties (a base of :class:`bot.strangers.StrangerFlow`)."""

    budget: KnownBudget
    # a known party -> what they said since their last answer, by their message count
    # when it came (a burst being collected: :meth:`queue_answer`)
    _burst_said: dict[str, list[tuple[int, InboundMessage]]]

    def answer_owed(
        self, party: PartyRecord, said: list[InboundMessage], target: ReplyTarget
    ) -> None:
        """Queue one answer to what a known party ``said`` that a restart found
        unanswered (:mod:`bot.party_resume`), as their messages are answered live."""
        self.queue_answer(party, said, target)

    def queue_answer(
        self,
        party: PartyRecord,
        said: list[InboundMessage],
        target: ReplyTarget,
        wait: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Queue the answer to what a known party ``said`` (a message, or what a restart
        found owed), at their turn (``wait``: the flood's pause, as the queue takes it).
        With a debounce on its channel, the answer to a burst's last message answers
        them all (module docstring)."""
        pause = self.s.replies.debounce(target.channel)
        if not pause:
            self.s.replies.queue.submit(
                party.id, lambda: self._answer_known(party, said, target), wait=wait
            )
            return
        seq = self._join_burst(party, said)
        self.s.replies.queue.submit(
            party.id, lambda: self._answer_burst(party, seq, target, pause), wait=wait
        )

    def _join_burst(
        self, party: PartyRecord, said: list[InboundMessage], seq: int | None = None
    ) -> int:
        """Add ``said`` to the party's burst at ``seq`` (their message count when it
        came; as the record is now when not given); returns it."""
        seq = party.message_count if seq is None else seq
        self._burst_said.setdefault(party.id, []).extend((seq, m) for m in said)
        self.s.replies.party_bursts.note(party.id, seq)
        return seq

    async def _answer_burst(
        self, party: PartyRecord, seq: int, target: ReplyTarget, pause: float
    ) -> None:
        """Once the party's burst has paused: nothing when a later message of it answers
        ``seq``'s, else one answer to all of it not answered yet."""
        later = await self.s.replies.party_bursts.answered_by(party.id, seq, pause)
        if later is not None:
            log.debug("party %s: message %d is answered with message %d", party.id, seq, later)
            return
        # in the order they came (an album joins as a whole once complete, after a
        # message they sent meanwhile): stable, so an album's photos keep their order
        said = [m for _seq, m in sorted(self._burst_said.pop(party.id, []), key=lambda x: x[0])]
        if said:  # (none: a later job took them, its own message an album's photo)
            await self._answer_known(party, said, target)

    async def withdraw_answers(self, party: PartyRecord) -> None:
        """Take back the model's answers to ``party`` still waiting in the outbox (their
        channel down, a retry's backoff) once the owner made them anything but known:
        blocked means never answered. The owner's own ``/reply``, an answer to a command
        and an acknowledgement still go. Their file keeps each answer as made, followed
        by a ``withdrawn`` event naming it (:meth:`bot.external.ExternalStore.record_withdrawn`).

        The answer being made for them is stopped too (its model call, or its wait for
        the model in an outage): before session 41 it ran to its end, paid, and was then
        dropped. What they said stays in their file, recorded as refused."""
        if party.tier == "known":
            return
        if self.s.replies.generation.cancel(party.id):
            log.info("party %s is %s: the answer being made is stopped", party.id, party.tier)
        async with self.s.external.party_lock(party.id):
            taken = await self.s.outbox.withdraw(party.id, ":reply", f"the party is {party.tier}")
            if not taken:
                return
            log.info(
                "party %s is %s: %d unsent answer(s) withdrawn", party.id, party.tier, len(taken)
            )
            # Their file says so (session 41): it kept each as made, and the dashboard
            # and the model's later context read it as said to them.
            prefix = f"{party.channel}:"
            refs = [k[len(prefix) : -len(":reply")] for k in taken if k.startswith(prefix)]
            await self.s.external.record_withdrawn(party.id, refs, f"tier:{party.tier}")

    async def _answer_known(
        self, party: PartyRecord, said: list[InboundMessage], target: ReplyTarget
    ) -> None:
        """Answer what a known party ``said`` (a message, or an album's photos) with the
        restricted brain, given their exchange as of its arrival: read when the answer
        ran, it held what they sent since (queued behind it), as if said before it.
        Within the hourly budget of answers (:mod:`bot.party_budget`); past it, what
        they said stays recorded, marked as refused: never answered automatically.

        Only while they are known: the owner may block them (or set them untrusted)
        while the answer waits its turn or for the model, and it is then not made."""
        if self.s.brain.name == "offline":
            await self._escalate_offline(party, said)
            return
        now = await self._still_known(party, said[-1])
        if now is None:
            return
        async with self.budget.answer(now, said[-1]) as allowed:
            if allowed:
                await self._answer_known_now(now, said, target)

    async def _escalate_offline(self, party: PartyRecord, said: list[InboundMessage]) -> None:
        """What a known party ``said`` while no model is configured: recorded as refused
        (a restart does not answer it, nor the model once a key is set; ``/reply``
        does), escalated to the owner and the party told so, both at most once per
        escalation interval (per party, as a stranger's: their later messages wait in
        their file, which the escalation's actions and the dashboard show).

        Before session 41 each message got the offline notice ("No automatic answer is
        available right now") and the owner was never told: a stranger was told once
        an hour and the owner at once, a trusted contact treated worse. Not answered
        once a key is set either: hours later, after the owner was told (and may have
        answered by hand), a model's answer would come out of the blue."""
        msg = said[-1]
        async with self.s.external.party_lock(party.id):
            now = await self._still_known(party, msg)
            if now is None:
                return
            if self.s.external.escalation_due(now):
                log.info("known party %s: offline, escalated to the owner", now.id)
                # The owner hears of it first, as of a stranger's message: a crash
                # between the two leaves the party untold rather than the owner.
                await self.escalate(
                    now,
                    "\n".join(m.text for m in said),
                    OFFLINE_STANDING,
                    said=msg,
                    attachments=attachments_of(said),
                    refs=message_keys(said),
                )
                await self.send_to_party(
                    now,
                    OFFLINE_NOTICE,
                    kind="acknowledgement",
                    dedup=f"{msg.channel}:{msg.message_id}:ack",
                    answering=msg,
                )
            else:
                log.info("known party %s: message recorded (offline, owner told)", now.id)
            # Refused last: a crash before it leaves the message owed, and the restart
            # (bot.party_resume) brings it here again, where the owner, told already, is
            # not told twice (the escalation is not due); recorded first, a crash before
            # the escalation left the owner never told of it.
            await self.s.external.record_refused(now.id, msg.message_id, OFFLINE_REASON)

    async def _still_known(
        self, party: PartyRecord, msg: InboundMessage, spent: Mapping[str, Any] | None = None
    ) -> PartyRecord | None:
        """The party's record as it is now if they are still known; else None, their
        message ``msg`` recorded as refused (a restart does not answer it either; what
        they sent stays in their file, ``/reply`` still answers by hand), with what the
        answer dropped then had cost (``spent``: :func:`bot.brain.cost.reply_spent`).

        Before session 40 an answer queued or being made when the owner ran /block
        (told "their messages are kept but never answered") was made and sent all the
        same: five messages of an outage got five answers once the model was back."""
        now = await self.s.external.current(party.id) or party
        if now.tier == "known":
            return now
        log.info("party %s is %s now: their message is not answered", party.id, now.tier)
        await self.s.external.record_refused(
            party.id, msg.message_id, f"tier:{now.tier}", spent=spent
        )
        return None

    async def _answer_known_now(
        self, party: PartyRecord, said: list[InboundMessage], target: ReplyTarget
    ) -> None:
        msg = said[-1]
        # their exchange and words, a message that came late labelled so (session 42)
        request = await answer_request(self.s, party, said)
        reply = await self.s.replies.generation.generate(
            party.id, 0, request, target, f"{msg.channel}:{msg.message_id}"
        )
        # What it cost (every attempt's calls: ReplyGeneration's all_attempts), kept on
        # its line in their file as an assistant turn keeps it: before session 40 these
        # paid calls were in no file, /status nor the dashboard's Analytics.
        spent = reply_spent(reply)
        # Their tier again, now that the answer is made (it may have waited out an
        # outage): under their lock, which /block takes to change it, so the answer is
        # either dropped here (and what it cost kept on the refusal) or queued before
        # the block, which withdraws it.
        async with self.s.external.party_lock(party.id):
            if await self._still_known(party, msg, spent) is None:
                return
            if reply.model == "stopped":
                # stopped by a tier change (withdraw_answers) the owner has undone since:
                # never sent cut short; refused, as the block that stopped it meant
                await self.s.external.record_refused(
                    party.id, msg.message_id, "stopped", spent=spent
                )
                return
            await self.send_to_party(
                party,
                reply.text,
                kind="reply",
                # per their last message: a restart finds it answered by this key (or by
                # "answers" in their file) and does not answer it again
                dedup=f"{msg.channel}:{msg.message_id}:reply",
                answering=msg,
                answers=msg.message_id,
                spent=spent,
            )
