"""Fixtures for the brain tests: the fake Messages API on 127.0.0.1, a config pointing the
real SDK at it, and the real conversation core (transcripts, index, search) in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from anthropic import AsyncAnthropic

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.anthropic import AnthropicBrain
from bot.brain.base import BrainRequest
from bot.brain.prompt_cache import CLOCK_START
from bot.config import AppConfig
from bot.config.model import BrainConfig
from bot.conversations import ConversationManager
from bot.db import Database
from bot.hooks import EventBus
from bot.index import ConversationIndex
from bot.schema import INDEX_MIGRATIONS
from bot.search import SearchService
from bot.transcript import TranscriptStore


class ManualClock:
    """A controllable monotonic clock; ``sleep`` advances it instead of waiting."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI() as fake:
        yield fake


def make_config(tmp_path: Path, fake: FakeAnthropicAPI, **brain: Any) -> AppConfig:
    settings: dict[str, Any] = {
        "base_url": fake.base_url,
        "api_key": "test-key",
        "retry_budget_seconds": 5.0,
        "retry_base_delay": 0.5,
        "retry_max_delay": 2.0,
        "request_timeout": 10.0,
    }
    settings.update(brain)
    return AppConfig(
        data_dir=tmp_path / "data",
        owner={"name": "Robin", "timezone": "Europe/Berlin"},  # type: ignore[arg-type]
        brain=BrainConfig(**settings),
    )


@pytest.fixture
def config(tmp_path: Path, fake_api: FakeAnthropicAPI) -> AppConfig:
    return make_config(tmp_path, fake_api)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def core(config: AppConfig) -> AsyncIterator[SimpleNamespace]:
    """The real conversation core: transcripts + index + manager + keyword search."""
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    bus = EventBus()
    store = TranscriptStore(config.conversations_dir, fsync=False)
    manager = ConversationManager(config, store, ConversationIndex(db), bus)
    services = SimpleNamespace(
        conversations=manager, search=SearchService(config, db), bus=bus, db=db
    )
    yield services
    await db.close()


def make_brain(
    config: AppConfig, services: Any, clock: ManualClock | None = None
) -> AnthropicBrain:
    client = AsyncAnthropic(
        api_key=config.brain.api_key,
        base_url=config.brain.base_url,
        max_retries=0,
        timeout=config.brain.request_timeout,
    )
    if clock is None:
        return AnthropicBrain(config, services, client)
    return AnthropicBrain(config, services, client, sleep=clock.sleep, clock=clock)


@pytest.fixture
async def brain(
    config: AppConfig, core: SimpleNamespace, clock: ManualClock
) -> AsyncIterator[AnthropicBrain]:
    b = make_brain(config, core, clock)
    yield b
    await b.client.close()


async def seed_conversation(
    services: Any, turns: list[tuple[str, str]], *, channel: str = "web", title: str | None = None
) -> str:
    """A conversation with (role, text) turns appended through the real manager."""
    manager: ConversationManager = services.conversations
    rec = await manager.create(channel)
    for role, text in turns:
        await manager.append_turn(rec.id, role, text)
    if title:
        await manager.rename(rec.id, title)
    return rec.id


class Deltas:
    """Collects streamed deltas."""

    def __init__(self) -> None:
        self.items: list[str] = []

    async def __call__(self, text: str) -> None:
        self.items.append(text)

    @property
    def text(self) -> str:
        return "".join(self.items)


def big(n: int, who: str) -> str:
    """A turn of about 105 tokens, numbered so a test can find it in a request."""
    return f"{who} turn {n}: " + ("lorem ipsum dolor sit amet " * 15)


def big_exchanges(count: int = 8) -> list[tuple[str, str]]:
    """``count`` exchanges of :func:`big` turns: user 1, assistant 1, user 2, ..."""
    return [(role, big(n, role)) for n in range(1, count + 1) for role in ("user", "assistant")]


async def nine_big_turns(services: Any) -> str:
    """Eight big exchanges and the owner's ninth big message waiting for its reply:
    past a ``compression_budget_tokens`` of 1500, so the reply compresses first."""
    return await seed_conversation(services, [*big_exchanges(), ("user", big(9, "user"))])


def owner_request(text: str, conversation_id: str) -> BrainRequest:
    """The owner's message ``text`` on the web, to the ``sonnet`` alias."""
    return BrainRequest(
        profile="owner",
        channel="web",
        text=text,
        model_alias="sonnet",
        conversation_id=conversation_id,
    )


def party_question(model_alias: str) -> BrainRequest:
    """A known party (Mallory, on Telegram) asking whether Robin is around, in the
    restricted profile, to ``model_alias``."""
    return BrainRequest(
        profile="restricted",
        channel="telegram",
        text="Is Robin around?",
        model_alias=model_alias,
        party_name="Mallory",
        scope="Answer questions about Robin's availability.",
    )


def uncached(body: dict[str, Any]) -> dict[str, Any]:
    """A request body as it is with ``brain.prompt_cache`` off, for assertions on its
    content: the system prompt one string, no ``cache_control``, no clock note after the
    owner's newest message (bot.brain.prompt_cache)."""
    out = dict(body)
    system = body.get("system")
    if isinstance(system, list):
        out["system"] = "".join(b["text"] for b in system)
    messages = []
    for message in body.get("messages", []):
        content = message["content"]
        if isinstance(content, list):
            kept = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
            noted = [b for b in kept if not _clock_note(b)]
            content = noted[0]["text"] if len(noted) < len(kept) and len(noted) == 1 else noted
        messages.append({**message, "content": content})
    out["messages"] = messages
    return out


def _clock_note(block: dict[str, Any]) -> bool:
    return str(block.get("text", "")).startswith(CLOCK_START)
