"""A third party's edit of a message the owner was already told of.

An untrusted party's message is escalated to the owner at most once per escalation
interval (an hour); their edit of it (Telegram) is a message like any other in their file
(``[edited, before: "..."] ...``), and within the hour it was silent: the owner kept, and
answered with /reply, the words the party had since changed ("meet me at the station at
5" became "at the airport at 6"), and so did the model given the escalation beside the
owner's next message (bot/brain/others_words.py). Before session 40.

Now such an edit gets a short notice to the owner (:func:`edit_notice`), rate-limited
apart from escalations: at most one per party per :data:`EDIT_NOTICE_SECONDS`, within
the hourly budget of all parties' escalations, which it counts toward. It is an
``escalation`` event with ``edit: true`` (its ``refs`` the message it changes): listed
among the pending ones, shown to the model after the escalation it updates, and it does
not restart the party's escalation interval (their next new message is not held for it).
An escalation keeps in ``refs`` the messages it quoted (:func:`message_key`), by which
an edit finds that the owner saw the message it changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.events import InboundMessage
from bot.moments import parse_moment

EDIT_NOTICE_SECONDS = 600
# In an escalation event of a party's file: an edit notice, not a new escalation.
EDIT_MARK = "edit"


def message_key(msg: InboundMessage) -> str:
    """The message ``msg`` is or edits (every edit of a message shares it)."""
    original = msg.metadata.get("original_message_id")
    return original if isinstance(original, str) and original else msg.message_id


def message_keys(said: Sequence[InboundMessage]) -> list[str]:
    """The messages an escalation of ``said`` quotes (:func:`message_key`, each once, in
    order): whose edits the owner hears of."""
    return list(dict.fromkeys(message_key(m) for m in said))


def edited_words(msg: InboundMessage) -> str:
    """The words of an edit ``msg`` as they now are, without the channel's label."""
    words = msg.metadata.get("new_text")
    return words if isinstance(words, str) else msg.text


def escalated(lines: Iterable[Mapping[str, Any]], key: str) -> bool:
    """Whether an escalation of a party's file ``lines`` quoted message ``key``."""
    return any(
        line.get("type") == "event"
        and line.get("event") == "escalation"
        and key in (line.get("refs") or ())
        for line in lines
    )


def edit_notice_due(lines: Sequence[Mapping[str, Any]], now: datetime) -> bool:
    """Whether the party's last edit notice (in their file ``lines``) is
    :data:`EDIT_NOTICE_SECONDS` old; a time "in the future" (the clock set back) does not
    hold the next one back (as :meth:`bot.external.ExternalStore.escalation_due`)."""
    for line in reversed(lines):
        if line.get("event") == "escalation" and line.get(EDIT_MARK):
            last = parse_moment(line.get("timestamp"))
            if last is None:
                return True
            elapsed = (now - last).total_seconds()
            return elapsed < 0 or elapsed >= EDIT_NOTICE_SECONDS
    return True


def edit_notice(sender: str, party_id: str, quoted: str, answer: str) -> str:
    """The owner's notice that ``sender`` changed an escalated message to ``quoted``
    (their words, every line after ``> ``: :func:`bot.party_escalations.quoted_words`),
    ending in how to ``answer`` them (:func:`bot.party_answers.answer_yourself`)."""
    return f"{sender} changed their message (id {party_id}) to:\n{quoted}\n{answer}"
