"""The model of the notes and titles (the ``haiku`` alias) missing from the model service
(404 ``not_found_error``: a retired id, a typo in ``models.aliases``), through the real
SDK against the local fake Messages API: the owner is told once, naming the key and the
model; the offline stand-in is written at once and labelled; after the configuration is
fixed and the daemon restarted, the model writes the notes and titles again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.base import ModelNotFound
from bot.config.model import AppConfig, ModelsConfig
from bot.lifecycle import ManualClock
from bot.lifecycle.abbreviation import offline_notes
from bot.lifecycle.missing_models import MissingModels, missing_model_text
from bot.lifecycle.prompts import NAMING_SYSTEM
from bot.services import Services, close_services

from .claude_fakes import claude_config, open_watched

RETIRED = "claude-haiku-retired-1"
GOOD = "claude-haiku-4-5"


def config_with(tmp_path: Path, fake: FakeAnthropicAPI, haiku: str) -> AppConfig:
    models = ModelsConfig(aliases={**ModelsConfig().aliases, "haiku": haiku})
    return claude_config(tmp_path, fake.base_url, models=models)


def answers(body: dict[str, Any]) -> Scripted:
    """404 for the retired id (as the API answers it), else notes or a title."""
    if body["model"] == RETIRED:
        return Scripted(status=404, error_message=f"model: {RETIRED}")
    if NAMING_SYSTEM in str(body["system"]):
        return Scripted([Block("text", text='{"title": "NAS RAID Choice", "topics": ["nas"]}')])
    return Scripted([Block("text", text="User chose RAID-6 for the NAS.")])


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI() as fake:
        # Nothing to ask at the start (an endpoint without the Models API): the notes'
        # own 404, naming the model, tells (a 404 the Models API contradicts does not,
        # tests/brain/test_one_shot_404.py).
        fake.models_api = False
        for _ in range(200):
            fake.push(answers)
        yield fake


async def chat(services: Services, users: int) -> str:
    manager = services.conversations
    conv = (await manager.create("web")).id
    for n in range(1, users + 1):
        await manager.append_turn(conv, "user", f"Should the NAS use RAID-{n}?")
        await manager.append_turn(conv, "assistant", f"RAID-{n} trades space for safety.")
    return conv


async def test_a_missing_notes_model_is_told_once_stood_in_and_redone_after_the_fix(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Regression: a 404 for the haiku alias's id left the notes to the offline stand-in
    # after three sweeps (some 15 minutes) and told nobody: the owner never learnt that
    # the configuration was wrong.
    services, lifecycle, told = await open_watched(config_with(tmp_path, fake_api, RETIRED), clock)
    try:
        first, second = await chat(services, 3), await chat(services, 2)
        clock.advance(600)
        await lifecycle.run_due()
        for conv in (first, second):
            rec = await services.conversations.require(conv)
            assert offline_notes(rec.abbreviation), conv  # at once, labelled
            assert rec.needs_abbreviation  # still owed to the model
            (event,) = [
                ln
                for ln in services.conversations.read_lines(conv)
                if ln.get("event") == "abbreviation"
            ]
            assert event["method"] == "extractive" and event["needsAbbreviation"] is True
        assert len(told) == 1, told
        assert lifecycle.status()["missing_models"] == {"haiku": RETIRED}
        assert "conversations.abbreviation_model" in told[0]
        assert "models.aliases.haiku" in told[0] and RETIRED in told[0]
        clock.advance(300)  # the sweep asks again, and is refused again: nobody told twice
        await lifecycle.run_due()
        clock.advance(300)
        await lifecycle.run_due()
        assert len(told) == 1, told
    finally:
        await lifecycle.stop(1)
        await close_services(services)

    # The owner fixes models.aliases.haiku and restarts: the stand-ins are redone.
    services, lifecycle, told = await open_watched(config_with(tmp_path, fake_api, GOOD), clock)
    try:
        await lifecycle.settle()
        for conv in (first, second):
            rec = await services.conversations.require(conv)
            assert rec.abbreviation == "User chose RAID-6 for the NAS.", conv
            assert not rec.needs_abbreviation
            events = [
                ln
                for ln in services.conversations.read_lines(conv)
                if ln.get("event") == "abbreviation"
            ]
            assert events[-1]["method"] == "llm"
        assert told == [] and lifecycle.status()["missing_models"] == {}
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_a_missing_naming_model_is_told_once_and_named_after_the_fix(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    services, lifecycle, told = await open_watched(config_with(tmp_path, fake_api, RETIRED), clock)
    try:
        conv = await chat(services, 5)
        await lifecycle.settle()
        rec = await services.conversations.require(conv)
        assert rec.title and rec.last_named_turn == 0  # a keyword stand-in, still owed
        other = await chat(services, 5)
        await lifecycle.settle()
        assert len(told) == 1, told
        assert "conversations.naming_model" in told[0]
        assert "models.aliases.haiku" in told[0] and RETIRED in told[0]
        assert (await services.conversations.require(other)).last_named_turn == 0
    finally:
        await lifecycle.stop(1)
        await close_services(services)

    services, lifecycle, told = await open_watched(config_with(tmp_path, fake_api, GOOD), clock)
    try:
        clock.advance(600)  # named after its notes, at the idle pass
        await lifecycle.run_due()
        rec = await services.conversations.require(conv)
        assert rec.title == "NAS RAID Choice" and rec.last_named_turn == 5
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_a_model_that_answers_again_is_told_again_when_it_goes_missing_later() -> None:
    told: list[str] = []

    class Owner:
        async def alert_owner(self, text: str) -> None:
            told.append(text)

    config = AppConfig(models=ModelsConfig(aliases={**ModelsConfig().aliases, "haiku": RETIRED}))
    missing = MissingModels(config, Owner())
    error = ModelNotFound("haiku", RETIRED, f"model: {RETIRED}")
    missing.refused(error)
    missing.refused(error)
    await missing.settle()
    assert len(told) == 1 and missing.missing("haiku")
    missing.answered("haiku")
    assert not missing.missing("haiku")
    missing.refused(error)
    await missing.settle()
    assert len(told) == 2
    assert told[0] == missing_model_text(config, error)
    assert "conversations.abbreviation_model and conversations.naming_model use haiku" in told[0]
