"""Where each private chat is: the newest message in it, the owner's or the bot's.

In a private chat a reply used to go out unthreaded: right below the question, that
reads well. But a reply that lands after newer messages (the owner edited a message
the assistant had already answered, or wrote again while the answer was being made)
read as an answer to the last thing said. Telegram numbers a private chat's messages
in one sequence for both sides, so a reply to a message older than the newest is
threaded under it (Telegram shows what it answers), and one to the newest is not.
Kept in memory: after a restart a chat's first reply is unthreaded, as before.
"""

from __future__ import annotations

from collections import OrderedDict

CHATS_REMEMBERED = 1024  # the chats whose newest message is known, most recent first


class ChatPositions:
    """The newest message id seen per chat (received or sent), for the most recent chats."""

    def __init__(self) -> None:
        self._newest: OrderedDict[str, int] = OrderedDict()

    def saw(self, chat_id: int | str, message_id: int) -> None:
        """``message_id`` exists in ``chat_id`` (received, or sent by the bot)."""
        key = str(chat_id)
        self._newest[key] = max(message_id, self._newest.get(key, 0))
        self._newest.move_to_end(key)
        while len(self._newest) > CHATS_REMEMBERED:
            self._newest.popitem(last=False)

    def behind(self, chat_id: int | str, message_id: int) -> bool:
        """True when newer messages than ``message_id`` are known in ``chat_id``."""
        return message_id < self._newest.get(str(chat_id), 0)
