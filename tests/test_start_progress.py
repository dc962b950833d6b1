"""A long step before READY (the catch-up of a missing index) is told to systemd with
its progress, and more start time is asked for while it advances
(:mod:`bot.start_progress`), against a real unix datagram NOTIFY_SOCKET."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot import recovery, start_progress
from bot.daemon import run_daemon
from bot.notify import Notifier
from bot.recovery import delete_index
from bot.services import open_services
from bot.start_progress import StartProgress, keep_start_alive
from tests.conftest import make_config, shutdown_services
from tests.ops.notify_listener import NotifyListener


@pytest.fixture
def listener() -> Iterator[NotifyListener]:
    lst = NotifyListener()
    yield lst
    lst.close()


class Ticks:
    """The keeper's sleep, one period at a time as the test says (no real time)."""

    def __init__(self) -> None:
        self.calls = 0
        self.go: asyncio.Queue[None] = asyncio.Queue()

    async def sleep(self, seconds: float) -> None:
        self.calls += 1
        await self.go.get()

    async def tick(self) -> None:
        """One period passes: returns once the keeper waits for the next."""
        before = self.calls
        self.go.put_nowait(None)
        async with asyncio.timeout(5):
            while self.calls == before:
                await asyncio.sleep(0)


async def test_progress_is_told_and_time_asked_only_while_a_step_advances(
    listener: NotifyListener,
) -> None:
    notifier = Notifier(env={"NOTIFY_SOCKET": listener.env_value})
    progress = StartProgress()
    ticks = Ticks()
    now = [0.0]
    keeper = asyncio.create_task(
        keep_start_alive(
            notifier,
            progress,
            every=10,
            extend=30,
            stall=300,
            clock=lambda: now[0],
            sleep=ticks.sleep,
        )
    )
    try:
        await ticks.tick()  # outside a step: nothing said, no time asked for
        assert listener.drain() == []
        progress.begin("catching up the index", 19_010, "conversations")
        progress.advance(5_000)
        await ticks.tick()
        assert listener.drain() == [
            {"STATUS": "catching up the index: 5,000 of 19,010 conversations"},
            {"EXTEND_TIMEOUT_USEC": "30000000"},
        ]
        now[0] += 200.0  # one transcript takes long: still within the stall bound
        await ticks.tick()
        assert listener.drain() == [{"EXTEND_TIMEOUT_USEC": "30000000"}]  # (status unchanged)
        now[0] += 200.0  # no advance for 400 s: a disk that stopped answering
        await ticks.tick()
        assert listener.drain() == []  # the unit's own timeout decides
        progress.advance(5_001)  # it moves again
        await ticks.tick()
        assert listener.drain() == [
            {"STATUS": "catching up the index: 5,001 of 19,010 conversations"},
            {"EXTEND_TIMEOUT_USEC": "30000000"},
        ]
        progress.end()
        await ticks.tick()
        assert listener.drain() == []
    finally:
        keeper.cancel()
        await asyncio.wait([keeper])
        notifier.close()


async def test_a_catch_up_before_ready_tells_systemd_how_far_it_has_come(
    tmp_path: Path, listener: NotifyListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 41): a start with a missing index caught up every transcript
    # before READY saying only "opening the store and index", and never asked for more
    # time: a large store or a slow disk outlasted TimeoutStartSec (180 s) and systemd
    # killed the daemon. The catch-up here waits, after its first transcript, until
    # systemd has heard how far it came and was asked for more time (10 s into a long
    # one, as it were).
    config = make_config(tmp_path, channels={"loopback": {"enabled": True, "port": 0}})
    services = await open_services(config)
    try:
        for n in range(3):
            rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
            await services.conversations.append_turn(rec.id, "assistant", f"note {n}")
    finally:
        await shutdown_services(services)
    delete_index(config.index_path)
    monkeypatch.setenv("NOTIFY_SOCKET", listener.env_value)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.setattr(start_progress, "PROGRESS_SECONDS", 0.01)
    heard = threading.Event()
    real = recovery._catch_up_one

    def slow(conn: Any, store: Any, conv_id: str, known: Any, report: Any) -> None:
        if report.conversations == 2:  # the first is done: held until systemd heard of it
            heard.wait(10)
        real(conn, store, conv_id, known, report)

    monkeypatch.setattr(recovery, "_catch_up_one", slow)
    stop = asyncio.Event()
    daemon = asyncio.create_task(run_daemon(config, stop))
    messages: list[dict[str, str]] = []
    try:
        async with asyncio.timeout(30):
            while not any("READY" in m for m in messages):
                assert not daemon.done(), daemon
                messages += listener.drain()
                progress = {"STATUS": "catching up the index: 1 of 3 conversations"}
                if progress in messages and any("EXTEND_TIMEOUT_USEC" in m for m in messages):
                    heard.set()
                await asyncio.sleep(0.01)
    finally:
        heard.set()
        stop.set()
        assert await asyncio.wait_for(daemon, 30) == 0
    told = messages.index({"STATUS": "catching up the index: 1 of 3 conversations"})
    extend = next(m for m in messages[told:] if "EXTEND_TIMEOUT_USEC" in m)
    assert extend == {"EXTEND_TIMEOUT_USEC": "30000000"}
    ready = next(i for i, m in enumerate(messages) if "READY" in m)
    assert told < ready
    # the progress line is not left standing for the rest of the start
    assert {"STATUS": "starting the channels"} in messages[told:ready]
