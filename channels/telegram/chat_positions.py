"""Where each private chat is: the newest message in it, the owner's or the bot's.

In a private chat a reply used to go out unthreaded: right below the question, that
reads well. But a reply that lands after newer messages (the owner edited a message
the assistant had already answered, or wrote again while the answer was being made)
read as an answer to the last thing said. Telegram numbers a private chat's messages
in one sequence for both sides, so a reply to a message older than the newest is
threaded under it (Telegram shows what it answers), and one to the newest is not.
The private chats' positions are kept with the channel's cursors (``positions``, the
:data:`CHATS_KEPT` most recent), written once per update or send that moves one: before,
they were in memory only, and after a restart a reply to a message older than the newest
(the owner wrote again before it, the answer pending across the restart) came
unthreaded. Groups need none (an answer there is always threaded).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from bot.events import OutboundMessage

log = logging.getLogger("my_agent.telegram")

CHATS_REMEMBERED = 1024  # the chats whose newest message is known, most recent first
CHATS_KEPT = 128  # the private chats whose position is kept across restarts


class ChatPositions:
    """The newest message id seen per chat (received or sent), for the most recent chats.
    ``save`` (set by the channel) persists :meth:`dump`; :meth:`load` reads it back."""

    def __init__(self) -> None:
        self._newest: OrderedDict[str, int] = OrderedDict()
        self.save: Callable[[str], Awaitable[object]] | None = None
        self._unsaved = False  # a private chat moved since the last save

    def saw(self, chat_id: int | str, message_id: int) -> None:
        """``message_id`` exists in ``chat_id`` (received, or sent by the bot)."""
        key = str(chat_id)
        newest = max(message_id, self._newest.get(key, 0))
        if newest != self._newest.get(key) and not key.startswith("-"):
            self._unsaved = True  # a private chat (a group's id is negative)
        self._newest[key] = newest
        self._newest.move_to_end(key)
        while len(self._newest) > CHATS_REMEMBERED:
            self._newest.popitem(last=False)

    def dump(self) -> str:
        """The most recent private chats' positions, as JSON (oldest first)."""
        private = [(k, v) for k, v in self._newest.items() if not k.startswith("-")]
        return json.dumps(dict(private[-CHATS_KEPT:]))

    def load(self, stored: str | None) -> None:
        """Take back what :meth:`dump` gave (unreadable: started afresh, said once)."""
        try:
            kept = json.loads(stored) if stored else {}
            for chat, newest in kept.items():
                self.saw(chat, int(newest))
        except (ValueError, TypeError, AttributeError):
            log.warning("the kept Telegram chat positions are unreadable; ignoring them")
        self._unsaved = False

    async def persist(self) -> None:
        """Save the positions if a private chat's moved since the last save. A failure
        is logged: at worst a reply after a restart comes unthreaded."""
        if not self._unsaved or self.save is None:
            return
        self._unsaved = False
        try:
            await self.save(self.dump())
        except asyncio.CancelledError:
            raise
        except Exception:
            self._unsaved = True  # tried again at the next move
            log.exception("could not save the Telegram chat positions")

    def behind(self, chat_id: int | str, message_id: int) -> bool:
        """True when newer messages than ``message_id`` are known in ``chat_id``."""
        return message_id < self._newest.get(str(chat_id), 0)


def threaded_under(
    msg: OutboundMessage, chat_id: int | str, positions: ChatPositions
) -> int | None:
    """The message id ``msg`` is threaded under: in a group the one it answers; in a
    private chat that one only when newer messages came since (an edit answered after
    its first answer, a question asked while the last was answered), else None."""
    if not msg.in_reply_to:
        return None
    ref_chat, _, ref_id = msg.in_reply_to.rpartition(":")
    if ref_chat != str(chat_id) or not ref_id.isdigit():
        return None
    group = isinstance(chat_id, int) and chat_id < 0
    return int(ref_id) if group or positions.behind(chat_id, int(ref_id)) else None
