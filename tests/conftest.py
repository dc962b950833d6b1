"""Shared fixtures for the whole suite (kept small and generic).

- :func:`make_config` builds a validated :class:`~bot.config.AppConfig` in ``tmp_path``
  through the real loader (``build_config(raw, env={})``), offline brain, no embedding
  model, web channel off, unless the test asks otherwise.
- :class:`RecordingChannel` is an in-process :class:`bot.channel.Channel` that records
  what the core sends and can be told to fail.
- ``services`` is the real core from :func:`bot.services.open_services`, closed afterwards.

Subfolders (channels, brain, lifecycle, ...) have their own conftests; names defined
there take precedence over these.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bot import redaction
from bot.channel import ChannelHost, PermanentSendError, Unreachable
from bot.config import AppConfig, build_config
from bot.embedding import EmbeddingService
from bot.events import OutboundMessage, SendResult

OWNER_TELEGRAM_ID = "424242"
OWNER_TELEGRAM_USER = "@RobinOwner"
OWNER_EMAIL = "Robin Owner <Robin.Owner@Example.org>"


def deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated recursively with ``extra`` (nested mappings merge, others replace)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# what a config test must not inherit from the environment running the tests
CONFIG_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "TELEGRAM_BOT_TOKEN", "EMAIL_PASSWORD")


@pytest.fixture(autouse=True)
def _root_logging_kept() -> Iterator[None]:
    """The root logger as it was before the test: a command run in process (``cli.main``)
    calls ``logging.basicConfig(force=True)``, whose stderr handler (that test's capture
    file, closed by the next test) and level (WARNING for a one-shot command) stayed for
    the rest of the worker. A later in-process daemon test that failed then showed no
    log at all, only "I/O operation on closed file" (session 29). pytest's own handlers
    come and go with each phase and are left alone."""
    root = logging.getLogger()
    level, before = root.level, set(root.handlers)
    secrets = redaction.SECRETS.values  # a daemon run in process (or reloaded) sets them
    yield
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler not in before:
            root.removeHandler(handler)
    root.setLevel(level)
    redaction.SECRETS.use(secrets)


def clear_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset every ``MY_AGENT_*`` variable and the secrets a config reads."""
    for var in list(os.environ):
        if var.startswith("MY_AGENT_") or var in CONFIG_ENV:
            monkeypatch.delenv(var, raising=False)


def raw_config(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """The raw (YAML-shaped) mapping :func:`make_config` validates."""
    raw: dict[str, Any] = {
        "data_dir": str(tmp_path / "data"),
        # no debounce: a reply to every message, at once (tests/test_debounce.py has it)
        "brain": {"provider": "offline", "debounce_seconds": {}},
        "embedding": {"enabled": False},
        "channels": {"web": {"enabled": False}},
    }
    return deep_merge(raw, overrides)


def make_config(tmp_path: Path, **overrides: Any) -> AppConfig:
    """A validated config with its data directory in ``tmp_path``.

    Keyword arguments are top-level sections merged into the defaults, e.g.
    ``make_config(tmp_path, owner={"identities": {"telegram": ["1"]}})``. The process
    environment is ignored (``env={}``) so a developer's ANTHROPIC_API_KEY never leaks in.
    """
    return build_config(raw_config(tmp_path, **overrides), env={})


def owner_identities() -> dict[str, list[str]]:
    return {"telegram": [OWNER_TELEGRAM_ID, OWNER_TELEGRAM_USER], "email": [OWNER_EMAIL]}


class RecordingChannel:
    """A :class:`bot.channel.Channel` that keeps every message it is asked to send.

    ``fail_next(n)`` makes the next ``n`` sends raise (the outbox retries them);
    ``failing = True`` makes every send raise until reset; ``permanent = True`` raises
    :class:`PermanentSendError` instead, ``unreachable = True``
    :class:`~bot.channel.Unreachable` (an outage: nothing sent).
    """

    supports_streaming = False

    def __init__(self, name: str = "test") -> None:
        self.name = name
        self.host: ChannelHost | None = None
        self.sent: list[OutboundMessage] = []
        self.attempts = 0
        self.failing = False
        self.permanent = False
        self.unreachable = False
        self._fail_budget = 0
        self._changed = asyncio.Condition()
        self.started = False

    async def start(self, host: ChannelHost) -> None:
        self.host = host
        self.started = True

    async def stop(self) -> None:
        self.started = False

    def fail_next(self, count: int = 1) -> None:
        self._fail_budget += count

    async def send(self, message: OutboundMessage) -> SendResult:
        self.attempts += 1
        if self.permanent:
            raise PermanentSendError("recording channel told to refuse")
        if self.unreachable:
            raise Unreachable("recording channel told its server is down")
        if self.failing or self._fail_budget > 0:
            self._fail_budget = max(0, self._fail_budget - 1)
            raise ConnectionError("recording channel told to fail")
        self.sent.append(message)
        async with self._changed:
            self._changed.notify_all()
        return SendResult(message_ref=f"{self.name}-sent-{len(self.sent)}")

    def texts(self, kind: str | None = None) -> list[str]:
        return [m.text for m in self.sent if kind is None or m.kind == kind]

    def of_kind(self, kind: str) -> list[OutboundMessage]:
        return [m for m in self.sent if m.kind == kind]

    async def wait_for(
        self, predicate: Callable[[list[OutboundMessage]], bool], timeout: float = 10.0
    ) -> list[OutboundMessage]:
        """Wait until ``predicate(self.sent)`` holds; returns the sent list."""

        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.sent))

        await asyncio.wait_for(_wait(), timeout)
        return self.sent

    async def wait_count(self, count: int, timeout: float = 10.0) -> list[OutboundMessage]:
        return await self.wait_for(lambda sent: len(sent) >= count, timeout)


async def attach_channel(services: Any, channel: RecordingChannel) -> RecordingChannel:
    """Wire a channel into a running core the way the daemon does (start, outbox)."""
    services.channels[channel.name] = channel
    await channel.start(services.router)
    services.outbox.attach(channel)
    return channel


def telegram_config(tmp_path: Path, **overrides: Any) -> AppConfig:
    """:func:`make_config` with the owner's identities and the Telegram channel on (a
    test token): the core of the routing, command and escalation tests. ``overrides``
    merge in as for :func:`make_config` (``trust={...}``)."""
    core = {
        "owner": {"identities": owner_identities()},
        "channels": {"telegram": {"enabled": True, "token": "123456:TEST-token"}},
    }
    return make_config(tmp_path, **deep_merge(core, overrides))


async def start_telegram_core(config: AppConfig, brain: Any = None) -> tuple[Any, RecordingChannel]:
    """The core on ``config`` (the offline brain unless ``brain``), a recording Telegram
    channel attached; close it with :func:`shutdown_services`."""
    from bot.services import open_services

    services = await open_services(config, brain=brain)
    telegram = await attach_channel(services, RecordingChannel("telegram"))
    return services, telegram


async def settle(services: Any, timeout: float = 10.0) -> None:
    """Wait until no reply job is queued or running and nothing attached is pending."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        busy = services.replies.queue.pending()
        rows = await services.state.fetchall("SELECT channel FROM outbox WHERE status = 'pending'")
        waiting = [r for r in rows if r[0] in services.channels]
        if not busy and not waiting:
            return
        if loop.time() > deadline:
            raise TimeoutError(f"core not idle: {busy} reply jobs, {len(waiting)} unsent")
        await asyncio.sleep(0.01)


async def shutdown_services(services: Any) -> None:
    """Drain reply jobs, then close (the counterpart of ``open_services``)."""
    from bot.services import close_services

    await services.replies.queue.drain(timeout=5)
    for channel in list(services.channels.values()):
        await channel.stop()
    await close_services(services)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding end-to-end tests (marked ``slow``) run first, each file's tests in
    their order. scripts/test.sh hands whole files to two workers in this order: a long
    file handed out last would keep one worker busy minutes after the other ran out."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort


@pytest.fixture
def config(tmp_path: Path) -> AppConfig:
    """Offline brain, no embeddings, web off, owner identities on Telegram and e-mail."""
    return make_config(tmp_path, owner={"identities": owner_identities()})


@pytest.fixture
async def services(config: AppConfig) -> AsyncIterator[Any]:
    """The real core (store, index, router, outbox, offline brain) on ``config``."""
    from bot.services import open_services

    core = await open_services(config)
    try:
        yield core
    finally:
        await shutdown_services(core)


@pytest.fixture(scope="session", autouse=True)
def one_load_per_local_model() -> Iterator[None]:
    """Each local model folder (``embedding.model_path``) is loaded by fastembed once per
    test session; every later :class:`EmbeddingService` on it gets that model (and still
    runs its own probe). A load took seconds on the loaded 2-core machine, and the
    benches, the recall tests and the search fixtures each loaded it again. Loads from a
    cache or the hub (what tests/test_embedding.py checks) are never shared, nor is a
    failed load; a test that patches ``_without_spinning`` itself still wins."""
    import bot.embedding

    load = bot.embedding._without_spinning
    loaded: dict[tuple[Any, ...], Any] = {}

    def shared(factory: Any, kwargs: dict[str, Any]) -> Any:
        if "specific_model_path" not in kwargs:
            return load(factory, kwargs)
        key = (factory, *sorted(kwargs.items()))
        if key not in loaded:
            loaded[key] = load(factory, kwargs)
        return loaded[key]

    bot.embedding._without_spinning = shared  # type: ignore[assignment]
    try:
        yield
    finally:
        bot.embedding._without_spinning = load  # type: ignore[assignment]


@pytest.fixture(scope="module")
def embedder() -> Iterator[EmbeddingService]:
    """The real local MiniLM model, one per test module (fails under CI=true, skips
    elsewhere, when it is missing: tests.recall_helpers.model_path)."""
    from bot.config.model import EmbeddingConfig
    from tests.recall_helpers import model_path

    service = EmbeddingService(EmbeddingConfig(model_path=str(model_path())))
    yield service
    service.close()


@pytest.fixture
async def session() -> AsyncIterator[Any]:
    """An HTTP client (30 s a request) for the loopback channel of a daemon run as a
    child process (:class:`tests.ops.loopback.Loopback`)."""
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        yield client


@pytest.fixture
async def daemons() -> AsyncIterator[list[Any]]:
    """The daemons (:class:`tests.ops.daemon.DaemonProcess`) a test appended, killed
    after it if still running."""
    started: list[Any] = []
    yield started
    for daemon in started:
        await daemon.close()


@pytest.fixture
async def telegram_fake() -> AsyncIterator[Any]:
    """The Telegram Bot API fake (bot.bench.fakes.telegram_api) on 127.0.0.1."""
    from bot.bench.fakes.telegram_api import FakeTelegramServer

    fake = FakeTelegramServer()
    await fake.start()
    yield fake
    await fake.close()
