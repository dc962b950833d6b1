"""The real core in-process (open_services: store, index, router, replies, outbox) with the
Telegram channel talking HTTP to the fake Bot API server, as ``bot/daemon.py`` wires it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.bench.fakes.telegram_api import TOKEN, FakeTelegramServer
from bot.brain.base import Brain, BrainReply, BrainRequest, DeltaSink
from bot.config.model import AppConfig
from bot.daemon import shutdown, wire_channels
from bot.party_resume import resume_known_parties
from bot.resume import resume_pending_replies
from bot.services import Services, open_services
from bot.sqlite_conn import select_driver
from channels.telegram.adapter import TelegramChannel

from .conftest import GROUP_ID, OWNER_ID, SleepRecorder


class ScriptedBrain:
    """A brain whose next replies are given by the test (for exact long/hostile texts)."""

    name = "scripted"

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.requests: list[BrainRequest] = []

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        self.requests.append(request)
        text = self.replies.pop(0) if self.replies else f"echo: {request.text}"
        return BrainReply(text=text, model="scripted")

    async def close(self) -> None:
        return None


def stack_config(
    data_dir: Path,
    base_url: str,
    trust: dict[str, Any] | None = None,
    debounce: dict[str, float] | None = None,
    brain: dict[str, Any] | None = None,
    owner: list[str] | None = None,
    **telegram: Any,
) -> AppConfig:
    """The telegram stack's config; ``debounce``: ``brain.debounce_seconds`` (off unless
    given, so that every message gets its reply at once); ``brain``: other ``brain`` keys
    (``provider: anthropic`` with a fake API's ``base_url``); ``owner``: the owner's
    Telegram identities (their id and ``@olga`` unless given)."""
    tg: dict[str, Any] = {
        "enabled": True,
        "token": TOKEN,
        "api_base": base_url,
        "polling_timeout": 1,
        "groups": [{"id": str(GROUP_ID), "title": "Family", "respond": "mention"}],
    }
    tg.update(telegram)
    return AppConfig.model_validate(
        {
            "data_dir": str(data_dir),
            "brain": {"provider": "offline", "debounce_seconds": debounce or {}, **(brain or {})},
            "embedding": {"enabled": False},
            "owner": {"identities": {"telegram": owner or [str(OWNER_ID), "@olga"]}},
            "channels": {"telegram": tg, "web": {"enabled": False}},
            "trust": {"escalation_channel": "telegram", **(trust or {})},
        }
    )


@dataclass
class Stack:
    config: AppConfig
    services: Services
    channel: TelegramChannel
    sleeps: SleepRecorder

    async def stop(self, drain_seconds: float = 2.0) -> None:
        """Stop as the daemon does (:func:`bot.daemon.shutdown`): replies drained or
        left pending, the outbox, then the channel, the tasks spawned, the services.

        Before, the channel stopped first and then the services, leaving a reply still
        running (its worker, its typing loop) to outlive the test and its fake server."""
        await shutdown(self.services, [self.channel], None, drain_seconds=drain_seconds)

    async def wait(self, predicate: Callable[[], Any], timeout: float = 15.0) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not await _value(predicate()):
            if loop.time() > end:
                raise AssertionError("condition not reached in time")
            await asyncio.sleep(0.02)

    async def wait_user_turns(self, identity_key: str, count: int, timeout: float = 60.0) -> None:
        """Until the conversation of ``identity_key`` holds ``count`` user turns (messages
        recorded and never answered give nothing else to wait for)."""

        async def reached() -> bool:
            turns = await self.turns(identity_key)
            return len([t for t in turns if t["role"] == "user"]) >= count

        await self.wait(reached, timeout)

    async def turns(self, identity_key: str) -> list[dict[str, Any]]:
        rec = await self.services.conversations.pinned_for(identity_key)
        if rec is None:
            return []
        return [ln for ln in self.services.store.read_lines(rec.id) if ln.get("type") == "turn"]


async def _value(v: Any) -> Any:
    return await v if asyncio.iscoroutine(v) else v


def anthropic_brain(model: Any) -> dict[str, Any]:
    """``brain`` config that sends the model's requests to ``model`` (a
    :class:`bot.bench.fakes.anthropic_api.FakeAnthropicAPI`)."""
    return {"provider": "anthropic", "base_url": model.base_url, "api_key": "test-key"}


@asynccontextmanager
async def stack_with_model(
    data_dir: Path, server: FakeTelegramServer, **kwargs: Any
) -> AsyncIterator[tuple[Stack, FakeAnthropicAPI]]:
    """A started stack whose brain is the real Anthropic SDK against a fake Messages API
    that echoes (``model.requests`` holds what the model was sent); stopped on exit."""
    async with FakeAnthropicAPI(fallback="echo") as model:
        stack = await start_stack(data_dir, server, brain_config=anthropic_brain(model), **kwargs)
        try:
            yield stack, model
        finally:
            await stack.stop()


async def start_stack(
    data_dir: Path,
    server: FakeTelegramServer,
    *,
    brain: Brain | None = None,
    telegram: dict[str, Any] | None = None,
    trust: dict[str, Any] | None = None,
    debounce: dict[str, float] | None = None,
    brain_config: dict[str, Any] | None = None,
    owner: list[str] | None = None,
) -> Stack:
    config = stack_config(
        data_dir, server.base_url, trust, debounce, brain_config, owner, **(telegram or {})
    )
    services = await open_services(config, brain=brain)
    services.outbox.base_delay = 0.05
    sleeps = SleepRecorder()
    channel = TelegramChannel(config, services, sleep=sleeps)
    # the wiring bot/daemon.py does for every channel (with the owner's alert about a
    # message the outbox gives up on: before, the stack left it out)
    wire_channels(services, [channel])
    await resume_known_parties(services)  # before the channel starts, as the daemon does
    await channel.start(services.router)
    services.outbox.attach(channel)  # once started (bot.daemon.start_channels)
    services.ready = True
    await resume_pending_replies(services)
    return Stack(config, services, channel, sleeps)


def texts(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [m["text"] for m in messages]


def query_db(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run ``sql`` on the database at ``path`` (a test's look at state.db) with the
    daemon's own SQLite driver, and close the connection.

    Never the standard ``sqlite3`` when the daemon's driver is ``pysqlite3``: two copies
    of SQLite in one process do not see each other's locks (POSIX locks are the
    process's), so the other copy's connection, on closing, took itself for the last
    one and deleted the ``-wal`` and ``-shm`` under the daemon's open connections, and
    its reads raced the daemon's writes ("database disk image is malformed", "disk I/O
    error"), and the daemon's writer thread died of SIGBUS on the shared memory, taking
    the test run with it ("Fatal Python error: Bus error", reproduced under load while
    ``_outbox_attempts`` polled the outbox)."""
    conn = select_driver().module.connect(str(path))
    try:
        with conn:
            return list(conn.execute(sql, tuple(params)).fetchall())
    finally:
        conn.close()
