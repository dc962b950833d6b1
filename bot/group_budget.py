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
messages in a group are theirs and never counted. Counted from the index (the groups'
replies in the hour) and the transcript (whose turn each answered, its ``fromOwner``),
so a restart resets nothing, plus the answers being made now in other groups (not yet
in the index). Past either, a member's message is recorded as always but not answered:
a ``reply_refused`` event names its turn, so recovery does not answer it after a restart
(:mod:`bot.index_writes`), and the owner is told once an hour per group (or once for
the total), across restarts (:mod:`bot.owner_notices`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.events import iso, utcnow
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

# The groups' answers in the hour: (conversation, turn, the group's identity key).
ANSWERED = (
    "SELECT DISTINCT t.conversation_id, t.turn_number, c.identity_key FROM conversations c"
    " JOIN turns t ON t.conversation_id = c.id WHERE c.identity_key LIKE '%:group:%'"
    " AND c.updated >= ? AND t.role = 'assistant' AND t.timestamp >= ?"
)


class GroupBudget:
    """The hourly budgets of the model's answers to the members of the groups."""

    def __init__(self, services: Services) -> None:
        self.s = services
        # group conversation -> turn -> whether it was a member's (not the owner's): the
        # index does not say (its sender is a display name), the transcript's turn does
        # (``fromOwner``), read once per group and run; later turns are noted as answered
        self._members: dict[str, dict[int, bool]] = {}
        # Members' turns allowed and being answered, not in the index yet, and when:
        # other groups' answers are made at the same time, and the total counts them.
        self._running: dict[tuple[str, int], tuple[str, datetime]] = {}
        # One check at a time: two groups checked together both saw room for one more.
        self._lock = asyncio.Lock()

    def note(self, conv_id: str, turn: int, member: bool) -> None:
        """The reply to ``turn`` of the group ``conv_id`` is being made; ``member``:
        the turn is a member's, not the owner's."""
        self._members.setdefault(conv_id, {})[turn] = member

    async def allows(self, rec: ConversationRecord, turn: int) -> bool:
        """Whether a member's turn ``turn`` of the group conversation ``rec`` may be
        answered now; when it may, it counts from now on. When it may not, the refusal
        is recorded (before the owner's notice: a crash in between must not leave the
        turn owed a reply) and the owner told, at most once an hour per group (and once
        for all groups). Replies to one conversation run one at a time
        (:class:`~bot.reply_queue.KeyedSerialQueue`), other groups' are counted while
        they are made: none in progress is missed."""
        group = rec.identity_key or rec.id
        async with self._lock:
            now = utcnow()
            answers = await self.members_answers_since(iso(now - timedelta(hours=1)))
            spent = sum(1 for key in answers.values() if key == group)
            total = len(answers)
            trust = self.s.config.trust
            if spent < trust.group_replies_per_hour and total < trust.group_replies_per_hour_total:
                self._running[(rec.id, turn)] = (group, now)
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

    async def members_answers_since(self, since: str) -> dict[tuple[str, int], str]:
        """The groups' replies made at ``since`` (an :func:`~bot.events.iso` time) or
        later that answered a member's turn, and those being made: (conversation,
        turn) -> the group's identity key."""
        rows = await self.s.index_db.fetchall(ANSWERED, (since, since))
        by_conv: dict[str, list[int]] = {}
        groups: dict[str, str] = {}
        for conv_id, turn, key in rows:
            by_conv.setdefault(conv_id, []).append(int(turn))
            groups[conv_id] = key
        answers: dict[tuple[str, int], str] = {}
        for conv_id, turns in by_conv.items():
            members = await self._whose(conv_id, turns)
            answers.update({(conv_id, n): groups[conv_id] for n in turns if members[n]})
        for (conv_id, turn), (group, started) in list(self._running.items()):
            if turn in by_conv.get(conv_id, ()) or iso(started) < since:
                del self._running[(conv_id, turn)]  # in the index now, or out of the hour
            else:
                answers[(conv_id, turn)] = group
        return answers

    async def _whose(self, conv_id: str, answered: list[int]) -> dict[int, bool]:
        """For the turns ``answered`` of the group ``conv_id`` (and the later ones noted),
        whether each was a member's."""
        members = self._members.setdefault(conv_id, {})
        unknown = [n for n in answered if n not in members]
        if unknown:  # answered before this run: the turns say whose they were
            lines = await self.s.conversations.read_turns(conv_id, min(unknown), max(unknown))
            for line in lines:
                if line.get("role") == "user" and line.get("turnNumber") in unknown:
                    members[line["turnNumber"]] = line.get("fromOwner") is False
            for n in unknown:
                members.setdefault(n, False)  # no such turn: nobody's answer to count
        oldest = min(answered)
        for n in [n for n in members if n < oldest]:  # out of the hour
            del members[n]
        return members
