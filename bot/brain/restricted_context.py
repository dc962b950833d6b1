"""The messages of a restricted reply (a known party's, :mod:`bot.brain.restricted_reply`).

A party has no working context of the owner's kind (no summary, no session start): its
own recent messages, as many as fit a token budget, then the message being answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bot.brain.tokens import cut_to_tokens, estimate_tokens

if TYPE_CHECKING:
    from bot.brain.base import HistoryTurn

# What the model reads for a message without text: the API refuses empty or blank text
# with a 400 (a contact's blank mail: empty subject, empty body).
EMPTY_MESSAGE = "(a message without text)"


def _said(content: str) -> str:
    return content if content.strip() else EMPTY_MESSAGE


def restricted_messages(
    history: Sequence[HistoryTurn], text: str, budget: int
) -> list[dict[str, Any]]:
    """The messages of a restricted reply: the party's ``text`` (cut to ``budget``
    tokens) after as much of its own ``history`` as still fits, oldest dropped first,
    starting with a user turn, consecutive turns of one role merged (the API wants them
    alternating). Blank messages become :data:`EMPTY_MESSAGE`."""
    history = list(history)
    if history and history[-1].role == "user" and history[-1].content == text:
        history.pop()  # the message itself, already stored as the latest turn
    if estimate_tokens(text) > budget:
        text = cut_to_tokens(text, budget) + " [...truncated]"
    used = estimate_tokens(text)
    kept: list[dict[str, Any]] = []
    for item in reversed(history):
        used += estimate_tokens(item.content) + 4
        if used > budget:
            break
        kept.insert(0, {"role": item.role, "content": _said(item.content)})
    while kept and kept[0]["role"] != "user":
        kept.pop(0)
    merged: list[dict[str, Any]] = []
    for message in [*kept, {"role": "user", "content": _said(text)}]:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"] += "\n\n" + message["content"]
        else:
            merged.append(dict(message))
    return merged
