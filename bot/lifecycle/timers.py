"""Idle timers and the periodic sweep on APScheduler 3.x (seed 000 "Idle Timer").

One job per conversation (id ``idle:<conversation id>``), replaced on every new turn,
so the conversation goes idle ``conversations.idle_timeout_seconds`` after its last
message; one interval job (``sweep``) every ``conversations.abbreviation_sweep_seconds``.

Every run date is computed from a :class:`Clock`. With :class:`SystemClock` the
AsyncIOScheduler runs the jobs itself on the event loop. With :class:`ManualClock`
(tests, benchmarks) the scheduler is started paused, so the jobs sit in its
``MemoryJobStore`` and :meth:`IdleTimers.run_due` fires the ones due at the clock's
``now``: the real triggers and ``replace_existing`` semantics, without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from apscheduler.jobstores.base import JobLookupError
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

log = logging.getLogger("my_agent.lifecycle")

IDLE_PREFIX = "idle:"
SWEEP_JOB = "sweep"
# How often the system clock is compared with the monotonic one, and by how much the wall
# clock must have fallen behind to count as set back (not NTP's slewing).
CLOCK_WATCH_SECONDS = 10.0
CLOCK_JUMP_SECONDS = 5.0


class Clock(Protocol):
    """The time source of the lifecycle (timezone-aware UTC datetimes)."""

    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time; the scheduler fires jobs by itself."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to; jobs fire through :meth:`IdleTimers.run_due`."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when


IdleCallback = Callable[[str], Awaitable[None]]
SweepCallback = Callable[[], Awaitable[object]]


class IdleTimers:
    """The APScheduler jobs of the lifecycle: per-conversation idle timers and the sweep."""

    def __init__(
        self,
        clock: Clock,
        *,
        idle_seconds: float,
        sweep_seconds: float,
        on_idle: IdleCallback,
        on_sweep: SweepCallback,
        on_set_back: Callable[[timedelta], None] | None = None,
    ) -> None:
        self.clock = clock
        self.idle_seconds = idle_seconds
        self.sweep_seconds = sweep_seconds
        self._on_idle = on_idle
        self._on_sweep = on_sweep
        self._on_set_back = on_set_back
        self._store = MemoryJobStore()
        self._manual = not isinstance(clock, SystemClock)
        self.watch_seconds = CLOCK_WATCH_SECONDS
        self._watch: asyncio.Task[None] | None = None
        self._sample: tuple[datetime, float] | None = None  # (wall, monotonic) last seen
        # APScheduler logs every add/run at INFO, i.e. a line per message here; keep its
        # warnings (missed runs, executor errors) unless the operator configured it.
        aps_log = logging.getLogger("apscheduler")
        if aps_log.level == logging.NOTSET:
            aps_log.setLevel(logging.WARNING)
        self._scheduler = AsyncIOScheduler(
            timezone=UTC,
            jobstores={"default": self._store},
            # A late job (suspended laptop, busy loop) still runs, once.
            job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1},
        )

    @property
    def manual(self) -> bool:
        """True when jobs fire only through :meth:`run_due` (a non-system clock)."""
        return self._manual

    def start(self) -> None:
        """Start the scheduler (paused with a manual clock) and the sweep job."""
        self._scheduler.start(paused=self._manual)
        start = self.clock.now() + timedelta(seconds=self.sweep_seconds)
        self._scheduler.add_job(
            self._sweep,
            IntervalTrigger(seconds=self.sweep_seconds, start_date=start, timezone=UTC),
            id=SWEEP_JOB,
            replace_existing=True,
            # Explicit, so the first run is computed from our clock, not the wall clock.
            next_run_time=start,
        )
        if not self._manual:
            self._watch = asyncio.get_running_loop().create_task(
                self._watch_clock(), name="lifecycle-clock-watch"
            )

    def shutdown(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    async def _watch_clock(self) -> None:
        """Keep the jobs' waits when the wall clock is set back.

        APScheduler runs a job when the wall clock reaches its run time: set back a day
        (NTP, a wrong clock fixed), every idle timer and the sweep waited a day more.
        Their run times move back with the clock instead. A clock set forward (or a
        suspend, which the monotonic clock skips) is left alone: that time did pass for
        the owner, and the jobs due run at once, once.
        """
        self.check_clock()
        while True:
            await asyncio.sleep(self.watch_seconds)
            self.check_clock()

    def check_clock(self) -> None:
        """Compare the wall clock with the monotonic one since the last look, and follow
        a set-back (:meth:`shift`). Also at each :meth:`touch`, before the new timer is
        armed: a message in the seconds between a set-back and the watch's next look
        armed its timer from the set-back clock, and the shift then moved it back once
        more, so the notes were written seconds after it (session 39)."""
        if self._manual:
            return  # a manual clock moves when told to; the monotonic one says nothing of it
        now_wall, now_mono = self.clock.now(), time.monotonic()
        sample, self._sample = self._sample, (now_wall, now_mono)
        if sample is None:
            return
        behind = timedelta(seconds=now_mono - sample[1]) - (now_wall - sample[0])
        if behind.total_seconds() >= CLOCK_JUMP_SECONDS:
            self.shift(-behind)

    def shift(self, delta: timedelta) -> None:
        """Move every pending job's run time by ``delta`` (the clock was set back)."""
        log.warning("system clock set back by %s; idle timers and sweep follow", -delta)
        for job in self._scheduler.get_jobs():
            if job.next_run_time is not None:
                job.modify(next_run_time=job.next_run_time + delta)
        if self._on_set_back is not None:
            self._on_set_back(delta)

    # -- idle timers ---------------------------------------------------------------
    def touch(self, conv_id: str, last_activity: datetime | None = None) -> datetime:
        """(Re)arm the idle timer: it fires ``idle_seconds`` after ``last_activity``.

        ``last_activity`` defaults to now; startup recovery passes the conversation's
        last update so a restart does not extend the idle period.
        """
        self.check_clock()
        now = self.clock.now()
        idle = timedelta(seconds=self.idle_seconds)
        # A last activity "in the future" was stamped before the clock was set back (and
        # a restart): the timer waited until the clock caught up. Now is the latest.
        when = min(last_activity or now, now) + idle
        self._scheduler.add_job(
            self._idle,
            DateTrigger(run_date=when, timezone=UTC),
            args=[conv_id],
            id=IDLE_PREFIX + conv_id,
            replace_existing=True,
            next_run_time=when,
        )
        return when

    def cancel(self, conv_id: str) -> bool:
        """Drop the idle timer of ``conv_id``; True if one was pending."""
        try:
            self._scheduler.remove_job(IDLE_PREFIX + conv_id)
        except JobLookupError:
            return False
        return True

    def pending(self) -> dict[str, datetime]:
        """Conversation id -> when its idle timer fires."""
        out: dict[str, datetime] = {}
        for job in self._scheduler.get_jobs():
            if job.id.startswith(IDLE_PREFIX) and job.next_run_time is not None:
                out[job.id[len(IDLE_PREFIX) :]] = job.next_run_time
        return out

    def ids(self) -> frozenset[str]:
        """The conversations with an idle timer pending."""
        return frozenset(
            job.id[len(IDLE_PREFIX) :]
            for job in self._scheduler.get_jobs()
            if job.id.startswith(IDLE_PREFIX)
        )

    def has_timer(self, conv_id: str) -> bool:
        return self._scheduler.get_job(IDLE_PREFIX + conv_id) is not None

    # -- manual clock ----------------------------------------------------------------
    async def run_due(self) -> int:
        """Fire every job due at ``clock.now()`` (manual clock only); returns how many.

        Mirrors APScheduler's own processing: a job fires once even when several of its
        run times passed (coalesce), then moves to its trigger's next time or is removed.
        """
        if not self._manual:
            raise RuntimeError("run_due() is for a manual clock; the scheduler runs itself")
        now = self.clock.now()
        fired = 0
        # Earliest first, so a sweep and an idle timer due together run in time order.
        for job in sorted(self._store.get_due_jobs(now), key=lambda j: j.next_run_time):
            next_time = job.trigger.get_next_fire_time(job.next_run_time, now)
            while next_time is not None and next_time <= now:
                next_time = job.trigger.get_next_fire_time(next_time, now)
            if next_time is None:
                job.remove()
            else:
                job.modify(next_run_time=next_time)
            await job.func(*job.args, **job.kwargs)
            fired += 1
        return fired

    # -- job functions (coroutines: the AsyncIOExecutor runs them on the loop) ------
    async def _idle(self, conv_id: str) -> None:
        log.debug("conversation %s idle", conv_id)
        await self._on_idle(conv_id)

    async def _sweep(self) -> None:
        await self._on_sweep()


class Backoff:
    """The pacing of a retry that keeps failing (the model down): after a failure the
    next try waits one ``period``, doubling up to ``limit`` periods; a success resets it."""

    def __init__(self, period: timedelta, limit: int) -> None:
        self.period = period
        self.limit = limit
        self.delay = timedelta(0)
        self.until: datetime | None = None

    def ready(self, now: datetime) -> bool:
        """Whether a try is due (none failed, or the wait after the last failure passed)."""
        return self.until is None or now >= self.until

    def failed(self, now: datetime) -> timedelta:
        """Record a failure at ``now``; returns the wait before the next try."""
        self.delay = min(max(self.delay * 2, self.period), self.period * self.limit)
        self.until = now + self.delay
        return self.delay

    def succeeded(self) -> None:
        self.delay = timedelta(0)
        self.until = None

    def shift(self, delta: timedelta) -> None:
        """The clock was set back by ``-delta``: the wait keeps its length."""
        if self.until is not None:
            self.until += delta
