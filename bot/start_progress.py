"""More start time from systemd while a long step before READY makes progress.

The unit gives a start ``TimeoutStartSec`` (180 s, systemd/my-agent.service) to send
``READY=1``. A start with a missing or corrupt index catches up every transcript first
(:func:`bot.recovery.recover`): 19,010 transcripts took 29 s, so about 100,000, or a
slow disk (an SD card), ran past it, and systemd killed the daemon and started it again
(recovery keeps what it did, so the start converged, one killed attempt at a time).
Before session 41 the only word during it was ``STATUS=opening the store and index``.

A step that may be long says how far it has come in a :class:`StartProgress` (from
the db thread: plain attribute writes, read whole on the loop); while it does,
:func:`keep_start_alive` on the daemon's loop sends, every :data:`PROGRESS_SECONDS`, a
``STATUS`` line ("catching up the index: 5,000 of 19,010 conversations") and
``EXTEND_TIMEOUT_USEC`` for :data:`EXTEND_SECONDS` more. A step that stops advancing
for :data:`STALL_SECONDS` (a disk that no longer answers) is given no more time: the
unit's own timeout decides, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from bot.notify import Notifier

log = logging.getLogger("my_agent.start")

PROGRESS_SECONDS = 10.0  # how often the progress is told (and more time asked for)
EXTEND_SECONDS = 30.0  # the time asked for each time: three chances to ask again
STALL_SECONDS = 300.0  # no advance for this long: no more time asked for


class StartProgress:
    """How far the current long step of a start has come (none: ``step`` is None)."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.unit = ""
        self.total = 0
        self.done = 0
        self.shown = False  # a line of it went to systemd

    def begin(self, step: str, total: int, unit: str) -> None:
        """A step over ``total`` items (``unit``: "conversations") begins."""
        self.done = 0
        self.total = total
        self.unit = unit
        self.step = step  # last: the loop never reads the new step with the old figures

    def advance(self, done: int) -> None:
        """``done`` of the step's items are done."""
        self.done = done

    def end(self) -> None:
        """The step is over: nothing to tell, no more time needed for it."""
        self.step = None

    def line(self) -> str | None:
        """The status line, or None outside a step."""
        step = self.step
        if step is None:
            return None
        return f"{step}: {self.done:,} of {self.total:,} {self.unit}"


async def keep_start_alive(
    notifier: Notifier,
    progress: StartProgress,
    *,
    every: float | None = None,
    extend: float = EXTEND_SECONDS,
    stall: float = STALL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> None:
    """Every ``every`` seconds (:data:`PROGRESS_SECONDS`), while ``progress`` is in a
    step that advanced within ``stall`` seconds: its status line and ``extend`` seconds
    more start time. Runs until cancelled."""
    every = PROGRESS_SECONDS if every is None else every
    last: tuple[str, int] | None = None
    advanced_at = clock()
    stalled = False
    while True:
        await sleep(every)
        step, done, line = progress.step, progress.done, progress.line()
        if step is None or line is None:
            continue
        now = clock()
        if (step, done) != last:
            last, advanced_at, stalled = (step, done), now, False
        elif now - advanced_at > stall:
            if not stalled:
                stalled = True
                log.warning(
                    "%s: no progress for %.0f s; no more start time asked of systemd",
                    line,
                    now - advanced_at,
                )
            continue
        log.info("%s", line)
        progress.shown = True
        notifier.status(line)
        notifier.extend_timeout(extend)


@asynccontextmanager
async def keeping_start_alive(notifier: Notifier) -> AsyncIterator[StartProgress]:
    """A :class:`StartProgress` told to systemd by :func:`keep_start_alive` for as long
    as the block runs."""
    progress = StartProgress()
    task = asyncio.get_running_loop().create_task(
        keep_start_alive(notifier, progress), name="start-progress"
    )
    try:
        yield progress
    finally:
        task.cancel()
        # wait(), not `await task`: a cancellation of the caller itself is not swallowed
        await asyncio.wait([task])
