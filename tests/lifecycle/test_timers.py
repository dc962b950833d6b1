"""Idle timers and the sweep on APScheduler, driven by a manual clock (no sleeping)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.lifecycle.timers import IdleTimers, ManualClock, SystemClock

from .conftest import Core, MakeLifecycle


def _timers(clock: ManualClock, fired: list[str], sweeps: list[datetime]) -> IdleTimers:
    async def on_idle(conv_id: str) -> None:
        fired.append(conv_id)

    async def on_sweep() -> None:
        sweeps.append(clock.now())

    return IdleTimers(
        clock, idle_seconds=600, sweep_seconds=300, on_idle=on_idle, on_sweep=on_sweep
    )


async def test_idle_job_is_replaced_by_each_touch_and_fires_once() -> None:
    clock = ManualClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    fired: list[str] = []
    timers = _timers(clock, fired, [])
    timers.start()
    try:
        timers.touch("conv-a")
        clock.advance(400)
        timers.touch("conv-a")  # a new message: the 10 minutes start again
        assert list(timers.pending()) == ["conv-a"]
        assert timers.pending()["conv-a"] == clock.now() + timedelta(seconds=600)
        clock.advance(599)
        await timers.run_due()
        assert fired == []
        clock.advance(1)
        await timers.run_due()
        assert fired == ["conv-a"]
        clock.advance(3600)
        await timers.run_due()
        assert fired == ["conv-a"]  # a date job: once
        assert timers.pending() == {}
    finally:
        timers.shutdown()


async def test_cancel_and_touch_from_a_past_activity() -> None:
    clock = ManualClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    fired: list[str] = []
    timers = _timers(clock, fired, [])
    timers.start()
    try:
        timers.touch("conv-a")
        assert timers.cancel("conv-a") is True
        assert timers.cancel("conv-a") is False
        # Recovery arms a timer from the last activity, not from now.
        when = timers.touch("conv-b", clock.now() - timedelta(seconds=550))
        assert when == clock.now() + timedelta(seconds=50)
        clock.advance(50)
        await timers.run_due()
        assert fired == ["conv-b"]
    finally:
        timers.shutdown()


async def test_sweep_is_periodic_and_coalesces_missed_runs() -> None:
    clock = ManualClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    sweeps: list[datetime] = []
    timers = _timers(clock, [], sweeps)
    timers.start()
    try:
        clock.advance(299)
        assert await timers.run_due() == 0
        clock.advance(1)
        assert await timers.run_due() == 1
        clock.advance(300)
        assert await timers.run_due() == 1
        clock.advance(3000)  # ten intervals missed (suspended machine): one run
        assert await timers.run_due() == 1
        assert len(sweeps) == 3
        clock.advance(299)
        assert await timers.run_due() == 0  # the next one is a full interval later
    finally:
        timers.shutdown()


async def test_system_clock_scheduler_fires_by_itself() -> None:
    """Production mode: APScheduler's AsyncIOScheduler runs the coroutine job itself."""
    done = asyncio.Event()
    fired: list[str] = []

    async def on_idle(conv_id: str) -> None:
        fired.append(conv_id)
        done.set()

    async def on_sweep() -> None:
        return None

    timers = IdleTimers(
        SystemClock(), idle_seconds=0.01, sweep_seconds=3600, on_idle=on_idle, on_sweep=on_sweep
    )
    timers.start()
    try:
        timers.touch("conv-real")
        await asyncio.wait_for(done.wait(), 10)
        assert fired == ["conv-real"]
        assert timers.pending() == {}
    finally:
        timers.shutdown()


async def test_idle_timer_fires_once_after_the_last_message(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle
) -> None:
    lifecycle = await make_lifecycle()
    rec = await core.manager.create("web")
    await core.chat(rec.id, 2)
    clock.advance(599)
    await lifecycle.run_due()
    assert core.events(rec.id, "abbreviation") == []
    await core.chat(rec.id, 1)  # resets the timer
    clock.advance(599)
    await lifecycle.run_due()
    assert core.events(rec.id, "abbreviation") == []
    clock.advance(1)
    await lifecycle.run_due()
    events = core.events(rec.id, "abbreviation")
    assert len(events) == 1 and events[0]["throughTurn"] == 3
    clock.advance(6 * 600)  # more time (and sweeps) without messages: nothing more
    await lifecycle.run_due()
    assert len(core.events(rec.id, "abbreviation")) == 1
    row = await core.row(rec.id)
    assert row.abbreviated_turn == 3 and not row.needs_abbreviation


async def test_each_conversation_has_its_own_timer(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle
) -> None:
    lifecycle = await make_lifecycle()
    a = await core.manager.create("web")
    b = await core.manager.create("telegram", identity_key="telegram:1")
    await core.chat(a.id, 1)
    clock.advance(300)
    await core.chat(b.id, 1)
    assert set(lifecycle.timers.pending()) == {a.id, b.id}
    clock.advance(300)
    await lifecycle.run_due()
    assert len(core.events(a.id, "abbreviation")) == 1
    assert core.events(b.id, "abbreviation") == []
    clock.advance(300)
    await lifecycle.run_due()
    assert len(core.events(b.id, "abbreviation")) == 1


async def test_production_clock_end_to_end(core: Core) -> None:
    """SystemClock: APScheduler itself fires the idle job that leads to the notes."""
    from bot.lifecycle import Lifecycle

    from .conftest import FakeServices, OfflineBrain

    config = core.config.model_copy(deep=True)
    config.conversations.idle_timeout_seconds = 0.05
    lifecycle = Lifecycle(config, FakeServices(core.bus, core.manager, OfflineBrain()))
    await lifecycle.start()
    try:
        conv = (await core.manager.create("web")).id
        await core.chat(conv, 1)
        for _ in range(1000):  # bounded wait for the background work, not a timing check
            if core.events(conv, "abbreviation"):
                break
            await asyncio.sleep(0.01)
        await lifecycle.settle()
        assert len(core.events(conv, "abbreviation")) == 1
    finally:
        await lifecycle.stop(1)


def _set_back_clock(monkeypatch: Any) -> tuple[list[timedelta], SystemClock]:
    """A system clock and APScheduler's own, both ``offset[0]`` behind the real one:
    a test sets the offset to set the clock back, the monotonic clock unmoved."""
    import apscheduler.schedulers.base as aps_base

    offset = [timedelta(0)]

    class SetBack(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) - offset[0]

    class SetBackClock(SystemClock):
        def now(self) -> datetime:
            return datetime.now(UTC) - offset[0]

    monkeypatch.setattr(aps_base, "datetime", SetBack)
    return offset, SetBackClock()


async def test_idle_timers_and_sweep_follow_a_clock_set_back(monkeypatch: Any) -> None:
    """The system clock set back a day while a conversation's idle timer was pending: it
    still fires after its idle time, not a day later; so does the sweep."""
    offset, clock = _set_back_clock(monkeypatch)
    fired: list[str] = []
    sweeps: list[datetime] = []

    async def on_idle(conv_id: str) -> None:
        fired.append(conv_id)

    async def on_sweep() -> None:
        sweeps.append(datetime.now(UTC))

    set_back: list[timedelta] = []
    timers = IdleTimers(
        clock,
        idle_seconds=1.0,
        sweep_seconds=1.0,
        on_idle=on_idle,
        on_sweep=on_sweep,
        on_set_back=set_back.append,
    )
    timers.watch_seconds = 0.1
    timers.start()
    try:
        timers.touch("conv-jump")
        await asyncio.sleep(0.2)
        offset[0] = timedelta(days=1)
        for _ in range(100):
            if fired and sweeps:
                break
            await asyncio.sleep(0.05)
        assert fired == ["conv-jump"] and sweeps
        assert len(set_back) == 1 and set_back[0] < -timedelta(hours=23)
    finally:
        timers.shutdown()


async def test_a_message_just_after_a_set_back_waits_its_whole_idle_time(
    monkeypatch: Any,
) -> None:
    """Regression (session 39): a message in the seconds between a set-back and the
    watch's next look armed its timer from the set-back clock, and the watch then moved
    it back once more: the conversation went idle seconds after the message."""
    offset, clock = _set_back_clock(monkeypatch)
    fired: list[str] = []

    async def on_idle(conv_id: str) -> None:
        fired.append(conv_id)

    async def on_sweep() -> None:
        return None

    timers = IdleTimers(clock, idle_seconds=30.0, sweep_seconds=60.0, on_idle=on_idle,
                        on_sweep=on_sweep)  # fmt: skip
    timers.watch_seconds = 0.2
    timers.start()
    try:
        await asyncio.sleep(0.05)  # the watch took its first look
        offset[0] = timedelta(days=1)
        when = timers.touch("conv-late")  # before the watch's next look
        assert when - clock.now() > timedelta(seconds=29)
        await asyncio.sleep(0.5)  # the watch looks again (twice)
        assert fired == []
        assert timers.pending()["conv-late"] - clock.now() > timedelta(seconds=28)
    finally:
        timers.shutdown()


def test_a_backoff_keeps_its_length_when_the_clock_is_set_back() -> None:
    from bot.lifecycle.timers import Backoff

    backoff = Backoff(timedelta(minutes=5), 8)
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    backoff.failed(now)
    earlier = now - timedelta(days=1)
    backoff.shift(-timedelta(days=1))
    assert not backoff.ready(earlier)
    assert backoff.ready(earlier + timedelta(minutes=5))


async def test_an_idle_timer_from_a_last_activity_ahead_of_the_clock() -> None:
    """A restart after the clock was set back a day re-arms a conversation last active
    "tomorrow": it goes idle after the idle time, not a day later."""
    clock = ManualClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    fired: list[str] = []
    timers = _timers(clock, fired, [])
    timers.start()
    try:
        when = timers.touch("conv-ahead", clock.now() + timedelta(days=1))
        assert when == clock.now() + timedelta(seconds=600)
        earlier = timers.touch("conv-past", clock.now() - timedelta(seconds=100))
        assert earlier == clock.now() + timedelta(seconds=500)  # a restart keeps the rest
        clock.advance(600)
        await timers.run_due()
        assert sorted(fired) == ["conv-ahead", "conv-past"]
    finally:
        timers.shutdown()


async def test_the_lifecycles_sweep_runs_every_five_minutes(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle
) -> None:
    # Default config: a conversation flagged by a failed pass (no idle timer) is taken
    # by the sweep at 300 s after the start, and again 300 s after that, not sooner.
    lifecycle = await make_lifecycle()
    first, second = (await core.manager.create("web")).id, (await core.manager.create("web")).id
    for conv in (first, second):
        await core.chat(conv, 1)
        lifecycle.timers.cancel(conv)
    await core.manager.mark_needs_abbreviation(first, True)
    clock.advance(299)
    await lifecycle.run_due()
    assert core.events(first, "abbreviation") == []
    clock.advance(1)
    await lifecycle.run_due()
    assert len(core.events(first, "abbreviation")) == 1
    await core.manager.mark_needs_abbreviation(second, True)
    clock.advance(299)
    await lifecycle.run_due()
    assert core.events(second, "abbreviation") == []
    clock.advance(1)
    await lifecycle.run_due()
    assert len(core.events(second, "abbreviation")) == 1
