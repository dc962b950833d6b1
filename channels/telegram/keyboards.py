"""Inline keyboards for escalations and the ForceReply prompt of the Reply button.

An :class:`~bot.events.OutboundMessage` carries ``actions`` as ``(label, command)``
pairs. On Telegram each becomes an inline button whose ``callback_data`` *is* the command,
so a press can be delivered to the core exactly like the owner typing it. Telegram caps
``callback_data`` at 64 bytes: a longer command is listed in the text instead.

The Reply button cannot carry the reply text, so pressing it sends a ForceReply prompt;
the prompt's own text names the command (``/reply p1a2b3``) and the owner's answer to
that prompt becomes ``/reply p1a2b3 <text>``. Keeping the state in the prompt itself
makes it survive a restart without any table. The Reply all button (``/replyall``, a
notice about a mail that went to others too: bot/party_answers.py, session 42) works
the same way, its prompt naming ``/replyall p1a2b3``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aiogram.types import ForceReply, InlineKeyboardButton, InlineKeyboardMarkup

CALLBACK_DATA_LIMIT = 64
BUTTONS_PER_ROW = 3

REPLY_PROMPT_PREFIX = "✍️ Write your reply to"
_REPLY_PROMPT = re.compile(r"^✍️ Write your reply to \S.* \((/(?:reply|replyall) \S+)\)")
_BARE_REPLY = re.compile(r"^/(reply|replyall)(?:@\w+)?\s+(\S+)\s*$")
# What a Reply all prompt says besides the party: whom else the words go to
_TO_ALL = "and everyone else their message went to"


def split_actions(
    actions: Sequence[tuple[str, str]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(actions that fit in a button, actions that must be listed in text)."""
    fits: list[tuple[str, str]] = []
    listed: list[tuple[str, str]] = []
    for label, command in actions:
        size = len(command.encode("utf-8"))
        (fits if 0 < size <= CALLBACK_DATA_LIMIT and label.strip() else listed).append(
            (label, command)
        )
    return fits, listed


def inline_keyboard(actions: Sequence[tuple[str, str]]) -> InlineKeyboardMarkup | None:
    """An inline keyboard with one button per action, at most three per row."""
    if not actions:
        return None
    buttons = [InlineKeyboardButton(text=label, callback_data=cmd) for label, cmd in actions]
    rows = [buttons[i : i + BUTTONS_PER_ROW] for i in range(0, len(buttons), BUTTONS_PER_ROW)]
    return InlineKeyboardMarkup(inline_keyboard=rows)


def actions_as_text(actions: Sequence[tuple[str, str]]) -> str:
    """Markdown lines listing commands that could not become buttons."""
    return "\n".join(f"• {label}: `{command}`" for label, command in actions)


def bare_reply_target(command: str) -> tuple[str, str] | None:
    """``"/reply p1a2b3"`` (no text yet) -> ``("reply", "p1a2b3")``, ``"/replyall
    p1a2b3"`` -> ``("replyall", "p1a2b3")``; anything else -> None."""
    m = _BARE_REPLY.match(command.strip())
    return (m.group(1), m.group(2)) if m else None


def reply_prompt(
    target: str, party_label: str | None = None, command: str = "reply"
) -> tuple[str, ForceReply]:
    """The prompt text and markup asking the owner for the text of ``/reply target``
    (``command``: or of ``/replyall target``, which says whom else it goes to)."""
    who = party_label or target
    if command == "replyall":
        who = f"{who} {_TO_ALL}"
    text = f"{REPLY_PROMPT_PREFIX} {who} (/{command} {target}) as an answer to this message."
    hint = "Your reply to all" if command == "replyall" else "Your reply"
    return text, ForceReply(force_reply=True, input_field_placeholder=hint)


def command_from_prompt(prompt_text: str | None) -> str | None:
    """The ``/reply <id>`` (or ``/replyall <id>``) a ForceReply prompt stands for, when
    ``prompt_text`` is one."""
    if not prompt_text:
        return None
    m = _REPLY_PROMPT.match(prompt_text)
    return m.group(1) if m else None
