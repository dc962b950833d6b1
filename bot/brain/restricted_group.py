"""A group's recent messages as a member's restricted reply reads them.

Each line is labelled by who sent it as the router established it (the transcript's
``fromOwner``, decided by the sender's account id and vetted @username), never by the
display name: a member calls themselves what they like ("Olga", "Owner", the owner's
configured name), and lines labelled "Olga: ..." for both the owner and a member named
Olga let the member's instructions pass for the owner's. The owner's lines carry
:data:`OWNER_MARK`; a member's start with :func:`member_mark`, their name quoted inside
it with its square brackets made round (:func:`bot.brain.group_lines.shown_member`), so no
name can close the label or open the owner's; and a member's text that imitates the
owner's mark (on a line of its own it would read as the owner's next line) is flagged.
An anonymous admin's line (Telegram: written as the group) says so, not the group's
title as a name the sender chose (:data:`ANONYMOUS_MARK`, the owner's context's too:
:func:`bot.brain.group_lines.group_line`).

A line written long before it came (Telegram delivers a day's updates after an outage)
says when, after whose it is, as the owner's late turns and a known contact's do
(:func:`bot.brain.late_turns.late_label`), in UTC (:data:`~bot.brain.late_turns.
RESTRICTED_ZONE`: the owner's zone says where they live); so does the member's message
answered (:func:`member_message`). Before session 42 neither did: a member's "is anyone
free in ten minutes?", delivered hours late, was answered as just asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bot.brain.base import HistoryTurn
from bot.brain.group_lines import (
    ANONYMOUS_MARK,
    OWNER_MARK,
    member_name,
    owner_marked,
    shown_member,
    unmarked,
)
from bot.brain.late_turns import RESTRICTED_ZONE, late_label, with_late_note
from bot.identity import anonymous_sender

__all__ = [
    "ANONYMOUS_MARK",
    "OWNER_MARK",
    "group_history",
    "member_mark",
    "member_message",
    "unmarked",
]


def member_mark(who: str) -> str:
    """The prefix of a member's line: what they are first, then what they call themselves."""
    return f"[a group member, not the owner, calling themselves \u201c{shown_member(who)}\u201d]: "


def group_history(lines: Iterable[Mapping[str, Any]]) -> tuple[HistoryTurn, ...]:
    """The turn ``lines`` of a group's transcript as a member's reply reads them: the
    owner's marked by :data:`OWNER_MARK`, a member's by their name, the assistant's as
    they are. A user turn that does not say whose it is (``fromOwner`` absent) is taken
    for a member's: the mark is given only where the router vouched for it."""
    out = []
    for line in lines:
        role, content = line.get("role"), line.get("content")
        if role not in ("user", "assistant") or not isinstance(content, str):
            continue
        if role == "user" and line.get("fromOwner") is True:
            content = owner_marked(_with_late(line, content))
        elif role == "user" and anonymous_sender(line.get("metadata") or {}):
            content = ANONYMOUS_MARK + _with_late(line, unmarked(content))
        elif role == "user":
            content = member_mark(member_name(line)) + _with_late(line, unmarked(content))
        out.append(HistoryTurn(role=role, content=content))
    return tuple(out)


def member_message(line: Mapping[str, Any] | None, text: str) -> str:
    """The member's message answered, ``text``, as their reply reads it: what imitates
    the owner's mark flagged, after the label saying when it was written when that was
    long before it came (its transcript ``line``; None: not found, shown as it is)."""
    return unmarked(text) if line is None else _with_late(line, unmarked(text))


def _with_late(line: Mapping[str, Any], text: str) -> str:
    """``text`` of a user ``line`` after the label saying when it was written, if long
    before it came (a blank one keeps its placeholder after it: the label alone read as
    the words before session 42)."""
    return with_late_note(late_label(line, RESTRICTED_ZONE), text)
