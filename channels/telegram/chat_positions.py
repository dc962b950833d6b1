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

from bot.events import OutboundMessage

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
