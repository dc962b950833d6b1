"""Groups the owner did not allow: their messages dropped, and said so without flooding.

The bot can be added to any group by anyone, and Telegram then sends it every message
there it may see. Before session 25 each one was an INFO line: a busy group filled the
log (and the journal) with the same line. Now a group is named at INFO once per
:data:`LOG_EVERY` seconds, with how many of its messages were dropped since it was last
named; the messages in between are DEBUG lines. The counts not said yet are said when the
channel stops (:meth:`IgnoredGroups.say_counts`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiogram.types import Chat

from bot.config.channels import TelegramGroupConfig
from channels.telegram.translate import GROUP_TYPES, allowed_group

log = logging.getLogger("my_agent.telegram")

# A group not allowed is named in the log at most this often (with its count since).
LOG_EVERY = 3600.0
# Groups remembered (the bot added to many groups must not grow memory without bound).
REMEMBERED = 512


@dataclass
class _Seen:
    named_at: float  # when it was last named at INFO (the clock's value)
    dropped: int = 0  # messages dropped since then


class IgnoredGroups:
    """Drops the messages of groups not on ``channels.telegram.groups``, logging each
    group once per :data:`LOG_EVERY`; ``clock`` is injectable for tests."""

    def __init__(
        self,
        groups: Mapping[str, TelegramGroupConfig],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.groups = groups
        self.clock = clock
        self.seen: OrderedDict[int, _Seen] = OrderedDict()

    def drops(self, chat: Chat) -> bool:
        """True when ``chat`` is a group not allowed (its message is to be dropped)."""
        if chat.type not in GROUP_TYPES or allowed_group(chat, self.groups) is not None:
            return False
        now = self.clock()
        seen = self.seen.get(chat.id)
        if seen is not None and now - seen.named_at < LOG_EVERY:
            seen.dropped += 1
            log.debug("ignoring a message in group %s: not in channels.telegram.groups", chat.id)
            return True
        if seen is None:
            log.info(
                "ignoring messages in group %s (%r): not in channels.telegram.groups "
                "(said again at most hourly)",
                chat.id,
                chat.title,
            )
        else:
            log.info(
                "ignoring messages in group %s (%r): not in channels.telegram.groups; "
                "%d more ignored since it was last said",
                chat.id,
                chat.title,
                seen.dropped,
            )
        self.seen[chat.id] = _Seen(named_at=now)
        self.seen.move_to_end(chat.id)
        while len(self.seen) > REMEMBERED:
            self.seen.popitem(last=False)
        return True

    def say_counts(self) -> None:
        """Log the messages dropped since each group was last named, if any (at stop:
        without it, a busy group's last hour of drops was said nowhere)."""
        counts = {chat_id: s.dropped for chat_id, s in self.seen.items() if s.dropped}
        if counts:
            listed = ", ".join(f"{chat_id}: {n}" for chat_id, n in counts.items())
            log.info(
                "%d more message(s) ignored in groups not allowed (%s)",
                sum(counts.values()),
                listed,
            )
        for seen in self.seen.values():
            seen.dropped = 0
