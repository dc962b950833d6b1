"""Abbreviation passes of the lifecycle: one pass of the queue's worker, what a failed
pass leaves flagged for the sweep, the rest while the model is down, and the notes a
late reply leaves behind. A part of :class:`bot.lifecycle.Lifecycle` (its base): the
writing of the notes is :func:`bot.lifecycle.abbreviation.abbreviate`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.brain.base import RETRY_AFTER_CAP
from bot.config.model import AppConfig
from bot.lifecycle.abbreviation import Abbreviator, Outcome, abbreviate
from bot.lifecycle.missing_models import MissingModels
from bot.lifecycle.naming import Naming
from bot.lifecycle.queue import AbbreviationQueue
from bot.lifecycle.records import VectorIndex
from bot.lifecycle.timers import Clock
from bot.transcript import recallable

log = logging.getLogger("my_agent.lifecycle")

# Passes the model failed in a row (an outage: one a sweep period, the rest of the queue
# waits) before conversations get offline notes as a stand-in until it answers again.
OFFLINE_AFTER_FAILURES = 3


class AbbreviationPasses:
    """The abbreviation half of :class:`~bot.lifecycle.Lifecycle`."""

    config: AppConfig
    clock: Clock
    abbreviator: Abbreviator
    queue: AbbreviationQueue
    counters: Counter[str]
    missing_models: MissingModels
    # Conversations whose notes were written before a reply to a noted turn landed.
    _late_replies: set[str]
    _model_down_until: datetime | None
    _model_failures: int  # model failures in a row (reset by notes it wrote)
    _retitle: set[str]  # offline notes being rewritten: their title too (Recovery)
    _retitle_failures: Counter[str]  # their failed passes (Recovery)
    _offline_asked: set[str]  # offline notes the model declined to replace this run (Recovery)

    if TYPE_CHECKING:  # Lifecycle's own, and NamingRuns'

        @property
        def conversations(self) -> Any: ...

        @property
        def vectors(self) -> VectorIndex | None: ...

        async def _name(
            self, conv_id: str, *, initial: bool, retitle: bool = False
        ) -> Naming | None: ...

        async def _retitle_failed(self, conv_id: str) -> None: ...

    def enqueue(self, conv_id: str, reason: str = "idle") -> bool:
        """Queue an abbreviation (deduplicated); never waits for it."""
        added = self.queue.enqueue(conv_id)
        if added:
            log.debug("queued %s for abbreviation (%s)", conv_id, reason)
        return added

    async def _process(self, conv_id: str) -> None:
        now = self.clock.now()
        down = self._model_down_until is not None and now < self._model_down_until
        # The model failing for long (hours: an outage, the account out of credit):
        # search would miss every conversation since; they get the offline notes.
        # A model the service does not offer (404): the stand-in is written at once.
        fallback = self._model_failures >= OFFLINE_AFTER_FAILURES or self._model_missing()
        if down:
            # The model failed moments ago: flag the rest for the sweep instead of waiting
            # out the brain's retry budget once per queued conversation.
            if not fallback:
                # The whole queue at once, in one statement: a pass each (a read and a
                # write per conversation) kept the worker busy 3.8 s for 15,000.
                deferred = [conv_id, *self.queue.take_waiting()]
                self.counters["deferred"] += len(deferred)
                await self._flag(*deferred, failed=True)  # (the model's failure)
                return
            self.counters["deferred"] += 1
        late = conv_id in self._late_replies
        self._late_replies.discard(conv_id)  # a reply landing during this pass adds it back
        try:
            outcome = await self._abbreviate(conv_id, late, fallback=fallback, model=not down)
            if outcome.status == "failed" and not fallback and self._model_missing():
                # Found missing by this pass (a 404): its stand-in too, not asking again.
                outcome = await self._abbreviate(conv_id, late, fallback=True, model=False)
        except asyncio.CancelledError:
            raise
        except Exception:  # storage trouble: keep the flag for the next pass
            log.exception("abbreviation of %s failed", conv_id)
            self.counters["failed"] += 1
            if late:  # the retry must still rewrite them (the notes cover the turn number)
                self._late_replies.add(conv_id)
            await self._flag(conv_id, failed=True)
            return
        self.counters[outcome.status] += 1
        if outcome.declined:
            # offline notes the model left (a refusal) are final this run (Recovery),
            # and so is their keyword title
            self._offline_asked.add(conv_id)
            self._retitle.discard(conv_id)
            self._retitle_failures.pop(conv_id, None)
        elif outcome.status in ("abbreviated", "missing"):
            # Its notes written by the model (or the conversation gone): nothing to
            # remember. Before session 41 every conversation passed to the model was
            # kept, for the life of the daemon, and each sweep sent them all to SQLite.
            self._offline_asked.discard(conv_id)
        await self._record(outcome, down)
        if conv_id in self._retitle and (outcome.status == "failed" or outcome.error):
            await self._retitle_failed(conv_id)  # (bounded: Recovery)
        if outcome.embedded is False:
            self.counters["embedding_failed"] += 1
        if outcome.error is not None and not down and self.abbreviator.method == "llm":
            self._model_failed(outcome.retry_after)
        if outcome.status == "failed":
            if late:  # the sweep's retry must still rewrite them, not only embed them
                self._late_replies.add(conv_id)
            return
        if outcome.status == "abbreviated":
            self._model_down_until = None
            self._model_failures = 0
        if conv_id in self._late_replies:  # a reply landed while they were written
            await self._notes_behind(conv_id)
        retitle = conv_id in self._retitle and outcome.status == "abbreviated"
        if retitle:
            self._retitle.discard(conv_id)
            self._retitle_failures.pop(conv_id, None)
        if outcome.status in ("abbreviated", "embedded", "skipped") and not down:
            # Flow 5 (h): re-name from the fresh notes when enough turns passed (and a
            # keyword title of the offline notes just rewritten, whatever the turns).
            await self._name(conv_id, initial=False, retitle=retitle)

    def _model_failed(self, retry_after: float | None) -> None:
        """The model failed a pass: not asked again for half a sweep period, or for as
        long as a rate limit asks (a 429's retry-after past the brain's retry budget: the
        sweeps before it defer the queue without asking), at most
        :data:`~bot.brain.base.RETRY_AFTER_CAP`. Each sweep period it is not asked counts
        as a failure: before session 40 a 429 asking for a day stopped every note for a
        day (uncapped), and the stand-ins never came (one failure, however long)."""
        sweep = self.config.conversations.abbreviation_sweep_seconds
        rest = max(sweep / 2, min(retry_after or 0.0, RETRY_AFTER_CAP))
        self._model_down_until = self.clock.now() + timedelta(seconds=rest)
        before = self._model_failures
        self._model_failures += max(1, int(rest // sweep))
        if before < OFFLINE_AFTER_FAILURES <= self._model_failures:
            log.warning(
                "the model failed %d abbreviation pass(es) in a row%s; offline notes stand in "
                "until it answers again",
                before + 1,
                f" (and asks to wait {rest:.0f}s)" if rest > sweep / 2 else "",
            )

    async def _abbreviate(
        self, conv_id: str, late: bool, *, fallback: bool, model: bool
    ) -> Outcome:
        """One pass of :func:`abbreviate` over ``conv_id`` (``late``: rewrite them)."""
        return await abbreviate(
            self.conversations,
            self.abbreviator,
            self.vectors,
            conv_id,
            rewrite=late,
            fallback=fallback,
            model=model,
        )

    def _model_missing(self) -> bool:
        """Whether the service refused the notes' model (404): it will not come back
        before the configuration is fixed (bot.lifecycle.missing_models)."""
        return self.missing_models.missing(self.abbreviator.model_alias)

    async def _notes_behind(self, conv_id: str) -> None:
        """Record in the index that the notes owe a late reply (:meth:`_note_late_reply`):
        ``_late_replies`` alone was lost by a restart before the next idle pass."""
        try:
            await self.conversations.mark_notes_behind(conv_id)
        except Exception:
            log.exception("could not mark the notes of %s for a rewrite", conv_id)

    async def _flag(self, *conv_ids: str, failed: bool = False) -> None:
        """Flag ``conv_ids`` for a pass (``needs_abbreviation``); ``failed``: their pass
        failed or could not be made (the model down), recorded apart from a pass not
        made yet (a stop's queue), which ``my-agent status`` counts as not yet written."""
        try:
            # Only where not set already: while the model is down, each sweep defers every
            # conversation owed notes through here.
            await self.conversations.flag_needs_abbreviation(list(conv_ids))
            if failed:
                await self.conversations.mark_abbreviation_failed(list(conv_ids), True)
        except Exception:
            # Still safe: abbreviated_turn < turn_count makes the next start queue them.
            log.exception("could not mark %s for abbreviation", ", ".join(conv_ids[:5]))

    async def _record(self, outcome: Outcome, down: bool) -> None:
        """Record whether a pass failed (``abbreviation_failed``): the model's error (its
        offline stand-in written or not), the embedding of the notes, or the model down
        (not asked); notes written and embedded clear it."""
        failed = (
            outcome.status == "failed"
            or outcome.error is not None
            or outcome.embedded is False
            or (down and outcome.status == "skipped")
        )
        if not failed and outcome.status not in ("abbreviated", "embedded"):
            return  # nothing was written: nothing to record
        try:
            await self.conversations.mark_abbreviation_failed([outcome.conversation_id], failed)
        except Exception:  # operational only: the flag still owes the notes
            log.exception("could not record the pass over %s", outcome.conversation_id)

    def _note_late_reply(self, conv_id: str, turn: dict[str, Any], rec: Any) -> bool:
        """A reply to a turn the notes already cover, or landing while they are written
        (``/new`` or the idle timer while it was generated): the reply shares its user
        turn's number, so the notes counted as current and never got the answer. The
        idle timer this turn restarted then rewrites them."""
        number = turn.get("turnNumber")
        noted = getattr(rec, "abbreviated_turn", 0) or 0
        covered = isinstance(number, int) and number <= noted
        if recallable(turn) and (covered or self.queue.current == conv_id):
            self._late_replies.add(conv_id)
            return True
        return False
