"""The part of a group's recent history a member's restricted reply reads.

A member's reply in a group is given the group's last :data:`WINDOW_TURNS` turns, but
only those said while the member was there: from their own first message in the group
on, as the transcript has them in the order written. Telegram hides a group's earlier
history from new members in many groups, and before session 29 a newcomer's first
question was answered with the 20 turns before it, the owner's among them: "what were
they talking about before I came?" read them out. The member is known by the account
id their turns record (``senderId``, the router's, never the display name); a join
itself is a service message no channel records, so their first message is the earliest
the data can vouch for (a member who only read for a month reads from when they first
wrote). A turn recorded before ``senderId`` was (before session 29) is nobody's: such
a member reads from their first message since. The owner's own replies there read the
whole conversation as before (:mod:`bot.brain.context`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from bot.brain.base import HistoryTurn
from bot.brain.restricted_group import group_history
from bot.transcript_lines import Line, recallable
from bot.transcript_seek import LineReader

WINDOW_TURNS = 20  # the group's turns before the message a member's reply reads at most
# (conversation, member) pairs whose first message is remembered: each costs a scan of
# the transcript to find, once.
FIRST_MESSAGES_KEPT = 4096


def turns_between(path: Path, first: int, last: int) -> list[Line]:
    """The turn lines numbered ``first`` to ``last`` of the transcript at ``path`` (no
    readouts), in the order written, read from the first of them on
    (:mod:`bot.transcript_seek`): a member's reply in a group of 20,000 turns read and
    parsed the whole file for 20."""
    try:
        reader = LineReader(path)
    except FileNotFoundError:
        return []
    out = []
    with reader:
        for _, _, raw in reader.forward(reader.turn_offset(first)):
            line = reader.parse(raw)
            if line is None or line.get("type") != "turn" or not recallable(line):
                continue
            if first <= int(line.get("turnNumber") or 0) <= last:
                out.append(line)
    return out


def first_message(path: Path, member: str) -> int | None:
    """The turn number of ``member``'s first message (by ``senderId``) in the
    transcript at ``path``, or None when it has none."""
    try:
        reader = LineReader(path)
    except FileNotFoundError:
        return None
    needle = member.encode()
    with reader:
        for _, _, raw in reader.forward(0):
            if b"senderId" not in raw or needle not in raw:  # most lines: no parsing
                continue
            line = reader.parse(raw)
            if line is not None and _said_by(line, member):
                return int(line.get("turnNumber") or 0)
    return None


def since_first(lines: Sequence[Line], member: str, first: int) -> list[Line]:
    """The ``lines`` (a window, in the order written) from the member's first message,
    turn ``first``, on; all of them when that message is before the window."""
    for i, line in enumerate(lines):
        if _said_by(line, member) and line.get("turnNumber") == first:
            return list(lines[i:])
    if lines and first < min(int(line.get("turnNumber") or 0) for line in lines):
        return list(lines)
    return []  # not in the window and not before it: nothing they were there for


def _answered(line: Line, turn: int) -> bool:
    """Whether ``line`` is the message of turn ``turn``, with its sender's account."""
    return (
        line.get("turnNumber") == turn and line.get("role") == "user" and bool(line.get("senderId"))
    )


def _said_by(line: Line, member: str) -> bool:
    return (
        line.get("type") == "turn" and line.get("role") == "user" and line.get("senderId") == member
    )


class MemberWindows:
    """The group history each member's reply reads, with each member's first message
    per conversation remembered (a transcript only grows: it never changes)."""

    def __init__(self, capacity: int = FIRST_MESSAGES_KEPT) -> None:
        self._first: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.capacity = capacity

    async def history(self, conv_id: str, path: Path, turn: int) -> tuple[HistoryTurn, ...]:
        """The group's lines before turn ``turn`` (a member's message) that its sender
        was there for, labelled as :func:`~bot.brain.restricted_group.group_history`
        labels them."""
        lines = await asyncio.to_thread(turns_between, path, max(1, turn - WINDOW_TURNS), turn)
        member = next((str(ln["senderId"]) for ln in lines if _answered(ln, turn)), None)
        if member is None:
            return ()  # recorded before turns said whose they are: nothing is vouched for
        first = await self._first_message(conv_id, path, member)
        if first is None:
            return ()
        seen = since_first(lines, member, first)
        return group_history(ln for ln in seen if int(ln.get("turnNumber") or 0) < turn)

    async def _first_message(self, conv_id: str, path: Path, member: str) -> int | None:
        key = (conv_id, member)
        first = self._first.get(key)
        if first is None:
            first = await asyncio.to_thread(first_message, path, member)
            if first is None:
                return None
            self._first[key] = first
        self._first.move_to_end(key)
        while len(self._first) > self.capacity:
            self._first.popitem(last=False)
        return first
