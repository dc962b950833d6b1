"""The conversation lifecycle: idle timers -> abbreviation queue -> naming (seed 000
"Conversation Lifecycle", "Flow 2", "Flow 5", "Flow 6").

:class:`Lifecycle` listens to the conversation manager's events on the bus:

- ``turn_appended``: (re)arm the conversation's idle timer; after the
  ``conversations.naming_turn``-th user message, name it once (in the background);
- ``conversation_switched`` (a switch, ``/new``): abbreviate the conversation left behind.

When a timer fires, or on a switch, the conversation is queued for abbreviation (one
serial, deduplicated worker); after its notes are written it is re-named when
``conversations.renaming_interval_turns`` turns passed since the last naming. A periodic
sweep retries failed passes, and :meth:`Lifecycle.start` queues what a previous run left
unfinished. Compression never triggers any of this, and nothing here delays a reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping
from datetime import datetime, timedelta
from typing import Any

from bot.brain.base import UtilityModel
from bot.config.model import AppConfig
from bot.lifecycle.abbreviation import Abbreviator, Outcome
from bot.lifecycle.missing_models import MissingModels, ReportingModel
from bot.lifecycle.naming import Namer, Naming
from bot.lifecycle.naming_runs import NamingRuns
from bot.lifecycle.passes import AbbreviationPasses
from bot.lifecycle.queue import AbbreviationQueue
from bot.lifecycle.records import LifecycleServices, VectorIndex
from bot.lifecycle.recovery import Recovery
from bot.lifecycle.timers import Backoff, Clock, IdleTimers, ManualClock, SystemClock
from bot.record_cache import RECORDS, RecordCache, keyed_locks
from bot.tasks import until_done

__all__ = ["Clock", "Lifecycle", "ManualClock", "Naming", "Outcome", "SystemClock"]

log = logging.getLogger("my_agent.lifecycle")

# Sweep periods a retry (stale vectors, an owed naming) waits at most while the model
# keeps failing (64 x 300 s: about 5 hours), so a permanently broken model does not spin.
MAX_VECTOR_BACKOFF = 64


class Lifecycle(Recovery, AbbreviationPasses, NamingRuns):
    """Wires idle timers, the abbreviation queue and naming to the conversation manager
    (recovery and the sweep: :class:`~bot.lifecycle.recovery.Recovery`; the passes:
    :class:`~bot.lifecycle.passes.AbbreviationPasses`; the naming runs:
    :class:`~bot.lifecycle.naming_runs.NamingRuns`)."""

    def __init__(
        self, config: AppConfig, services: LifecycleServices, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.services = services
        self.clock: Clock = clock or SystemClock()
        cfg = config.conversations
        brain = services.brain
        # A model the service does not offer is told to the owner (.missing_models).
        self.missing_models = MissingModels(config, services)
        model = None
        if isinstance(brain, UtilityModel):
            model = ReportingModel(brain, self.missing_models)
        self.abbreviator = Abbreviator(
            model,
            model_alias=cfg.abbreviation_model,
            budget_chars=cfg.abbreviation_input_chars,
            max_tokens=cfg.abbreviation_max_tokens,
            speaker=self._speaker,
        )
        self.namer = Namer(
            model, model_alias=cfg.naming_model, budget_chars=12000, speaker=self._speaker
        )
        self.timers = IdleTimers(
            self.clock,
            idle_seconds=cfg.idle_timeout_seconds,
            sweep_seconds=cfg.abbreviation_sweep_seconds,
            on_idle=self._on_idle,
            on_sweep=self.sweep,
            on_set_back=self._clock_set_back,
        )
        self.queue = AbbreviationQueue(self._process)
        self.counters: Counter[str] = Counter()
        self._unsubscribe: list[Callable[[], None]] = []
        self._naming_tasks: dict[str, asyncio.Task[Naming | None]] = {}
        self._naming_locks: MutableMapping[str, asyncio.Lock] = keyed_locks()
        # Split offers made (a cache of the transcripts' events) and queued for the next
        # reply, of the latest conversations only: before session 41 those of every
        # conversation whose offer no reply delivered stayed for the life of the daemon.
        self._split_noted: RecordCache[bool] = RecordCache(RECORDS)
        self._split_notes: RecordCache[str] = RecordCache(RECORDS)
        # Conversations whose notes were written before a reply to a noted turn landed.
        self._late_replies: set[str] = set()
        self._model_down_until: datetime | None = None
        self._model_failures = 0
        self._retitle: set[str] = set()  # offline notes being rewritten (Recovery)
        self._retitle_failures: Counter[str] = Counter()  # their failed passes (Recovery)
        self._offline_asked: set[str] = set()  # offline notes the model left (Recovery)
        # Vectors a failed embedding left stale, and namings the model could not give, are
        # retried by the sweep, backing off (one sweep period, doubling up to
        # MAX_VECTOR_BACKOFF of them) while it fails.
        period = timedelta(seconds=cfg.abbreviation_sweep_seconds)
        self._vector_retry: asyncio.Task[None] | None = None
        self._vector_backoff = Backoff(period, MAX_VECTOR_BACKOFF)
        # An embedding model missing at start, loaded by the sweep once it is there
        # (the daemon sets load_late_model); a download is retried backing off likewise.
        self.load_late_model = None
        self._model_retry: asyncio.Task[None] | None = None
        self._model_backoff = Backoff(period, MAX_VECTOR_BACKOFF)
        self._owed_naming: asyncio.Task[None] | None = None  # namings still owed, in turn
        self._naming_backoff = Backoff(period, MAX_VECTOR_BACKOFF)
        # the order of the retries: failures of those still owed a naming (NamingRuns)
        self._naming_failures: Counter[str] = Counter()
        self._running = False
        self._recovered = asyncio.Event()  # start() queued what the last run left owed

    @property
    def conversations(self) -> Any:
        return self.services.conversations

    @property
    def vectors(self) -> VectorIndex | None:
        return getattr(self.services, "vectors", None)

    def _speaker(self, turn: Mapping[str, Any]) -> str | None:
        """Who said ``turn``, as notes and titles name them: the owner by their name where
        the turn stores their channel id (notes read "Participants: 424242")."""
        sender, channel = turn.get("sender"), turn.get("channel")
        identities = getattr(self.services, "identities", None)
        if (
            sender
            and channel
            and identities is not None
            and turn.get("role") == "user"
            and turn.get("fromOwner") is not False
            and identities.match(str(channel), str(sender)) is not None
        ):
            return self.config.owner.name
        return None if sender is None else str(sender)

    # -- start / stop ------------------------------------------------------------------
    async def start(self) -> None:
        """Subscribe to the bus, start the scheduler and the worker, queue unfinished work."""
        if self._running:
            return
        bus = self.services.bus
        self._unsubscribe = [
            bus.subscribe("turn_appended", self._on_turn),
            bus.subscribe("conversation_switched", self._on_switched),
            bus.subscribe("conversation_created", self._on_created),
            bus.subscribe("notes_delivered", self.split_delivered),
        ]
        self.timers.start()
        self.queue.start()
        self._running = True
        if self.namer.model is not None:  # the notes' and titles' models, told at once
            self.missing_models.check_at_start(self.services.brain)
        queued = await self.recover()
        self._recovered.set()
        log.info(
            "lifecycle started (%s abbreviation, %s clock, %d recovered)",
            self.abbreviator.method,
            "manual" if self.timers.manual else "system",
            queued,
        )

    async def owed_notes_written(self) -> None:
        """Return once the notes owed at the start (what the last run left, queued by
        :meth:`start`) are written: the vector rebuild after a model change waits for
        them (:mod:`bot.daemon_vectors`), cheap as they are and what makes those
        conversations findable."""
        await self._recovered.wait()
        await self.queue.join()

    async def stop(self, timeout: float = 10.0, hurry: asyncio.Event | None = None) -> list[str]:
        """Drain queued work for up to ``timeout`` seconds, or until ``hurry`` is set
        (the owner's second Ctrl-C); what is left keeps ``needs_abbreviation = 1`` so
        the next start retries it. Returns those ids."""
        if not self._running:
            return []
        self._running = False
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        self.timers.shutdown()
        await self.missing_models.stop_checking()
        deadline = time.monotonic() + timeout
        for retry in (self._vector_retry, self._model_retry):
            if retry is not None and not retry.done():  # the next start redoes it
                retry.cancel()
                await asyncio.gather(retry, return_exceptions=True)
        naming: list[asyncio.Task[Any]] = [t for t in self._naming_tasks.values() if not t.done()]
        if self._owed_naming is not None and not self._owed_naming.done():
            naming.append(self._owed_naming)  # the rest is found again at the next start
        if naming:
            half = max(timeout / 2, 0.01)
            await until_done(asyncio.ensure_future(asyncio.wait(naming)), half, hurry)
            late = [task for task in naming if not task.done()]
            for task in late:  # naming is retried at the next user message or idle pass
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        left = await self.queue.stop(max(deadline - time.monotonic(), 0.0), hurry)
        await self._flag(*left)  # one statement (a backlog of 15,000 took a pass each)
        for conv_id in sorted(self._late_replies):
            # A reply landed during a pass the stop cut (its record waits for the pass's
            # end), or its rewrite is queued: the notes may cover its turn number already.
            await self._notes_behind(conv_id)
        if left:
            log.info("lifecycle stopped; %d abbreviation(s) left for the next start", len(left))
        return left

    # -- the queue (a pass: AbbreviationPasses._process) ----------------------------------
    async def run_due(self) -> int:
        """Manual clock: fire the timers due now, then wait for the queue and naming."""
        fired = await self.timers.run_due()
        await self.settle()
        return fired

    async def settle(self) -> None:
        """Wait until queued abbreviations, naming and a vector retry in flight are done
        (tests, bench)."""
        while True:
            await self.queue.join()
            busy: list[asyncio.Task[Any]] = [t for t in self._naming_tasks.values() if not t.done()]
            for task in (self._vector_retry, self._model_retry, self._owed_naming):
                if task is not None and not task.done():
                    busy.append(task)
            busy.extend(self.missing_models.tasks)
            if not busy:
                return
            await asyncio.gather(*busy, return_exceptions=True)

    def _clock_set_back(self, delta: timedelta) -> None:
        """The system clock was set back by ``-delta``: the waits kept in clock time keep
        their length (they would otherwise defer abbreviations, re-embedding and naming
        until the clock caught up)."""
        if self._model_down_until is not None:
            self._model_down_until += delta
        self._vector_backoff.shift(delta)
        self._model_backoff.shift(delta)
        self._naming_backoff.shift(delta)

    # -- bus handlers (quick: they run inside the emitter, on the reply path) -------------
    async def _on_turn(self, conversation_id: str, turn: dict[str, Any], **payload: Any) -> None:
        self.timers.touch(conversation_id)
        if turn.get("role") != "user":
            late = self._note_late_reply(conversation_id, turn, payload.get("conversation"))
            if late and self.queue.current != conversation_id:
                await self._notes_behind(conversation_id)  # (else once the pass is done)
            return
        number = turn.get("turnNumber")
        if isinstance(number, int) and number >= self.config.conversations.naming_turn:
            rec = payload.get("conversation")
            if rec is None or not (rec.manually_named or rec.last_named_turn):
                self._spawn_naming(conversation_id)

    async def _on_switched(
        self, previous_id: str | None = None, current_id: str | None = None, **_: Any
    ) -> None:
        if previous_id and previous_id != current_id:
            self.timers.cancel(previous_id)
            self.enqueue(previous_id, "switch")

    async def _on_created(self, previous_id: str | None = None, **payload: Any) -> None:
        # /new is announced as conversation_switched too; this covers emitters that only
        # name the previous conversation on creation (the queue deduplicates).
        if previous_id:
            await self._on_switched(
                previous_id=previous_id, current_id=getattr(payload.get("conversation"), "id", None)
            )

    async def _on_idle(self, conv_id: str) -> None:
        self.enqueue(conv_id, "idle")

    def status(self) -> dict[str, Any]:
        """Counters of this process (tests read them; ``my-agent status`` reads the index)."""
        return {
            "method": self.abbreviator.method,
            "queued": len(self.queue.pending()),
            "current": self.queue.current,
            "idle_timers": len(self.timers.pending()),
            # aliases whose model the service refused (404): their notes are stand-ins
            "missing_models": {a: e.model_id for a, e in self.missing_models.errors.items()},
            # reply models (models.default, /model's aliases) the start's check found missing
            "missing_reply_models": {
                a: e.model_id for a, e in self.missing_models.reply_errors.items()
            },
            **dict(self.counters),
        }
