"""Fixtures for the Telegram channel: the fake Bot API server and a recording ChannelHost.

aiogram is imported once per session (it costs seconds of CPU), by this module.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Container
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bot.bench.fakes.telegram_api import TOKEN, ApiError, FakeTelegramServer
from bot.channel import DeliveryError
from bot.config.model import AppConfig
from bot.events import InboundMessage
from channels.telegram.adapter import TelegramChannel

if TYPE_CHECKING:
    from .stack import Stack

OWNER_ID = 1001
STRANGER_ID = 2002
GROUP_ID = -100500
OTHER_GROUP_ID = -100999


class RecordingHost:
    """A ChannelHost that records deliveries and cursors (and can refuse to deliver)."""

    def __init__(self) -> None:
        self.delivered: list[InboundMessage] = []
        self.cursors: dict[tuple[str, str], str] = {}
        self.cursor_history: list[str] = []
        self.alerts: list[tuple[str, str, str | None]] = []
        self.reachable_again: list[str] = []  # channels that said they reach their server
        self.refuse: Callable[[InboundMessage], bool] = lambda m: False
        self._cond = asyncio.Condition()

    async def deliver(self, message: InboundMessage) -> None:
        if self.refuse(message):
            raise DeliveryError("disk full (test)")
        self.delivered.append(message)
        async with self._cond:
            self._cond.notify_all()

    async def get_cursor(self, channel: str, key: str) -> str | None:
        return self.cursors.get((channel, key))

    async def set_cursor(self, channel: str, key: str, value: str) -> None:
        self.cursors[(channel, key)] = value
        if key == "offset":  # the offsets written, in order (not the other cursors)
            self.cursor_history.append(value)
        async with self._cond:
            self._cond.notify_all()

    async def reachable(self, channel: str) -> None:
        self.reachable_again.append(channel)

    async def record_message_ref(self, channel: str, ref: str, conversation_id: str) -> None:
        return None

    async def alert_owner(self, channel: str, key: str, problem: str | None) -> None:
        """Recorded in :attr:`alerts`, and kept as the router keeps it (``alert:<key>``)."""
        self.alerts.append((channel, key, problem))
        kept = json.dumps({"problem": problem} if problem else {})
        await self.set_cursor(channel, f"alert:{key}", kept)

    async def tell_owner(self, channel: str, text: str) -> None:
        self.alerts.append((channel, "told", text))

    async def wait_delivered(self, count: int, timeout: float = 10.0) -> None:
        async with self._cond:
            await asyncio.wait_for(self._cond.wait_for(lambda: len(self.delivered) >= count),
                                   timeout)  # fmt: skip

    async def wait_cursor(self, value: int, timeout: float = 10.0) -> None:
        key = ("telegram", "offset")
        async with self._cond:
            await asyncio.wait_for(
                self._cond.wait_for(lambda: int(self.cursors.get(key, "0")) >= value), timeout
            )


def telegram_config(base_url: str, **overrides: Any) -> AppConfig:
    tg: dict[str, Any] = {
        "enabled": True,
        "token": TOKEN,
        "api_base": base_url,
        "polling_timeout": 1,
        "groups": [
            {"id": str(GROUP_ID), "title": "Family", "respond": "mention"},
            {"id": "-100777", "title": "Ops", "respond": "always"},
        ],
    }
    tg.update(overrides)
    return AppConfig.model_validate(
        {"channels": {"telegram": tg, "web": {"enabled": False}},
         "owner": {"identities": {"telegram": [str(OWNER_ID)]}}}
    )  # fmt: skip


class ManualClock:
    """A monotonic clock the test moves (``now += seconds``): what waits an hour is
    tested without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def flood_checks(channel: TelegramChannel) -> list[bool]:
    """What the typing indicator found at each of its checks for a flood wait from now
    on (True: held, nothing asked), one per chat action it would otherwise ask
    (:meth:`TypingIndicator._held`): a test waits for N refreshes by counting them, not
    for a time a busy machine could spend on fewer."""
    found: list[bool] = []
    held = channel._typing._held

    def spy(chat_id: str) -> bool:
        result = held(chat_id)
        found.append(result)
        return result

    channel._typing._held = spy  # type: ignore[method-assign]
    return found


async def assert_no_tasks_left(settle: float = 1.0) -> None:
    """Fail if a task other than the caller is still running once everything stopped
    (a typing loop, a poll, an outbox worker left behind would outlive its test)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + settle
    while True:
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if not left:
            return
        if loop.time() > end:
            raise AssertionError(f"tasks left running: {sorted(t.get_name() for t in left)}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def tg_server() -> AsyncIterator[FakeTelegramServer]:
    server = FakeTelegramServer()
    await server.start()
    yield server
    await server.close()


class SleepRecorder:
    """Replaces asyncio.sleep in the sender: records the delays, waits for nothing."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def host() -> RecordingHost:
    return RecordingHost()


@pytest.fixture
async def channel(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> AsyncIterator[TelegramChannel]:
    ch = TelegramChannel(telegram_config(tg_server.base_url), None, sleep=sleeps)
    await ch.start(host)
    yield ch
    await ch.stop()
    await assert_no_tasks_left()


def fail_sends(tg_server: FakeTelegramServer, calls: Container[int], error: ApiError) -> None:
    """Make the ``sendMessage`` calls numbered ``calls`` (from 1) fail with ``error``:
    a failure in the middle of a message's parts, which ``fail_next`` cannot place."""
    original = tg_server._send_message
    count = 0

    def failing(p: dict[str, Any]) -> dict[str, Any]:
        nonlocal count
        count += 1
        if count in calls:
            raise error
        return original(p)

    tg_server._send_message = failing  # type: ignore[method-assign]


@pytest.fixture
async def stack(tmp_path: Path, tg_server: FakeTelegramServer) -> AsyncIterator[Stack]:
    """The real core with the channel over the fake server (``stack.py``)."""
    from .stack import start_stack  # stack.py imports this module

    s = await start_stack(tmp_path / "data", tg_server)
    yield s
    await s.stop()
    await assert_no_tasks_left()
