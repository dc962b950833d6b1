"""The part of a group's recent history a member's restricted reply reads.

A member's reply in a group is given the group's last :data:`WINDOW_TURNS` turns, but
only those said while the member was there: from their latest arrival on, as the
transcript has them in the order written (a join or leave notice is shown among them,
not counted as one, and at most :data:`WINDOW_TURNS` of them: :func:`window_lines`).
Telegram hides a group's earlier history from new members in many groups, and before
session 29 a newcomer's first question was answered with the 20 turns before it, the
owner's among them: "what were they talking about before I came?" read them out. The
member is known by the account id their turns record (``senderId``, the router's, never
the display name).

Their arrival is the latest of: their join, when the channel saw it (a turn of theirs
whose metadata says :data:`MEMBERSHIP` ``joined``: Telegram's ``new_chat_members``,
channels/telegram/membership.py), else their first message since they last left (a
``left`` turn) or ever. Before session 30 it was their first message ever: a member
who left and came back read what was said while they were away. A join Telegram did not
announce (a large group may hide them) counts from their first message after it; a
member who only read for a month reads from when they joined, or first wrote. A turn
recorded before ``senderId`` was (before session 29) is nobody's: such a member reads
from their first message since. The owner's own replies there read the whole
conversation as before (:mod:`bot.brain.context`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from bot.brain.base import HistoryTurn
from bot.brain.restricted_group import group_history, member_message
from bot.transcript_lines import MEMBERSHIP, Line, membership_notice, recallable
from bot.transcript_seek import LineReader

WINDOW_TURNS = 20  # the group's turns before the message a member's reply reads at most
# (conversation, member) pairs whose arrival is remembered, with how far the transcript
# was read for it: each costs one scan of the transcript, then of what was added since.
ARRIVALS_KEPT = 4096


def turns_between(path: Path, first: int, last: int) -> list[Line]:
    """The turn lines numbered ``first`` to ``last`` of the transcript at ``path`` (no
    readouts; join and leave notices kept), in the order written, read from the first
    of them on (:mod:`bot.transcript_seek`): a member's reply in a group of 20,000 turns
    read and parsed the whole file for 20."""
    try:
        reader = LineReader(path)
    except FileNotFoundError:
        return []
    out = []
    with reader:
        for _, _, raw in reader.forward(reader.turn_offset(first)):
            line = reader.parse(raw)
            if line is None or line.get("type") != "turn":
                continue
            if not (recallable(line) or membership_notice(line)):
                continue
            if first <= _number(line) <= last:
                out.append(line)
    return out


def window_lines(path: Path, turn: int) -> list[Line]:
    """The lines a reply to turn ``turn`` of the group whose transcript is at ``path``
    reads from: those of the :data:`WINDOW_TURNS` turns said before it (the module
    docstring's notices not counted: before session 31 a wave of joins took the room
    of what was said), with the notices among them, and the turn's own."""
    span = WINDOW_TURNS
    while True:
        first = max(1, turn - span)
        lines = turns_between(path, first, turn)
        said = sorted({_number(ln) for ln in lines if not membership_notice(ln)} - {turn})
        if len(said) >= WINDOW_TURNS or first == 1:
            break
        span *= 2  # notices took some of the numbers: read further back
    if len(said) >= WINDOW_TURNS:
        first = said[-WINDOW_TURNS]  # (notices before it are before the window)
    return [ln for ln in lines if _number(ln) >= first]


def answered_line(path: Path, turn: int) -> Line | None:
    """The user line of turn ``turn`` (the member's message a reply answers) of the
    transcript at ``path``, read from its offset on; None when it is not there."""
    lines = turns_between(path, turn, turn)
    return next((ln for ln in lines if ln.get("role") == "user" and _number(ln) == turn), None)


def fewer_notices(lines: Sequence[Line]) -> list[Line]:
    """``lines`` with their latest :data:`WINDOW_TURNS` join and leave notices only: a
    hundred people added at once would otherwise fill the reply's token budget, and
    what was said is dropped from it first."""
    notices = [i for i, line in enumerate(lines) if membership_notice(line)]
    dropped = set(notices[:-WINDOW_TURNS])
    return [line for i, line in enumerate(lines) if i not in dropped]


def _number(line: Line) -> int:
    return int(line.get("turnNumber") or 0)


def arrival(
    path: Path, member: str, until: int, after: int = 0, start: int | None = None
) -> int | None:
    """The turn number ``member`` (by ``senderId``) arrived at in the group whose
    transcript is at ``path`` (module docstring), as of turn ``until``, or None when
    they are not there then: reading the turns numbered above ``after`` only, with
    ``start`` their arrival as of turn ``after`` (the transcript only grows: a later
    read goes on from there)."""
    try:
        reader = LineReader(path)
    except FileNotFoundError:
        return start
    needle = member.encode()
    with reader:
        for _, _, raw in reader.forward(reader.turn_offset(after + 1) if after else 0):
            if b"senderId" not in raw or needle not in raw:  # most lines: no parsing
                continue
            line = reader.parse(raw)
            if line is None or not _said_by(line, member):
                continue
            change = (line.get("metadata") or {}).get(MEMBERSHIP)
            number = int(line.get("turnNumber") or 0)
            if number > until:
                continue
            if change == "left":
                start = None  # what is said from now on is said while they are away
            elif change == "joined" or start is None:
                start = number
    return start


def since_arrival(lines: Sequence[Line], member: str, first: int) -> list[Line]:
    """The ``lines`` (a window, in the order written) from the member's arrival, turn
    ``first`` (their join or a message), on; all of them when it is before the window."""
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
    """The group history each member's reply reads, with each member's arrival per
    conversation remembered, and how far the transcript was read for it (a transcript
    only grows: the next reply reads on from there)."""

    def __init__(self, capacity: int = ARRIVALS_KEPT) -> None:
        # (conversation, member) -> (their arrival, the turn it was read through)
        self._arrivals: OrderedDict[tuple[str, str], tuple[int | None, int]] = OrderedDict()
        self.capacity = capacity

    async def history(self, conv_id: str, path: Path, turn: int) -> tuple[HistoryTurn, ...]:
        """The group's lines before turn ``turn`` (a member's message) that its sender
        was there for, labelled as :func:`~bot.brain.restricted_group.group_history`
        labels them."""
        lines = await asyncio.to_thread(window_lines, path, turn)
        member = next((str(ln["senderId"]) for ln in lines if _answered(ln, turn)), None)
        if member is None:
            return ()  # recorded before turns said whose they are: nothing is vouched for
        first = await self._arrival(conv_id, path, member, turn)
        if first is None:
            return ()
        seen = fewer_notices(since_arrival(lines, member, first))
        return group_history(ln for ln in seen if _number(ln) < turn)

    async def message(self, path: Path, turn: int, text: str) -> str:
        """The member's message of turn ``turn``, ``text``, as their reply reads it
        (:func:`~bot.brain.restricted_group.member_message`: labelled when it came late,
        as its transcript line says)."""
        line = await asyncio.to_thread(answered_line, path, turn)
        return member_message(line, text)

    async def _arrival(self, conv_id: str, path: Path, member: str, turn: int) -> int | None:
        key = (conv_id, member)
        start, through = self._arrivals.get(key, (None, 0))
        if through > turn:  # a reply to an older message (resumed): read afresh
            start, through = None, 0
        if through < turn:
            start = await asyncio.to_thread(arrival, path, member, turn, through, start)
            through = turn
        self._arrivals[key] = (start, through)
        self._arrivals.move_to_end(key)
        while len(self._arrivals) > self.capacity:
            self._arrivals.popitem(last=False)
        return start
