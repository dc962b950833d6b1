"""What known contacts may cost: the model's answers to them, per hour.

A ``known`` party is answered by the model (the restricted profile), and every answer is
a paid model call: nothing limited how many a chatty or compromised contact (or all of
them together) could trigger. ``trust.known_replies_per_hour`` bounds one contact's,
``trust.known_replies_per_hour_total`` all of theirs together, counted in the index (the
answers in the parties' files: a restart resets nothing). Past either, a message is
recorded as always (nothing received is lost) but not answered, and the owner is told
once an hour (per run), not once per message; ``/reply`` still answers by hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.events import iso, utcnow
from bot.parties import PartyRecord

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

PARTY_NOTICE = (
    "{who} has had {count} answers from me in the last hour (trust.known_replies_per_hour): "
    "what they send now is recorded, not answered, until it is quieter. "
    "/reply {id} <text> to answer yourself."
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
        self._told: dict[str, float] = {}  # party id (or TOTAL) -> when told (monotonic)
        self._running = 0  # answers being made now, not yet in the index

    @asynccontextmanager
    async def answer(self, party: PartyRecord) -> AsyncIterator[bool]:
        """Whether ``party`` may be answered now (within both budgets), held for as
        long as the answer is made: concurrent answers to other parties count."""
        allowed = await self._allows(party)
        if allowed:
            self._running += 1
        try:
            yield allowed
        finally:
            if allowed:
                self._running -= 1

    async def _allows(self, party: PartyRecord) -> bool:
        trust, ext = self.s.config.trust, self.s.external
        hour = iso(utcnow() - timedelta(hours=1))
        theirs = await ext.answers_since(hour, party.id)
        if theirs >= trust.known_replies_per_hour:
            log.warning(
                "known party %s: %d answers in the last hour, not answered", party.id, theirs
            )
            await self._tell(
                party.id, PARTY_NOTICE.format(who=party.label, count=theirs, id=party.id)
            )
            return False
        total = await ext.answers_since(hour) + self._running
        if total >= trust.known_replies_per_hour_total:
            log.warning(
                "known parties: %d answers in the last hour, %s not answered", total, party.id
            )
            await self._tell(TOTAL, TOTAL_NOTICE.format(count=total))
            return False
        return True

    async def _tell(self, key: str, text: str) -> None:
        """Tell the owner ``text`` unless told of ``key`` within the hour."""
        now = time.monotonic()
        told = self._told.get(key)
        if told is not None and now - told < 3600:
            return
        self._told[key] = now
        await self.s.alert_owner(text)
