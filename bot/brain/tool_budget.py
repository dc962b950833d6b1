"""The budget of recall results in one reply (bot.brain.tools).

Every round of the tool loop sends all the results of the rounds before it again, so what
the recall tools return over one reply must stay well inside the model's context window:
:class:`ResultBudget` counts it (in estimated tokens), :func:`fit_turns` cuts a
``fetch_context`` page to what is left, at a whole turn.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bot.brain.tokens import estimate_tokens

log = logging.getLogger("my_agent.brain.tools")

# What the recall results of one reply may add up to, in estimated tokens
# (bot.brain.tokens.estimate_tokens). A fetch_context page is up to 40 turns of a user
# and an assistant message of 4,000 characters (~80,000 tokens of English): three of them
# overflowed the model's 200,000-token context window and the API refused the whole reply
# ("prompt is too long"). Counted in characters (192,000), the budget held 48,000 tokens
# of English but 192,000 of Chinese, a token a character: two pages filled the window.
TOOL_RESULTS_MAX_TOKENS = 48_000


class ToolError(Exception):
    """Bad tool input or an expected failure; the message goes back to the model."""


class ResultBudget:
    """The tokens of recall results one reply may still send to the model."""

    def __init__(self, tokens: int = TOOL_RESULTS_MAX_TOKENS) -> None:
        self.left = tokens

    def take(self, name: str, content: str) -> str:
        """``content``, counted, if it fits in what is left; else a ToolError saying how
        much is left (the model can ask for less or answer with what it has)."""
        size = estimate_tokens(content)
        if size > self.left:
            log.warning("%s: result of ~%d tokens over the budget (%d left)", name, size, self.left)
            raise ToolError(
                f"this result (about {size} tokens) is more than what is left of this "
                f"reply's recall budget (about {self.left} tokens). Ask for less (a narrower "
                "turnRange, a smaller limit) or answer with what you have."
            )
        self.left -= size
        return content


def fit_turns(turns: list[dict[str, Any]], tokens: int) -> tuple[list[dict[str, Any]], int | None]:
    """The leading whole turns (a turn number's messages together) of ``turns`` whose
    wrapped JSON fits in ``tokens`` (estimated), and the first turn number left out (None:
    all fit)."""
    used = 0
    for i, turn in enumerate(turns):
        text = json.dumps(turn, ensure_ascii=False, indent=1)
        # as wrap_data writes it: nested two levels deeper, every "<" escaped as \u003c
        extra = 2 * (text.count("\n") + 1) + 5 * text.count("<") + 2
        used += estimate_tokens(text) + (extra + 3) // 4
        if used > tokens:
            number = turn.get("turnNumber")
            while i > 0 and turns[i - 1].get("turnNumber") == number:
                i -= 1  # never half a turn
            return turns[:i], int(number or 0)
    return turns, None


__all__ = ["TOOL_RESULTS_MAX_TOKENS", "ResultBudget", "ToolError", "fit_turns"]
