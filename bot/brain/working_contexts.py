"""The working contexts of the conversations: where each one's context starts (its
*session start*, kept in memory per conversation), and the hydration, growth and
compression window rules over the turns :mod:`bot.brain.context` reads (split from it,
session 40).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from zoneinfo import ZoneInfo

from bot.brain.context import (
    ContextTurn,
    WorkingContext,
    _said,
    latest_compression,
    transcript_turns,
    window_start,
)
from bot.brain.group_lines import owner_marked


class WorkingContexts:
    """Session starts per conversation and the hydration/compression window rules."""

    def __init__(
        self,
        *,
        max_turns: int,
        max_tokens: int,
        keep_tokens: int,
        max_turn_tokens: int | None = None,
        budget_tokens: int | None = None,
        capacity: int = 2048,
        zone: Callable[[], ZoneInfo] | None = None,
    ) -> None:
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.keep_tokens = keep_tokens
        # The compression budget: a hydration loads every turn after the summary when they
        # fit in it (None: seed 000's window alone, as the rule's own tests have it).
        self.budget_tokens = budget_tokens
        # One message bigger than this (a pasted log) is cut in the context: whole, it
        # could neither be sent nor compressed away, and every later reply was refused.
        self.max_turn_tokens = max_turn_tokens
        self.capacity = capacity
        # the owner's time zone, as configured now (a reload may change it): when a
        # message that came late was written (bot.brain.late_turns)
        self._zone = zone
        self._starts: OrderedDict[str, int] = OrderedDict()

    def assemble(
        self,
        conv_id: str,
        lines: Sequence[Mapping[str, Any]],
        current_text: str | None = None,
        current_turn: int | None = None,
    ) -> WorkingContext:
        """The working context for the next reply in ``conv_id``.

        ``current_text`` is the user message being answered; the router has normally
        appended it to the transcript already, otherwise it is added here. A turn over
        ``max_turn_tokens`` is cut (:meth:`ContextTurn.capped`).
        """
        through, summary = latest_compression(lines)
        turns = [t for t in transcript_turns(lines, self._owner_zone()) if t.turn_number > through]
        if current_turn is not None:
            # Messages that arrived while this reply was pending are answered next, in
            # their own turn: the model sees the exchange up to the message it answers,
            # in turn order (a user message before its reply).
            turns = sorted(
                (t for t in turns if t.turn_number <= current_turn),
                key=lambda t: (t.turn_number, t.role != "user"),
            )
        start = self._starts.get(conv_id)
        if start is None or start <= through:
            start = self._hydration_start(turns, through)
            self._remember(conv_id, start)
        kept = [t for t in turns if t.turn_number >= start]
        left_out = len({t.turn_number for t in turns if t.turn_number < start})
        if current_text is not None and not (
            kept
            and kept[-1].role == "user"
            # (the owner's in a group carries their mark; others' words beside it are
            # not part of it: bot.brain.others_words)
            and _said(kept[-1]) in (current_text, owner_marked(current_text))
        ):
            number = current_turn or ((kept[-1].turn_number + 1) if kept else through + 1)
            kept.append(ContextTurn("user", current_text, number))
        kept = [t.capped(self.max_turn_tokens, conv_id) for t in kept]
        return WorkingContext(summary, through, kept, left_out)

    def _hydration_start(self, turns: Sequence[ContextTurn], through: int) -> int:
        """The first turn in context after a start-up: right after the summary when every
        turn since fits in the compression budget (they were all in context before the
        restart). Seed 000's window alone (20 turns or 8,000 tokens) dropped the turns
        before it into no summary, until the context passed the budget again: a chatty
        conversation of short messages forgot its first 40 turns at every restart, for
        hundreds of messages (before session 40). Over the budget, the window; the brain
        summarises the turns before it at once (:attr:`WorkingContext.unsummarised`)."""
        if self.budget_tokens is not None:
            size = 0
            for turn in turns:
                size += turn.capped(self.max_turn_tokens).tokens
                if size > self.budget_tokens:
                    break
            else:
                return through + 1
        return window_start(turns, self.max_turns, self.max_tokens)

    def plan(
        self, ctx: WorkingContext, keep_tokens: int | None = None
    ) -> tuple[list[ContextTurn], list[ContextTurn]]:
        """Split ``ctx.turns`` into (to compress, to keep): the kept window is the last
        turns within ``max_turns`` and ``keep_tokens`` (default: the configured one).
        Nothing to compress if the window already covers every turn."""
        keep = self.keep_tokens if keep_tokens is None else keep_tokens
        keep_from = window_start(ctx.turns, self.max_turns, keep)
        old = [t for t in ctx.turns if t.turn_number < keep_from]
        recent = [t for t in ctx.turns if t.turn_number >= keep_from]
        return old, recent

    def unsummarised(
        self, lines: Sequence[Mapping[str, Any]], ctx: WorkingContext, max_tokens: int
    ) -> list[ContextTurn]:
        """Turns after ``ctx``'s summary and before its first turn: after a restart only
        the last turns are loaded, and a compression that left these out recorded its
        ``compressedThrough`` past them, so they were in no summary ever. The most recent
        of them within ``max_tokens`` (each cut like a turn in the context)."""
        turns = [
            t.capped(self.max_turn_tokens)
            for t in transcript_turns(lines, self._owner_zone())
            if ctx.compressed_through < t.turn_number < ctx.start_turn
        ]
        kept: list[ContextTurn] = []
        used = 0
        for turn in reversed(turns):
            used += turn.tokens
            if used > max_tokens:
                break
            kept.append(turn)
        return kept[::-1]

    def _owner_zone(self) -> ZoneInfo | None:
        return self._zone() if self._zone is not None else None

    def moved(self, conv_id: str, start: int) -> None:
        """Compression summarised everything before turn ``start``."""
        self._remember(conv_id, start)

    def session_start(self, conv_id: str) -> int | None:
        """The first turn number in context for ``conv_id`` (None before hydration)."""
        return self._starts.get(conv_id)

    def forget(self, conv_id: str) -> None:
        self._starts.pop(conv_id, None)

    def _remember(self, conv_id: str, start: int) -> None:
        self._starts[conv_id] = start
        self._starts.move_to_end(conv_id)
        while len(self._starts) > self.capacity:
            self._starts.popitem(last=False)
