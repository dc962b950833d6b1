"""The models of the notes and titles checked at the lifecycle's start, through the real
SDK against the local fake API: the Models API (no token spent) is asked in the
background; a model it does not offer is told to the owner at once and the notes get
their labelled stand-in without a Messages request; an offered one is told nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.config.model import ModelsConfig
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.abbreviation import offline_notes
from bot.services import Services, close_services

from .claude_fakes import claude_config, open_claude, open_watched

RETIRED = "claude-haiku-retired-1"
GOOD = "claude-haiku-4-5"
# the reply models of the default configuration, each asked about at the start too
REPLY_MODELS = {ModelsConfig().aliases[alias] for alias in ("opus", "sonnet")}


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(fallback="echo") as fake:
        fake.unknown_models.add(RETIRED)
        for _ in range(10):
            fake.push(answers)
        yield fake


def answers(body: dict[str, Any]) -> Scripted:
    """404 for the retired id, as the Messages API answers it (free), else notes."""
    if body["model"] == RETIRED:
        return Scripted(status=404, error_message=f"model: {RETIRED}")
    return Scripted([Block("text", text="User chose RAID-6 for the NAS.")])


async def open_with(
    tmp_path: Path, base_url: str, haiku: str, clock: ManualClock
) -> tuple[Services, Lifecycle, list[str]]:
    models = ModelsConfig(aliases={**ModelsConfig().aliases, "haiku": haiku})
    return await open_watched(claude_config(tmp_path, base_url, models=models), clock)


async def test_a_missing_notes_model_is_told_at_the_start_without_a_token(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Regression: a retired id in models.aliases.haiku was noticed only at the first
    # notes, ten idle minutes after a conversation (on a quiet day, never).
    services, lifecycle, told = await open_with(tmp_path, fake_api.base_url, RETIRED, clock)
    try:
        await lifecycle.settle()
        # one check of each model: both keys use haiku, the replies every alias
        assert sorted(fake_api.model_requests) == sorted({RETIRED, *REPLY_MODELS})
        assert fake_api.requests == []  # no Messages request: no token spent
        assert len(told) == 1 and RETIRED in told[0] and "models.aliases.haiku" in told[0]
        assert lifecycle.status()["missing_models"] == {"haiku": RETIRED}
        # The first notes are the labelled stand-in at once (the 404 costs nothing).
        conv = (await services.conversations.create("web")).id
        await services.conversations.append_turn(conv, "user", "Which RAID for the NAS?")
        await services.conversations.append_turn(conv, "assistant", "RAID-6 for safety.")
        clock.advance(600)
        await lifecycle.run_due()
        rec = await services.conversations.require(conv)
        assert offline_notes(rec.abbreviation) and rec.needs_abbreviation
        assert len(told) == 1
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_an_offered_model_is_checked_once_and_told_nothing(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    config_models = {"abbreviation_model": "haiku", "naming_model": "sonnet"}
    models = ModelsConfig(aliases={**ModelsConfig().aliases, "haiku": GOOD})
    config = claude_config(tmp_path, fake_api.base_url, models=models)
    config.conversations = config.conversations.model_copy(update=config_models)
    services = await open_claude(config)
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    try:
        await lifecycle.settle()
        expected = sorted({GOOD, *REPLY_MODELS})
        assert sorted(fake_api.model_requests) == expected  # each model once
        assert fake_api.requests == [] and lifecycle.status()["missing_models"] == {}
        assert lifecycle.status()["missing_reply_models"] == {}
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_a_check_that_hangs_neither_delays_the_start_nor_the_stop(
    tmp_path: Path, clock: ManualClock
) -> None:
    # An endpoint that never answers the Models API: the start goes on, the stop ends it.
    asked = asyncio.Event()

    released = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        asked.set()
        await released.wait()  # (set at the end, so that the server may close)
        raise web.HTTPServiceUnavailable()

    app = web.Application()
    app.router.add_get("/v1/models/{model_id}", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        services, lifecycle, told = await open_with(
            tmp_path, f"http://127.0.0.1:{port}", GOOD, clock
        )
        try:
            await asyncio.wait_for(asked.wait(), 30)  # start() returned before the answer
            check = lifecycle.missing_models.start_check
            assert check is not None and not check.done()
        finally:
            await lifecycle.stop(1)
            await close_services(services)
        assert check.cancelled() and told == []
    finally:
        released.set()
        await runner.cleanup()
