"""Fixtures for the dashboard: the real core (offline brain) with a real WebChannel on an
ephemeral 127.0.0.1 port, an aiohttp client that logs in, and Debian's Chromium driven by
Playwright (a missing browser fails under CI=true, skips elsewhere)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from bot.brain.base import BrainReply, BrainRequest, Usage
from bot.config.model import AppConfig
from bot.events import InboundMessage
from bot.services import Services, close_services, open_services
from channels.web import WebChannel

OWNER_TELEGRAM_ID = "1001"
REPO_ROOT = Path(__file__).resolve().parents[3]
SCREENSHOTS = REPO_ROOT / "test-artifacts" / "screenshots"
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def make_config(data_dir: Path, timezone: str = "UTC", **web: Any) -> AppConfig:
    return AppConfig.model_validate(
        {
            "data_dir": str(data_dir),
            "brain": {"provider": "offline"},
            "embedding": {"enabled": False},
            "owner": {"identities": {"telegram": [OWNER_TELEGRAM_ID]}, "timezone": timezone},
            "channels": {"web": {"port": 0, **web}},
        }
    )


@dataclass
class Stack:
    config: AppConfig
    services: Services
    channel: WebChannel

    @property
    def url(self) -> str:
        return self.channel.url

    @property
    def origin(self) -> str:
        return self.channel.url

    async def deliver_telegram(
        self, text: str, sender_id: str = OWNER_TELEGRAM_ID, name: str = "Hanan"
    ) -> None:
        """A Telegram message as the Telegram adapter would hand it to the core."""
        await self.services.router.deliver(
            InboundMessage(
                channel="telegram",
                sender_id=sender_id,
                sender_name=name,
                text=text,
                message_id=f"tg-{uuid.uuid4().hex[:8]}",
                chat_id=sender_id,
            )
        )


async def start_stack(
    data_dir: Path, brain: Any = None, timezone: str = "UTC", **web: Any
) -> Stack:
    config = make_config(data_dir, timezone, **web)
    services = await open_services(config, brain=brain)
    channel = WebChannel(config, services)
    services.channels["web"] = channel
    services.stream_sink = channel.stream
    services.outbox.attach(channel)
    await channel.start(services.router)
    services.ready = True
    return Stack(config, services, channel)


async def stop_stack(stack: Stack) -> None:
    await stack.channel.stop()
    await close_services(stack.services)


@pytest_asyncio.fixture(loop_scope="module")
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = await start_stack(tmp_path / "data")
    try:
        yield s
    finally:
        await stop_stack(s)


async def login(session: aiohttp.ClientSession, stack: Stack) -> None:
    async with session.post(f"{stack.url}/login", json={"token": stack.channel.token}) as r:
        assert r.status == 200, await r.text()


@pytest_asyncio.fixture(loop_scope="module")
async def client(stack: Stack) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client already logged in (cookie jar accepts the 127.0.0.1 cookie)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        await login(session, stack)
        yield session


class WsClient:
    """A protocol-level dashboard client: collects frames, waits for one matching."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self._new = asyncio.Condition()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                async with self._new:
                    self.frames.append(json.loads(msg.data))
                    self._new.notify_all()

    async def send(self, **payload: Any) -> None:
        await self.ws.send_str(json.dumps(payload))

    async def wait_for(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0, start: int = 0
    ) -> dict[str, Any]:
        async def _wait() -> dict[str, Any]:
            async with self._new:
                while True:
                    for frame in self.frames[start:]:
                        if pred(frame):
                            return frame
                    await self._new.wait()

        return await asyncio.wait_for(_wait(), timeout)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("type") == kind]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


@pytest_asyncio.fixture(loop_scope="module")
async def ws_factory(
    stack: Stack, client: aiohttp.ClientSession
) -> AsyncIterator[Callable[[], Awaitable[WsClient]]]:
    opened: list[WsClient] = []

    async def _open() -> WsClient:
        ws = await client.ws_connect(f"{stack.url}/ws", headers={"Origin": stack.origin})
        wc = WsClient(ws)
        opened.append(wc)
        await wc.wait_for(lambda f: f["type"] == "conversation_list")
        return wc

    yield _open
    for wc in opened:
        await wc.close()


class GatedBrain:
    """A brain that streams a first token, then waits for release (or stop)."""

    name = "gated"

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        if request.spend is not None:  # a first call of the reply's, billed before a stop
            request.spend.add(Usage(1000, 20), 0.0123)
        if on_delta is not None:
            await on_delta("Thinking about it")
        await self.release.wait()
        if on_delta is not None:
            await on_delta(" — done.")
        return BrainReply(text="Thinking about it — done.", model="gated")

    async def close(self) -> None:
        return None


def chromium_path() -> str:
    """Debian's Chromium, or skip (fail under CI=true)."""
    env = os.environ.get("MY_AGENT_CHROMIUM")
    for candidate in ((env,) if env else ()) + CHROMIUM_CANDIDATES:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    message = "Chromium not found (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
