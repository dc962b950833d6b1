"""The lifecycle over the real core (``open_services``) and the real Claude brain, whose
SDK talks HTTP to the local fake Messages API: the ``haiku`` alias, an outage and its
retry on the sweep, naming from the model's JSON."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.base import UtilityModel
from bot.config.model import AppConfig, BrainConfig, EmbeddingConfig
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.prompts import ABBREVIATION_SYSTEM, NAMING_SYSTEM
from bot.services import Services, close_services, open_services

from .conftest import patch_bus


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI() as fake:
        yield fake


@pytest.fixture
async def services(tmp_path: Path, fake_api: FakeAnthropicAPI) -> AsyncIterator[Services]:
    config = AppConfig(
        data_dir=tmp_path / "data",
        brain=BrainConfig(
            provider="anthropic",
            api_key="test-key",
            base_url=fake_api.base_url,
            retry_budget_seconds=0.0,
            request_timeout=5.0,
        ),
        embedding=EmbeddingConfig(enabled=False),
    )
    s = await open_services(config)
    patch_bus(s.bus)
    yield s
    await close_services(s)


async def test_claude_abbreviation_outage_retry_and_naming(
    services: Services, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    assert isinstance(services.brain, UtilityModel)
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    try:
        manager = services.conversations
        conv = (await manager.create("web")).id
        for n in range(1, 5):
            await manager.append_turn(conv, "user", f"Should the NAS use RAID-{n}?")
            await manager.append_turn(conv, "assistant", f"RAID-{n} trades space for safety.")
        fake_api.push_text(
            '{"title": "NAS RAID choice", "topics": ["nas", "raid"], "suggestSplit": false}'
        )
        await manager.append_turn(conv, "user", "Let's settle on RAID-6 then.")
        await lifecycle.settle()
        naming_request = fake_api.requests[-1].body
        assert naming_request["model"] == services.config.resolve_model("haiku")
        assert NAMING_SYSTEM in str(naming_request["system"])
        rec = await manager.require(conv)
        assert rec.title == "NAS RAID Choice" and rec.topics == ["nas", "raid"]

        fake_api.down_for(3600)  # the API is down when the conversation goes idle
        clock.advance(600)
        await lifecycle.run_due()
        rec = await manager.require(conv)
        assert rec.needs_abbreviation and rec.abbreviation is None

        fake_api.up()
        fake_api.push_text("User chose RAID-6 for the NAS after comparing RAID-1 to RAID-4.")
        clock.advance(300)  # the sweep
        await lifecycle.run_due()
        rec = await manager.require(conv)
        assert rec.abbreviation == (
            "User chose RAID-6 for the NAS after comparing RAID-1 to RAID-4."
        )
        assert not rec.needs_abbreviation and rec.abbreviated_turn == 5
        body = fake_api.requests[-1].body
        assert body["model"] == services.config.resolve_model("haiku")
        assert ABBREVIATION_SYSTEM in str(body["system"])
        assert body["max_tokens"] == services.config.conversations.abbreviation_max_tokens
        assert "Let's settle on RAID-6 then." in str(body["messages"])
    finally:
        await lifecycle.stop(1)
