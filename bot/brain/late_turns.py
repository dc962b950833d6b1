"""A message written well before it came, labelled so for the model.

Telegram keeps a bot's updates for a day: after an outage (the daemon down, the network
gone) the owner's messages come hours after they were written. A mail may too (its
Date is the sender's: a phone that sent its outbox late). The turn is recorded when it
comes (its ``timestamp``; :data:`bot.events.SENT_AT` says why) and keeps when it was
written in its metadata (``sentAt``); a user turn written more than :data:`LATE_AFTER`
before it came is shown to the model after a label saying when, in the owner's time
zone: ``[Written Saturday 28 November 2026, 04:46 (Europe/Berlin); it reached you 20 h
later.]``. Before session 40 nothing said so, and "remind me in 10 minutes to call mum",
written at dawn and read at midnight, was answered as if just said.

Built from the transcript alone (no clock): every reply shows the same label, as the
prompt cache needs (bot/brain/prompt_cache.py). A known contact's late message gets the
same label (:func:`late_note`), in UTC, from their file's ``sentAt`` as the index keeps
it (bot/party_context.py, session 42), and so does every late line of a group a member's
restricted reply reads, the member's message answered too (bot/brain/restricted_group.py,
session 42): :data:`RESTRICTED_ZONE`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bot.brain.restricted_context import EMPTY_MESSAGE
from bot.events import SENT_AT
from bot.moments import parse_moment

# Later than this is worth saying: mail polling and Telegram's own delays stay under it,
# and "in ten minutes" is already off by half.
LATE_AFTER = timedelta(minutes=5)
# The zone of a restricted reply's labels: the restricted prompt gives the time in UTC on
# purpose (bot.brain.prompt.restricted_system_prompt), the owner's zone says where they live.
RESTRICTED_ZONE = ZoneInfo("UTC")


def delay_text(delay: timedelta) -> str:
    """``delay`` in words a person would use: ``"35 min"``, ``"20 h"``, ``"3 days"``."""
    minutes = round(delay.total_seconds() / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours = round(minutes / 60)
    if hours < 48:
        return f"{hours} h"
    return f"{round(hours / 24)} days"


def late_label(line: Mapping[str, Any], zone: ZoneInfo) -> str | None:
    """The label of a user turn ``line`` written more than :data:`LATE_AFTER` before it
    was recorded, else None (no ``sentAt``, on time, or a sender's clock ahead)."""
    if line.get("role") != "user":
        return None
    meta = line.get("metadata")
    return late_note(
        meta.get(SENT_AT) if isinstance(meta, Mapping) else None, line.get("timestamp"), zone
    )


def late_note(written: object, arrived: object, zone: ZoneInfo) -> str | None:
    """The label of a message ``written`` (its ``sentAt``) more than :data:`LATE_AFTER`
    before it ``arrived`` (its recorded ``timestamp``), both ISO 8601, else None. Also
    a third party's message, from their file or the index (bot/party_context.py)."""
    sent, came = parse_moment(written), parse_moment(arrived)
    if sent is None or came is None or came - sent <= LATE_AFTER:
        return None
    try:
        local = sent.astimezone(zone)
    except (OverflowError, ValueError):  # a Date at the calendar's edge
        return None
    when = f"{local:%A} {local.day} {local:%B %Y, %H:%M} ({zone.key})"
    return f"[Written {when}; it reached you {delay_text(came - sent)} later.]"


def with_late_note(note: str | None, text: str) -> str:
    """``text`` after ``note`` (a :func:`late_note` or :func:`late_label`), as the model
    reads it; as it is without one. A blank message keeps its :data:`EMPTY_MESSAGE`
    after the label: the label alone read as the words (session 42: "echo: [Written
    …]" answered a contact's blank mail written long before)."""
    if note is None:
        return text
    return f"{note} {text if text.strip() else EMPTY_MESSAGE}"
