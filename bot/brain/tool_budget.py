"""The budget of recall results in one reply (bot.brain.tools).

Every round of the tool loop sends all the results of the rounds before it again, so what
the recall tools return over one reply must stay well inside the model's context window:
:class:`ResultBudget` counts it, :func:`fit_turns` cuts a ``fetch_context`` page to what is
left, at a whole turn.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("my_agent.brain.tools")

# What the recall results of one reply may add up to (~48,000 tokens). A fetch_context
# page is up to 40 turns of a user and an assistant message of 4,000 characters (~80,000
# tokens): three of them overflowed the model's 200,000-token context window and the
# API refused the whole reply ("prompt is too long").
TOOL_RESULTS_MAX_CHARS = 192_000


class ToolError(Exception):
    """Bad tool input or an expected failure; the message goes back to the model."""


class ResultBudget:
    """The characters of recall results one reply may still send to the model."""

    def __init__(self, chars: int = TOOL_RESULTS_MAX_CHARS) -> None:
        self.left = chars

    def take(self, name: str, content: str) -> str:
        """``content``, counted, if it fits in what is left; else a ToolError saying how
        much is left (the model can ask for less or answer with what it has)."""
        if len(content) > self.left:
            log.warning(
                "%s: result of %d chars over the budget (%d left)", name, len(content), self.left
            )
            raise ToolError(
                f"this result ({len(content)} characters) is more than what is left of this "
                f"reply's recall budget ({self.left} characters). Ask for less (a narrower "
                "turnRange, a smaller limit) or answer with what you have."
            )
        self.left -= len(content)
        return content


def fit_turns(turns: list[dict[str, Any]], chars: int) -> tuple[list[dict[str, Any]], int | None]:
    """The leading whole turns (a turn number's messages together) of ``turns`` whose
    wrapped JSON fits in ``chars``, and the first turn number left out (None: all fit)."""
    used = 0
    for i, turn in enumerate(turns):
        text = json.dumps(turn, ensure_ascii=False, indent=1)
        # as wrap_data writes it: nested two levels deeper, every "<" escaped as \u003c
        used += len(text) + 2 * (text.count("\n") + 1) + 5 * text.count("<") + 2
        if used > chars:
            number = turn.get("turnNumber")
            while i > 0 and turns[i - 1].get("turnNumber") == number:
                i -= 1  # never half a turn
            return turns[:i], int(number or 0)
    return turns, None


__all__ = ["TOOL_RESULTS_MAX_CHARS", "ResultBudget", "ToolError", "fit_turns"]
