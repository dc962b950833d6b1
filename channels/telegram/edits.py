"""What a message said before it was edited.

Telegram's ``edited_message`` carries the new text only. Before, an edit was recorded as
``[edited] new text`` and neither the owner reading the transcript nor the model could
tell what had changed ("meet at 6": instead of what?). The channel now remembers what
the recent messages it recorded said (in memory, the newest :data:`REMEMBERED`), and an
edit of one of them is recorded with its previous text: in the turn's metadata
(``previous_text``, in full) and in its words, ``[edited, before: "meet at 5"] meet at 6``
(cut at :data:`SHOWN_MAX` characters). An edit of a message older than that, or received
before a restart, is recorded as before, without it. An edit of one of them that
changes no word (only its formatting: a word made bold) is no new message and is
skipped (:meth:`EditHistory.unchanged`); before session 27 it was recorded as
``[edited] <the same words>`` and answered a second time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from bot.events import InboundMessage
from bot.graphemes import cut
from channels.telegram.media import in_placeholder

EDITED = "[edited] "  # what channels/telegram/translate.py puts before an edit's words
REMEMBERED = 512  # messages whose last words are kept (an edit usually comes soon after)
PENDING_MAX = 64  # messages translated, not yet recorded
SHOWN_MAX = 200  # characters of the previous text shown in the edit's words


class EditHistory:
    """The last words of the recent messages, by their chat and Telegram message id."""

    def __init__(self) -> None:
        self._said: OrderedDict[str, str] = OrderedDict()
        self._pending: dict[str, tuple[str, str]] = {}  # message id -> (key, words)

    def unchanged(self, msg: InboundMessage) -> bool:
        """True when ``msg`` is an edit whose words are what its message said before
        (as recorded in this run): nothing new to record or answer."""
        if not msg.metadata.get("edited"):
            return False
        key = msg.metadata.get("original_message_id")
        words = msg.text.removeprefix(EDITED)
        return isinstance(key, str) and self._said.get(key) == words

    def apply(self, msg: InboundMessage) -> InboundMessage:
        """``msg``, an edit carrying what its message said before, if known. What ``msg``
        says is remembered once it is recorded (:meth:`remember`): an update retried
        after a failed delivery must still find the text before the edit."""
        edited = bool(msg.metadata.get("edited"))
        key = msg.metadata.get("original_message_id") if edited else msg.message_id
        if not isinstance(key, str):
            return msg
        words = msg.text.removeprefix(EDITED) if edited else msg.text
        self._pending[msg.message_id] = (key, words)
        while len(self._pending) > PENDING_MAX:  # updates never recorded (kept unreadable)
            del self._pending[next(iter(self._pending))]
        previous = self._said.get(key) if edited else None
        if previous is None or previous == words:
            return msg
        metadata = {**msg.metadata, "previous_text": previous}
        text = msg.text
        if text.startswith(EDITED):  # not a message edited into a command: run as typed
            # on one line, its brackets round: the placeholder ends at its first "]"
            shown = in_placeholder(previous)
            shown = shown if len(shown) <= SHOWN_MAX else cut(shown, SHOWN_MAX) + "…"
            text = f'[edited, before: "{shown}"] {words}'
        return replace(msg, text=text, metadata=metadata)

    def remember(self, msg: InboundMessage) -> None:
        """``msg`` (as :meth:`apply` returned it) was recorded: its words are now what
        its message says."""
        pending = self._pending.pop(msg.message_id, None)
        if pending is None:
            return
        key, words = pending
        self._said[key] = words
        self._said.move_to_end(key)
        while len(self._said) > REMEMBERED:
            self._said.popitem(last=False)
