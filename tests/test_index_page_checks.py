"""The index's pages are checked once a day at most (bot.index_page_checks): not at
every start (regression: each start read the whole of conversations.db, 41 s for the
10,000-conversation bench store), and the day is kept across restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.index_page_checks import CHECK_INTERVAL, CURSOR, page_checks
from bot.services import open_services
from tests.conftest import make_config, shutdown_services


class Clock:
    """A clock that moves only when the checks sleep; the sleep parks after ``budget``
    sleeps so that a test sees where the loop waits."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []
        self.parked = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if len(self.slept) > 1:  # the second wait: park here, the test looks
            self.parked.set()
            await asyncio.Event().wait()
        self.now += seconds


class Cursors:
    def __init__(self, value: str | None = None) -> None:
        self.values: dict[tuple[str, str], str] = {}
        if value is not None:
            self.values[CURSOR] = value

    async def get_cursor(self, channel: str, key: str) -> str | None:
        return self.values.get((channel, key))

    async def set_cursor(self, channel: str, key: str, value: str) -> None:
        self.values[(channel, key)] = value


async def run_until_parked(
    clock: Clock, cursors: Cursors, checked: list[float], check: Any = None
) -> None:
    async def record(db: Any) -> str:
        checked.append(clock())
        return "ok"

    check = check or record
    task = asyncio.create_task(
        page_checks(None, cursors, clock=clock, sleep=clock.sleep, check=check)
    )
    try:
        await asyncio.wait_for(clock.parked.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_first_start_checks_at_once_then_once_a_day() -> None:
    clock, cursors, checked = Clock(1_000_000.0), Cursors(), []
    await run_until_parked(clock, cursors, checked)
    assert checked == [1_000_000.0, 1_000_000.0 + CHECK_INTERVAL]
    assert clock.slept == [CHECK_INTERVAL, CHECK_INTERVAL]
    assert cursors.values[CURSOR] == f"{1_000_000.0 + CHECK_INTERVAL:.0f}"


async def test_a_restart_within_the_day_does_not_check_again() -> None:
    # Regression: every start read every page of the index.
    checked_at = 1_000_000.0
    clock, checked = Clock(checked_at + 3_600), []
    await run_until_parked(clock, Cursors(f"{checked_at:.0f}"), checked)
    assert clock.slept[0] == CHECK_INTERVAL - 3_600  # the rest of the day first
    assert checked == [checked_at + CHECK_INTERVAL]


async def test_an_unreadable_or_future_record_checks_at_once() -> None:
    for stored in ("garbage", "9999999999", "-5"):
        clock, checked = Clock(1_000_000.0), []
        await run_until_parked(clock, Cursors(stored), checked)
        assert checked[0] == 1_000_000.0, stored


async def test_damage_found_ends_the_checks() -> None:
    clock, cursors = Clock(5_000.0), Cursors()

    async def damaged(db: Any) -> str:
        return "damaged: quick check, 1 problem: Tree 3 page 3"

    await asyncio.wait_for(
        page_checks(None, cursors, clock=clock, sleep=clock.sleep, check=damaged), 10
    )
    assert clock.slept == [] and cursors.values[CURSOR] == "5000"


async def test_the_time_is_kept_in_state_db_across_restarts(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    runs: list[list[float]] = []
    for start in (2_000_000.0, 2_000_000.0 + CHECK_INTERVAL + 3_600):
        services = await open_services(config)
        try:
            checked: list[float] = []
            await run_until_parked(Clock(start), services.router, checked)
            assert await services.router.get_cursor(*CURSOR) == f"{checked[-1]:.0f}"
            runs.append(checked)
        finally:
            await shutdown_services(services)
    assert runs[0] == [2_000_000.0, 2_000_000.0 + CHECK_INTERVAL]
    # the second start an hour after the first one's last check: the rest of the day first
    assert runs[1] == [2_000_000.0 + 2 * CHECK_INTERVAL]


async def test_a_check_in_the_second_half_of_a_second_is_not_run_again_at_once() -> None:
    # Regression: the time was kept rounded to the nearest second, half a second ahead
    # of the clock at worst, read back as "in the future" and so checked again at once:
    # a small index was checked some 17 times in a row at a start, a line logged each.
    clock, cursors, checked = Clock(1_000_000.6), Cursors(), []

    async def check(db: Any) -> str:
        checked.append(clock())
        if len(checked) >= 3:  # (the bug: again and again without a wait)
            clock.parked.set()
            await asyncio.Event().wait()
        return "ok"

    await run_until_parked(clock, cursors, checked, check)
    assert checked == [1_000_000.6, 1_000_000 + CHECK_INTERVAL]  # a day after its second
