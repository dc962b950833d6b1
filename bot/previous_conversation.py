"""The conversation the owner just left with ``/new``, named to the model in the fresh
one's first replies.

Seed 000: a new conversation has no context from the previous one unless it uses the
recall tools. The context stays clean; but "what were we just talking about?", asked
right after ``/new``, could not be answered before session 41: nothing in the request
named the conversation just left, and a search for those words found it only as
"probably unrelated" (no word of the question is in it), with a note telling the model
not to present it. Now ``/new`` writes a :data:`STARTED_AFTER` event into the fresh
conversation (the previous one's id: it lasts across a restart), and the owner's first
:data:`NOTE_MESSAGES` messages there, within :data:`NOTE_WINDOW` of the ``/new``, are
answered with a one-line note (:attr:`bot.brain.base.BrainRequest.notes`) naming it,
its title and when it was left, for ``fetch_context`` to read when the owner asks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bot.events import utcnow
from bot.graphemes import isolate
from bot.labels import title_for_model
from bot.owner_days import local_moment

log = logging.getLogger("my_agent.conversations")

STARTED_AFTER = "started_after"  # event: ``previousId``, the conversation /new left
NOTE_MESSAGES = 3  # the owner's first messages in the fresh conversation that get it
NOTE_WINDOW = timedelta(minutes=30)  # and only this long after the /new


def left_behind(lines: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(the previous conversation's id, when /new left it) of a transcript's
    :data:`STARTED_AFTER` event; None without one."""
    for line in lines:
        if line.get("type") == "event" and line.get("event") == STARTED_AFTER:
            previous, stamp = line.get("previousId"), line.get("timestamp")
            if isinstance(previous, str) and previous and isinstance(stamp, str):
                return previous, stamp
            return None
        if line.get("type") == "turn":
            return None  # written before any turn, or not at all
    return None


def previous_note(rec: Any, left_at: datetime, zone: ZoneInfo) -> str:
    """The note naming ``rec``, the conversation left at ``left_at``."""
    title = title_for_model(rec)
    named = f"titled \u201c{isolate(title)}\u201d" if title else "not named yet"
    when = left_at.astimezone(zone).strftime("%H:%M")
    return (
        f"The owner started this conversation with /new at {when}; the conversation "
        f"they left then is {rec.id} ({named}). Nothing of it is in this context. If "
        "the owner refers to what was just being discussed, read its last turns with "
        f"fetch_context (conversationId {rec.id}) rather than search for it."
    )


async def note_for(
    services: Any, conv_id: str, turn: int, now: datetime | None = None
) -> str | None:
    """The note for the reply to the owner's message ``turn`` of ``conv_id``, or None
    (no /new led here, past the first messages or the window, the previous conversation
    gone). Reads the transcript only for the first :data:`NOTE_MESSAGES` turns."""
    if turn > NOTE_MESSAGES:
        return None
    try:
        lines = await asyncio.to_thread(services.conversations.read_lines, conv_id)
    except OSError as exc:  # the reply goes on without it
        log.warning("cannot read %s for the conversation /new left: %s", conv_id, exc)
        return None
    found = left_behind(lines)
    if found is None:
        return None
    previous, stamp = found
    zone = ZoneInfo(services.config.owner.timezone)
    left_at = local_moment(stamp, zone)
    if left_at is None or (now or utcnow()) - left_at > NOTE_WINDOW:
        return None
    rec = await services.conversations.get(previous)
    return previous_note(rec, left_at, zone) if rec is not None else None
