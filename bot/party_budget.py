"""What known contacts may cost: the model's answers to them, per hour.

A ``known`` party is answered by the model (the restricted profile), and every answer is
a paid model call: nothing limited how many a chatty or compromised contact (or all of
them together) could trigger. ``trust.known_replies_per_hour`` bounds one contact's,
``trust.known_replies_per_hour_total`` all of theirs together, counted in the index (the
answers in the parties' files: a restart resets nothing). Past either, a message is
recorded as always (nothing received is lost) but not answered, and its refusal is
recorded in the party's file (a ``refused`` event naming it): a restart does not answer
it later (:mod:`bot.party_resume`), ``/reply`` still answers by hand. The owner is told
once an hour, not once per message, and not again at every start of a daemon in a crash
loop (:mod:`bot.owner_notices`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.events import InboundMessage, iso, utcnow
from bot.owner_notices import notice_due
from bot.parties import PartyRecord
from bot.party_answers import answer_yourself, our_addresses

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

PARTY_NOTICE = (
    "{who} has had {count} answers from me in the last hour (trust.known_replies_per_hour): "
    "what they send now is recorded, not answered, until it is quieter. {answer}"
)
TOTAL_NOTICE = (
    "Known contacts have had {count} answers from me in the last hour "
    "(trust.known_replies_per_hour_total): what they send now is recorded, not answered, "
    "until it is quieter. The dashboard lists their messages."
)
TOTAL = "*"  # the key of the store-wide notice among the per-party ones


class KnownBudget:
    """The hourly budget of the model's answers to known parties."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self._running = 0  # answers being made now, not yet in the index

    @asynccontextmanager
    async def answer(self, party: PartyRecord, msg: InboundMessage) -> AsyncIterator[bool]:
        """Whether ``party`` may be answered now (within both budgets), held for as
        long as the answer is made: concurrent answers to other parties count. ``msg``:
        their message the answer would answer (the last, of several), recorded as
        refused when it may not."""
        refused = await self._refused(party, msg)
        if refused is not None:
            # recorded first: a crash before the notice must not leave it owed
            reason, key, notice = refused
            await self.s.external.record_refused(party.id, msg.message_id, reason)
            await self._tell(key, notice)
        allowed = refused is None
        if allowed:
            self._running += 1
        try:
            yield allowed
        finally:
            if allowed:
                self._running -= 1

    async def _refused(
        self, party: PartyRecord, msg: InboundMessage
    ) -> tuple[str, str, str] | None:
        """None when ``party`` may be answered now, else the budget spent (its config
        key) and the owner's notice (its key and text). The party's notice names
        ``/replyall`` beside ``/reply`` when ``msg`` went to others too, as their
        escalations do (before session 42 only ``/reply``)."""
        trust, ext = self.s.config.trust, self.s.external
        hour = iso(utcnow() - timedelta(hours=1))
        theirs = await ext.answers_since(hour, party.id)
        if theirs >= trust.known_replies_per_hour:
            log.warning(
                "known party %s: %d answers in the last hour, not answered", party.id, theirs
            )
            answer = answer_yourself(party, msg, our_addresses(self.s.config))
            notice = PARTY_NOTICE.format(who=party.label, count=theirs, answer=answer)
            return "known_replies_per_hour", party.id, notice
        total = await ext.answers_since(hour) + self._running
        if total >= trust.known_replies_per_hour_total:
            log.warning(
                "known parties: %d answers in the last hour, %s not answered", total, party.id
            )
            return "known_replies_per_hour_total", TOTAL, TOTAL_NOTICE.format(count=total)
        return None

    async def _tell(self, key: str, text: str) -> None:
        """Tell the owner ``text`` unless told of ``key`` within the hour (in this run or
        an earlier one)."""
        if await notice_due(self.s.state, f"known_replies:{key}"):
            await self.s.alert_owner(text)
