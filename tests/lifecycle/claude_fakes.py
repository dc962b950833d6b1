"""The lifecycle over the real Claude brain, whose SDK talks HTTP to the local fake
Messages API: its configuration, its services, and a fake holding the requests of one
kind (by their system prompt) until the test opens the gate (a model call in flight,
without sleeps)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.config.model import AppConfig, BrainConfig, EmbeddingConfig
from bot.lifecycle import Lifecycle, ManualClock
from bot.services import Services, open_services

from .conftest import patch_bus


def claude_config(tmp_path: Path, base_url: str, **fields: Any) -> AppConfig:
    """A configuration whose Claude brain is the fake at ``base_url``: no retries (a
    failure is at once the lifecycle's to handle), no embedding model."""
    return AppConfig(
        data_dir=tmp_path / "data",
        brain=BrainConfig(
            provider="anthropic",
            api_key="test-key",
            base_url=base_url,
            retry_budget_seconds=0.0,
            request_timeout=30.0,
        ),
        embedding=EmbeddingConfig(enabled=False),
        **fields,
    )


async def open_claude(config: AppConfig) -> Services:
    """The real services over ``config`` (close them with ``close_services``)."""
    services = await open_services(config)
    patch_bus(services.bus)
    return services


async def open_watched(
    config: AppConfig, clock: ManualClock
) -> tuple[Services, Lifecycle, list[str]]:
    """The real services over ``config`` and their lifecycle, started; the list fills
    with what the owner is told (the ``notice`` event)."""
    services = await open_claude(config)
    told: list[str] = []

    async def on_notice(text: str, **_: Any) -> None:
        told.append(text)

    services.bus.subscribe("notice", on_notice)
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    return services, lifecycle, told


class GatedAPI(FakeAnthropicAPI):
    """Holds every request whose system prompt contains ``hold`` until :attr:`gate` is
    set; :attr:`held` is set when the first one arrives."""

    def __init__(self, hold: str) -> None:
        super().__init__(fallback="echo")
        self.hold = hold
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def __aenter__(self) -> GatedAPI:
        await self.start()
        return self

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()  # (aiohttp keeps the body: read again below)
        if self.hold in str(body.get("system")):
            self.held.set()
            await self.gate.wait()
        return await super()._handle(request)
