"""What an allow-listed group's members may cost: the model's answers to them, per hour.

A group's members (anyone in it but the owner) get the restricted profile, a paid model
call each, and nothing limited how many a busy or hostile group could trigger (known
contacts' are, :mod:`bot.party_budget`). ``trust.group_replies_per_hour`` bounds them
per group, not per member: members are not vetted one by one, anyone can join an
allowed group (or come back under a new account), so a per-member budget is as many
budgets as the group has accounts; the group is what the owner allowed. The owner's
own messages in the group are theirs and never counted. Counted from the index (the
group's replies in the hour) and the transcript (whose turn each answered, its
``fromOwner``), so a restart resets nothing. Past it, a
member's message is recorded as always but not answered: a ``reply_refused`` event names
its turn, so recovery does not answer it after a restart (:mod:`bot.index_writes`), and
the owner is told once an hour per group, across restarts (:mod:`bot.owner_notices`).
"""

from __future__ import annotations

import logging
from datetime import timedelta
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
REASON = "group_replies_per_hour"


class GroupBudget:
    """The hourly budget of the model's answers to the members of each group."""

    def __init__(self, services: Services) -> None:
        self.s = services
        # group conversation -> turn -> whether it was a member's (not the owner's): the
        # index does not say (its sender is a display name), the transcript's turn does
        # (``fromOwner``), read once per group and run; later turns are noted as answered
        self._members: dict[str, dict[int, bool]] = {}

    def note(self, conv_id: str, turn: int, member: bool) -> None:
        """The reply to ``turn`` of the group ``conv_id`` is being made; ``member``:
        the turn is a member's, not the owner's."""
        self._members.setdefault(conv_id, {})[turn] = member

    async def allows(self, rec: ConversationRecord, turn: int) -> bool:
        """Whether a member's turn ``turn`` of the group conversation ``rec`` may be
        answered now. When it may not, the refusal is recorded (before the owner's
        notice: a crash in between must not leave the turn owed a reply) and the owner
        told, at most once an hour per group. Replies to one conversation run one at a
        time (:class:`~bot.reply_queue.KeyedSerialQueue`): none in progress is missed."""
        conv_id = rec.id
        spent = await self.members_answers_since(conv_id, iso(utcnow() - timedelta(hours=1)))
        if spent < self.s.config.trust.group_replies_per_hour:
            return True
        log.warning("group %s: %d answers to members in the last hour, turn %d not answered",
                    conv_id, spent, turn)  # fmt: skip
        await self.s.conversations.append_event(
            conv_id, "reply_refused", turnNumber=turn, reason=REASON
        )
        if await notice_due(self.s.state, f"group_replies:{conv_id}"):
            name = rec.channel_meta.get("contact") or rec.title or conv_id
            await self.s.alert_owner(NOTICE.format(title=name, count=spent))
        return False

    async def members_answers_since(self, conv_id: str, since: str) -> int:
        """How many replies of the group ``conv_id`` made at ``since`` (an
        :func:`~bot.events.iso` time) or later answered a member's turn."""
        rows = await self.s.index_db.fetchall(
            "SELECT DISTINCT turn_number FROM turns WHERE conversation_id = ? AND"
            " role = 'assistant' AND timestamp >= ?",
            (conv_id, since),
        )
        answered = [int(n) for (n,) in rows]
        members = self._members.setdefault(conv_id, {})
        unknown = [n for n in answered if n not in members]
        if unknown:  # answered before this run: the turns say whose they were
            lines = await self.s.conversations.read_turns(conv_id, min(unknown), max(unknown))
            for line in lines:
                if line.get("role") == "user" and line.get("turnNumber") in unknown:
                    members[line["turnNumber"]] = line.get("fromOwner") is False
            for n in unknown:
                members.setdefault(n, False)  # no such turn: nobody's answer to count
        oldest = min(answered, default=None)
        for n in [n for n in members if oldest is None or n < oldest]:  # out of the hour
            del members[n]
        return sum(1 for n in answered if members[n])
