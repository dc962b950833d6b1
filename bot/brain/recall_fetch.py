"""``fetch_context``: turns of one past conversation, as the recall tools give them.

The model names a conversation (an id from ``search_conversations``) and a turnRange; it
gets those turns, each cut at :data:`FETCH_MAX_CHARS_PER_TURN` characters (at
:data:`FETCH_MAX_CHARS_ALONE` when one turn is fetched alone, from its ``fromChar``th
character on, and to what is left of the reply's recall budget), timed in the owner's
zone, a group's lines marked by whose they are as in the working context, and a note
whenever the page is not what was asked for (cut to :data:`FETCH_MAX_TURNS`, past the
end, over the reply's recall budget). A message cut short says how many characters are
left and how to read them. Bad input raises :class:`ToolError`
(bot.brain.tool_calls.execute turns it into an error result).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from bot.brain.context import group_line
from bot.brain.tool_budget import ToolError, fit_turns
from bot.brain.tool_calls import int_input, maybe_await, wrap_data
from bot.forwards import forwarded_text
from bot.graphemes import boundary_before, cut
from bot.labels import name_for_model
from bot.owner_days import local_time

FETCH_DEFAULT_TURNS = 10
FETCH_MAX_TURNS = 40
FETCH_MAX_CHARS_PER_TURN = 4000
# A message fetched alone (turnRange of one turn): a long paste, a forwarded mail. Cut at
# 4,000 characters with no way to read on, its end was out of the model's reach for good.
FETCH_MAX_CHARS_ALONE = 40_000
# A turn fetched alone over what is left of the recall budget is cut to it (its note says
# where to read on), down to this many characters; below it the budget is used up.
FETCH_MIN_CHARS_ALONE = 500

FETCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "conversationId": {"type": "string", "description": "From search_conversations."},
        "turnRange": {
            "type": "object",
            "properties": {"from": {"type": "integer"}, "to": {"type": "integer"}},
            "description": f"Inclusive turn numbers; default the last {FETCH_DEFAULT_TURNS}. "
            f"Messages are cut at {FETCH_MAX_CHARS_PER_TURN} characters, at "
            f"{FETCH_MAX_CHARS_ALONE} when one turn is fetched alone (from = to).",
        },
        "fromChar": {
            "type": "integer",
            "minimum": 0,
            "description": "Only with one turn (turnRange from = to): read its messages "
            "from this character on (default 0). A message cut short says the fromChar "
            "that reads on.",
        },
    },
    "required": ["conversationId"],
}


async def fetch_turns(
    services: Any, timezone: str, args: dict[str, Any], max_tokens: int | None = None
) -> str:
    """The turns ``args`` asks for, wrapped; at most ``max_tokens`` tokens, estimated
    (the later turns left out, with a note saying which). ``services.conversations``:
    the ``ConversationManager`` (``get``, ``read_lines``); ``timezone``: the owner's."""
    conv_id = args.get("conversationId")
    if not isinstance(conv_id, str) or not conv_id:
        raise ToolError("conversationId must be a conversation id from search_conversations")
    conversations = services.conversations
    try:
        record = await maybe_await(conversations.get(conv_id))
    except ValueError as exc:
        raise ToolError(f"not a conversation id: {conv_id!r}") from exc
    if record is None:
        raise ToolError(f"no conversation {conv_id!r}")
    span = args.get("turnRange") or {}
    if not isinstance(span, dict):
        raise ToolError("turnRange must be an object with from/to")
    lines = await asyncio.to_thread(conversations.read_lines, conv_id)
    turns = [
        ln for ln in lines if ln.get("type") == "turn" and ln.get("role") in ("user", "assistant")
    ]
    total = max((int(t.get("turnNumber", 0)) for t in turns), default=0)
    first, last = (
        int_input(span.get("from"), "turnRange.from"),
        int_input(span.get("to"), "turnRange.to"),
    )
    if total == 0:
        # /new before any message, or a transcript deleted under the index: the default
        # range came out as 1-0 and the model was told its turnRange was reversed
        return _fetched(record, conv_id, [], 0, "this conversation has no turns to fetch")
    if first is None and last is None:
        first, last = max(1, total - FETCH_DEFAULT_TURNS + 1), total
    first = max(1, first if first is not None else (last or total) - FETCH_DEFAULT_TURNS + 1)
    last = last if last is not None else first + FETCH_DEFAULT_TURNS - 1
    if last < first:
        raise ToolError("turnRange.to is before turnRange.from")
    from_char = int_input(args.get("fromChar"), "fromChar") or 0
    if from_char < 0:
        raise ToolError("fromChar must be 0 or more")
    if from_char and first != last:
        raise ToolError("fromChar reads one turn: give turnRange with from = to")
    note = None
    if first <= total:
        # past the last turn is nothing to fetch: "range cut ...; fetch more" came with
        # every turn of a 5-turn conversation asked as 1-100 (before session 40)
        last = min(last, total)
    if last - first + 1 > FETCH_MAX_TURNS:
        last = first + FETCH_MAX_TURNS - 1
        note = f"range cut to {FETCH_MAX_TURNS} turns ({first}-{last}); fetch more separately"
    if first > total:
        # an empty page read as "nothing was said there"; say where the turns end
        note = (
            f"the conversation has {total} turns: turns {first}-{last} do not exist "
            f"(its last turns are {max(1, total - FETCH_DEFAULT_TURNS + 1)}-{total})"
        )
    zone = ZoneInfo(timezone)
    alone = first == last
    limit = FETCH_MAX_CHARS_ALONE if alone else FETCH_MAX_CHARS_PER_TURN
    page = [t for t in turns if first <= int(t.get("turnNumber", 0)) <= last]
    out = [_turn_view(t, zone, limit, alone, from_char) for t in page]
    if max_tokens is not None:
        room = max_tokens - 250  # the envelope and the note
        # One turn over what is left of the budget: its messages cut shorter, each note
        # saying where to read on (refused whole, a long paste could not be read at all
        # once an earlier result had taken part of the budget).
        while alone and limit > FETCH_MIN_CHARS_ALONE and fit_turns(out, room)[1] is not None:
            limit = max(FETCH_MIN_CHARS_ALONE, limit * 3 // 4)
            out = [_turn_view(t, zone, limit, alone, from_char) for t in page]
        out, cut = fit_turns(out, room)
        if cut is not None and not out:
            raise ToolError("this reply's recall budget is used up; answer with what you have")
        if cut is not None:
            note = (
                f"turns {cut}-{last} left out: this reply's recall budget is nearly used "
                "up; fetch them in a later reply, or answer with what is here"
            )
    return _fetched(record, conv_id, out, total, note)


def _from(start: int, size: int) -> str:
    """The mark of a message read from character ``start`` on ('' from its start)."""
    return f"[from character {start} of {size}] " if start else ""


def _fetched(
    record: Any, conv_id: str, turns: list[dict[str, Any]], total: int, note: str | None
) -> str:
    """The wrapped ``fetch_context`` result (seed 000's fields, and ``note`` when set)."""
    payload: dict[str, Any] = {
        "conversationId": conv_id,
        # an escalation's automatic title names strangers by their own chosen names; an
        # unnamed mail thread is named by its sender and subject (session 41: null)
        "conversationName": name_for_model(record),
        "channel": getattr(record, "channel", None),
        "turns": turns,
        "totalTurns": total,
    }
    if note:
        payload["note"] = note
    return wrap_data("fetch_context", payload)


def _turn_view(
    line: Mapping[str, Any], zone: ZoneInfo, limit: int, alone: bool = False, from_char: int = 0
) -> dict[str, Any]:
    """One message of a page: cut at ``limit`` characters (from ``from_char`` on, when
    its turn is fetched ``alone``), with a note saying how to read the rest."""
    content = str(line.get("content", ""))
    number = line.get("turnNumber")
    size = len(content)
    start = boundary_before(content, from_char)  # never from half an emoji
    if from_char and start >= size:
        content = f"[nothing from character {from_char} on: this message has {size} characters]"
    elif len(content) - start > limit:
        kept = cut(content[start:], limit)  # on a character's end: never half an emoji
        rest = size - start - len(kept)
        # Fetched alone, the note named no way on before session 40: past 40,000
        # characters a long paste was out of reach for good.
        how = (
            f"; read on with fromChar {start + len(kept)} (turnRange from {number} to {number})"
            if alone
            else f"; fetch turn {number} alone (turnRange from {number} to {number}) to "
            f"read up to {FETCH_MAX_CHARS_ALONE} characters, then on with fromChar"
        )
        content = f"{_from(start, size)}{kept} [...truncated: {rest} more characters{how}]"
    else:
        content = _from(start, size) + content[start:]
    # A group's lines marked as in the working context: a member's words bare read as
    # the owner's own (a member could put words in the owner's mouth for later), and
    # the owner's unmarked read as a member's beside the members' labelled ones.
    content = group_line(line, content)
    stamp = line.get("timestamp")
    view = {
        "role": line.get("role"),
        "content": content,
        # the owner's local time, like search's dates and the prompt's "now": the UTC
        # stamp put an evening turn in New York on the next day
        "timestamp": local_time(stamp, zone) if isinstance(stamp, str) else stamp,
        "turnNumber": number,
    }
    if (forwarded := forwarded_text(line)) is not None and not from_char:
        # a mail the owner forwarded, apart from their words as in the working context
        # (bot/forwards.py, session 41): not in the content any more
        view["forwardedByOwner"] = cut(forwarded, limit) + (
            " [...truncated]" if len(forwarded) > limit else ""
        )
    return view
