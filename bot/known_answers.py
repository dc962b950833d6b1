"""A known party's answers: the restricted brain's reply to what they said.

Known parties (``trust.contacts``, or the owner's ``/trust``) are answered by the model
through the restricted profile (no recall tools, no owner data), given their own
exchange, within the hourly budget of such answers (:mod:`bot.party_budget`). A base of
:class:`bot.strangers.StrangerFlow`, which decides which messages get one; a restart
that finds one owed queues it here too (:mod:`bot.party_resume`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bot.brain.cost import reply_spent
from bot.events import InboundMessage
from bot.parties import PartyRecord
from bot.party_budget import KnownBudget
from bot.party_limits import for_model
from bot.party_sends import PartySends
from bot.replies import ReplyTarget

log = logging.getLogger("my_agent.router")


class KnownAnswers(PartySends):
    """The model's answers to known parties (a base of :class:`bot.strangers.StrangerFlow`)."""

    budget: KnownBudget

    def answer_owed(
        self, party: PartyRecord, said: list[InboundMessage], target: ReplyTarget
    ) -> None:
        """Queue one answer to what a known party ``said`` that a restart found
        unanswered (:mod:`bot.party_resume`), as their messages are answered live."""
        self.s.replies.queue.submit(party.id, lambda: self._answer_known(party, said, target))

    async def withdraw_answers(self, party: PartyRecord) -> None:
        """Take back the model's answers to ``party`` still waiting in the outbox (their
        channel down, a retry's backoff) once the owner made them anything but known:
        blocked means never answered. The owner's own ``/reply``, an answer to a command
        and an acknowledgement still go. (Their file keeps the answer as made.)"""
        if party.tier == "known":
            return
        taken = await self.s.outbox.withdraw(party.id, ":reply", f"the party is {party.tier}")
        if taken:
            log.info("party %s is %s: %d unsent answer(s) withdrawn", party.id, party.tier, taken)

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
        now = await self._still_known(party, said[-1])
        if now is None:
            return
        async with self.budget.answer(now, said[-1].message_id) as allowed:
            if allowed:
                await self._answer_known_now(now, said, target)

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
        from bot.brain.base import BrainRequest, HistoryTurn

        msg = said[-1]
        refs = {m.message_id for m in said}
        history = [
            h
            for h in await self.s.external.history(party, through=msg.message_id)
            if not (h["direction"] == "in" and h["ref"] in refs)
        ]
        request = BrainRequest(
            profile="restricted",
            channel=msg.channel,
            text="\n".join(for_model(self.s, m.text) for m in said),
            model_alias=party.model or self.s.config.models.default,
            party_name=msg.sender_name or party.party_key,
            scope=self.s.config.trust.known_scope,
            readers=tuple(str(r) for r in msg.metadata.get("readers") or ()),
            history=tuple(
                HistoryTurn("user" if h["direction"] == "in" else "assistant", h["content"])
                for h in history
            ),
        )
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
