"""What the allow-listed groups' members may cost: the model's answers to them, per hour.

A group's members (anyone in it but the owner) get the restricted profile, a paid model
call each, and nothing limited how many a busy or hostile group could trigger (known
contacts' are, :mod:`bot.party_budget`). ``trust.group_replies_per_hour`` bounds them
per group, not per member: members are not vetted one by one, anyone can join an
allowed group (or come back under a new account), so a per-member budget is as many
budgets as the group has accounts; the group is what the owner allowed (all its
conversations: the owner's ``/new`` there does not refill it).
``trust.group_replies_per_hour_total`` bounds all groups' together: an owner who allowed
ten groups could otherwise be charged ten budgets an hour by strangers. The owner's own
messages in a group are theirs and never counted. Counted in a ledger read at a run's
first check from the index (the groups' replies in the hour) and the transcript (whose
turn each answered, its ``fromOwner``), so a restart resets nothing, and kept by the
checks from then on, answers being made now in other groups included. Past either, a
member's message is recorded as always but not answered: a ``reply_refused`` event
names its turn, so recovery does not answer it after a restart (:mod:`bot.index_writes`),
and the owner is told once an hour per group (or once for the total), across restarts
(:mod:`bot.owner_notices`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.events import CLOCK_SLACK, iso, not_after, utcnow
from bot.moments import parse_moment
from bot.owner_notices import notice_due

if TYPE_CHECKING:
    from bot.index import ConversationRecord
    from bot.services import Services

log = logging.getLogger("my_agent.replies")

NOTICE = (
    "The group {title} has had {count} answers from me to its members in the last hour "
    "(trust.group_replies_per_hour): what they ask now is recorded, not answered, until "
    "it is quieter. Your own messages there are answered as always."
)
TOTAL_NOTICE = (
    "Your groups have had {count} answers from me to their members in the last hour "
    "(trust.group_replies_per_hour_total): what members ask in any group now is recorded, "
    "not answered, until it is quieter. Your own messages there are answered as always."
)
REASON = "group_replies_per_hour"
TOTAL_REASON = "group_replies_per_hour_total"
TOTAL = "*"  # the key of the all-groups notice among the per-group ones

# The groups' answers in the hour, read once a run (:meth:`GroupBudget._seed`):
# (conversation, turn, the group's identity key, when).
ANSWERED = (
    "SELECT t.conversation_id, t.turn_number, c.identity_key, max(t.timestamp)"
    " FROM conversations c JOIN turns t ON t.conversation_id = c.id"
    " WHERE c.identity_key LIKE '%:group:%' AND c.updated >= ? AND t.role = 'assistant'"
    " AND t.timestamp BETWEEN ? AND ? GROUP BY t.conversation_id, t.turn_number"
)


class GroupBudget:
    """The hourly budgets of the model's answers to the members of the groups.

    The answers of the last hour are a ledger in memory, read from the index and the
    transcripts at the first check of a run (so a restart resets nothing) and kept by
    the checks themselves from then on: a check is a count, not a read. Reading the
    hour's answers at every member's message (as it was) cost every check a scan of
    the hour's turns and one row per answer, so a busy hour made each message dearer
    than the last (a flood of 10,000 members' messages under a raised budget took
    minutes of the index's connection)."""

    def __init__(self, services: Services) -> None:
        self.s = services
        # the members' answers allowed in the last hour, oldest first: (when, group's
        # identity key); an answer counts from the check that allowed it (a reply that
        # then failed was still a model call, and counts until the hour is over)
        self._ledger: deque[tuple[datetime, str]] = deque()
        self._seeded = False
        # One check at a time: two groups checked together both saw room for one more.
        self._lock = asyncio.Lock()

    async def allows(self, rec: ConversationRecord, turn: int) -> bool:
        """Whether a member's turn ``turn`` of the group conversation ``rec`` may be
        answered now; when it may, it counts from now on. When it may not, the refusal
        is recorded (before the owner's notice: a crash in between must not leave the
        turn owed a reply) and the owner told, at most once an hour per group (and once
        for all groups). Answers being made in other groups count from their check:
        none in progress is missed."""
        group = rec.identity_key or rec.id
        async with self._lock:
            now = utcnow()
            hour_ago = now - timedelta(hours=1)
            if not self._seeded:
                await self._seed(hour_ago)
            while self._ledger and self._ledger[0][0] < hour_ago:
                self._ledger.popleft()
            if self._ledger and self._ledger[-1][0] > now + CLOCK_SLACK:
                # allowed before the clock was set back: they would count for as long
                # as the set-back (session 40)
                self._ledger = deque(e for e in self._ledger if e[0] <= now + CLOCK_SLACK)
            spent = sum(1 for _, key in self._ledger if key == group)
            total = len(self._ledger)
            trust = self.s.config.trust
            if spent < trust.group_replies_per_hour and total < trust.group_replies_per_hour_total:
                self._ledger.append((now, group))
                return True
        if spent >= trust.group_replies_per_hour:
            name = rec.channel_meta.get("contact") or rec.title or rec.id
            reason, key, notice = REASON, group, NOTICE.format(title=name, count=spent)
        else:
            reason, key, notice = TOTAL_REASON, TOTAL, TOTAL_NOTICE.format(count=total)
        log.warning("group %s: %d answers to its members, %d to all groups' in the last hour,"
                    " turn %d not answered (%s)", rec.id, spent, total, turn, reason)  # fmt: skip
        await self.s.conversations.append_event(
            rec.id, "reply_refused", turnNumber=turn, reason=reason
        )
        if await notice_due(self.s.state, f"group_replies:{key}"):
            await self.s.alert_owner(notice)
        return False

    async def _seed(self, hour_ago: datetime) -> None:
        """The ledger from what an earlier run answered in the hour: the groups' replies
        in the index, counted where the turn they answered was a member's (the index
        does not say whose a turn was: its sender is a display name; the transcript's
        turn does, ``fromOwner``)."""
        since = iso(hour_ago)
        rows = await self.s.index_db.fetchall(ANSWERED, (since, since, not_after()))
        by_conv: dict[str, list[tuple[int, str, str]]] = {}
        for conv_id, turn, key, when in rows:
            by_conv.setdefault(conv_id, []).append((int(turn), key, when))
        seeded: list[tuple[datetime, str]] = []
        for conv_id, answers in by_conv.items():
            turns = [n for n, _, _ in answers]
            members = await self._members(conv_id, min(turns), max(turns))
            for n, key, when in answers:
                moment = parse_moment(when)
                # an answer whose time is none is not placed in the hour: before session
                # 42 it raised ValueError at every member's message of the run, and none
                # was answered
                if n in members and moment is not None:
                    seeded.append((moment, key))
        seeded.sort(key=lambda entry: entry[0])
        self._ledger.extendleft(reversed(seeded))  # before any answer allowed meanwhile
        self._seeded = True

    async def _members(self, conv_id: str, first: int, last: int) -> set[int]:
        """The turns ``first``..``last`` of the group ``conv_id`` that were a member's."""
        lines = await self.s.conversations.read_turns(conv_id, first, last)
        return {
            line["turnNumber"]
            for line in lines
            if line.get("role") == "user" and line.get("fromOwner") is False
        }
