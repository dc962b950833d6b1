"""Prompt caching of the owner's replies: ``cache_control`` breakpoints on a request.

The Messages API caches the prefix of a request (tools, then system, then messages) up to
each block marked ``cache_control: {"type": "ephemeral"}``, for five minutes; a later
request with the same prefix reads it at a tenth of the input price (writing it costs a
quarter more, bot.brain.cost). Without breakpoints every tool round of a reply, and every
next message, paid the whole system prompt and history again at full price.

:func:`with_breakpoints` marks at most three blocks (the API allows four):

1. the system prompt's last block: the tools and system prompt, which change only with
   the persona, the summary or the title;
2. the end of the conversation: the last block of the newest owner message (``anchor``),
   the same in every tool round of a reply, and where the next message's history ends;
3. the last block of the request (the newest tool results), so the next tool round reads
   everything before its own new blocks.

The API looks for an earlier cache entry up to 20 blocks before each breakpoint, so a
breakpoint that moves forward still finds the entry the previous request wrote.
Breakpoints go only on blocks that take one: never on a thinking block, nor an empty text
block (the API refuses both with a 400).

The date and time change every minute, so with caching on they are not in the system
prompt (which would change the prefix of every request) but in a note after the owner's
newest message (:func:`add_clock_note`), a block no breakpoint goes on: the next message's
request has the same prefix up to the end of this one.
"""

from __future__ import annotations

from typing import Any

EPHEMERAL = {"type": "ephemeral"}
# Blocks the API accepts cache_control on (thinking and redacted_thinking take none).
CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})
MAX_BREAKPOINTS = 4
CLOCK_NOTE = "(Current date and time: {now}.)"
CLOCK_START = CLOCK_NOTE.split("{")[0]


def add_clock_note(messages: list[dict[str, Any]], now: str) -> None:
    """Append the clock note (``now``, formatted) to the last message, a user message,
    as a block of its own after its text."""
    if not messages or messages[-1].get("role") != "user":
        return
    content = messages[-1]["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks.append({"type": "text", "text": CLOCK_NOTE.format(now=now)})
    messages[-1] = {**messages[-1], "content": blocks}


def _clock_note(block: dict[str, Any], position: int) -> bool:
    """Whether ``block`` (at ``position`` in its message) is a clock note: never the
    first block, which is the owner's own text."""
    return position > 0 and str(block.get("text", "")).startswith(CLOCK_START)


def with_breakpoints(
    params: dict[str, Any], anchor: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``params`` with cache breakpoints (a copy: the messages list, which the tool loop
    keeps appending to, is left unmarked). ``anchor`` is the newest owner message (an
    element of ``params["messages"]``), or None to mark only the last one."""
    out = dict(params)
    marked = 0
    system = params.get("system")
    if isinstance(system, str) and system.strip():
        out["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
        marked = 1
    messages = list(params.get("messages", []))
    # the anchor first, then the last message: the same message when there is no tool round
    wanted = [i for i, m in enumerate(messages) if m is anchor] + [len(messages) - 1]
    for index in dict.fromkeys(wanted):
        if index < 0 or marked >= MAX_BREAKPOINTS:
            continue
        message = _marked(messages[index])
        if message is not None:
            messages[index] = message
            marked += 1
    out["messages"] = messages
    return out


def _marked(message: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of ``message`` with a breakpoint on its last block that takes one, or None
    when none does."""
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    blocks = list(content or [])
    for n in range(len(blocks) - 1, -1, -1):
        block = blocks[n]
        if block.get("type") not in CACHEABLE or _clock_note(block, n):
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue
        blocks[n] = {**block, "cache_control": EPHEMERAL}
        return {**message, "content": blocks}
    return None


def breakpoints(body: dict[str, Any]) -> int:
    """How many ``cache_control`` breakpoints a request body carries (tests, the fake)."""
    count = 0
    for tool in body.get("tools") or []:
        count += "cache_control" in tool
    system = body.get("system")
    if isinstance(system, list):
        count += sum("cache_control" in b for b in system)
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            count += sum("cache_control" in b for b in content)
    return count


__all__ = [
    "CACHEABLE",
    "CLOCK_NOTE",
    "CLOCK_START",
    "EPHEMERAL",
    "MAX_BREAKPOINTS",
    "add_clock_note",
    "breakpoints",
    "with_breakpoints",
]
