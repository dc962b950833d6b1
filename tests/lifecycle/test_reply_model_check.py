"""The reply models checked at the lifecycle's start with those of the notes and titles
(bot/lifecycle/missing_models.py), through the real SDK against the local fake API: a
``models.default`` or ``/model`` alias the Models API does not offer is told to the owner
in one notice naming the keys, once across restarts, without a token spent; the offline
brain asks nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.command_status import status_answer
from bot.config.model import AppConfig, BrainConfig, ModelsConfig
from bot.daemon_stop import reload
from bot.lifecycle import ManualClock
from bot.services import close_services

from .claude_fakes import claude_config, open_watched

TYPO = "claude-sonet-4-6"  # models.aliases.sonnet, mistyped
GONE = "claude-opus-retired-1"


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(fallback="echo") as fake:
        fake.unknown_models.update({TYPO, GONE})
        yield fake


def config_with(tmp_path: Path, fake: FakeAnthropicAPI, **aliases: str) -> AppConfig:
    models = ModelsConfig(aliases={**ModelsConfig().aliases, **aliases})
    return claude_config(tmp_path, fake.base_url, models=models)


async def test_a_missing_default_model_is_told_at_the_start_once(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Regression: a typo in the reply model's id was noticed at the first reply only
    # (that reply a notice instead of an answer); the start checked notes and titles.
    config = config_with(tmp_path, fake_api, sonnet=TYPO)
    services, lifecycle, told = await open_watched(config, clock)
    try:
        await lifecycle.settle()
        assert fake_api.model_requests.count(TYPO) == 1
        assert fake_api.requests == []  # no Messages request: no token spent
        assert len(told) == 1, told
        assert "models.default is sonnet, and models.aliases.sonnet is " + TYPO in told[0]
        assert "every reply in a conversation on sonnet is a notice" in told[0]
        assert "Fix models.aliases.sonnet in the configuration and restart" in told[0]
        status = lifecycle.status()
        assert status["missing_reply_models"] == {"sonnet": TYPO}
        assert status["missing_models"] == {}  # the notes' model (haiku) is offered
    finally:
        await lifecycle.stop(1)
        await close_services(services)
    # Restarted (a crash loop, a day of restarts): told once a day, not at every start.
    services, lifecycle, told = await open_watched(config, clock)
    try:
        await lifecycle.settle()
        assert lifecycle.status()["missing_reply_models"] == {"sonnet": TYPO}
        assert told == []
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_missing_models_of_replies_and_of_notes_are_told_with_their_keys(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    config = config_with(tmp_path, fake_api, sonnet=TYPO, opus=GONE, haiku=GONE)
    services, lifecycle, told = await open_watched(config, clock)
    try:
        await lifecycle.settle()
        assert sorted(fake_api.model_requests) == sorted([GONE, TYPO])  # each id once
        assert len(told) == 2, told
        notes = next(text for text in told if "notes and titles" in text)
        replies = next(text for text in told if text is not notes)
        # The notes' model: its notice says what it does to /model haiku as well.
        assert f"models.aliases.haiku is {GONE}" in notes
        assert "/model haiku is refused" in notes
        # The replies': one notice for both, each key named once.
        assert f"models.aliases.opus is {GONE}" in replies
        assert "/model opus is refused" in replies
        assert "models.default is sonnet" in replies
        assert "haiku" not in replies
        assert "Fix models.aliases.opus and models.aliases.sonnet" in replies
        status = lifecycle.status()
        assert status["missing_reply_models"] == {"opus": GONE, "sonnet": TYPO}
        assert status["missing_models"] == {"haiku": GONE}
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_the_offline_brain_asks_about_no_model(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    config = config_with(tmp_path, fake_api, sonnet=TYPO)
    config.brain = BrainConfig(provider="offline", base_url=fake_api.base_url)
    services, lifecycle, told = await open_watched(config, clock)
    try:
        await lifecycle.settle()
        assert fake_api.model_requests == [] and told == []
        assert lifecycle.status()["missing_reply_models"] == {}
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_conversations_on_an_alias_removed_since_are_listed(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Two conversations chose "opus" with /model; the owner then removed the alias from
    # the configuration, so the name goes to the service as an id, which it refuses.
    fake_api.unknown_models.add("opus")
    config = config_with(tmp_path, fake_api)
    services, lifecycle, told = await open_watched(config, clock)
    try:
        for _ in range(2):
            rec = await services.conversations.create("web")
            await services.conversations.set_model(rec.id, "opus")
        await services.conversations.create("web", model="haiku")
    finally:
        await lifecycle.stop(1)
        await close_services(services)
    del config.models.aliases["opus"]
    services, lifecycle, told = await open_watched(config, clock)
    try:
        await lifecycle.settle()
        assert fake_api.model_requests.count("opus") == 1
        assert told == [
            "The model service does not offer a model the replies use. 2 conversations "
            "chose opus with /model, which models.aliases no longer names (model: opus): at "
            "its next message each is answered by sonnet (models.default), says so there, "
            "and switches to it."
        ]
        lines, _ = await status_answer(services, "web", None, owner_only=True)
        assert (
            "Models the model service does not offer: opus (a conversation's model, in no "
            "configuration key now). sonnet (models.default) answers for them."
        ) in lines
    finally:
        await lifecycle.stop(1)
        await close_services(services)


async def test_a_fix_reloaded_by_sighup_is_checked_again(
    tmp_path: Path, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Regression: SIGHUP reloaded trust and owner only; a typo fixed in models.aliases
    # took a restart, and /status listed the model as missing until then.
    config = config_with(tmp_path, fake_api, sonnet=TYPO)
    services, lifecycle, told = await open_watched(config, clock)
    services.lifecycle = lifecycle
    fixed = config.model_dump(mode="json")
    fixed["models"]["aliases"]["sonnet"] = "claude-sonnet-4-6"
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(fixed), encoding="utf-8")  # JSON is YAML
    services.config_path = path
    notifier = SimpleNamespace(reloading=lambda: None, ready=lambda status: None)
    try:
        await lifecycle.settle()
        assert len(told) == 1 and lifecycle.status()["missing_reply_models"] == {"sonnet": TYPO}
        lines, _ = await status_answer(services, "web", None, owner_only=True)
        assert any(line.startswith("Models the model service does not offer") for line in lines)
        await reload(services, notifier)  # type: ignore[arg-type]
        await lifecycle.settle()
        assert services.config.resolve_model("sonnet") == "claude-sonnet-4-6"
        assert fake_api.model_requests.count("claude-sonnet-4-6") == 1  # checked again
        assert lifecycle.status()["missing_reply_models"] == {}
        lines, _ = await status_answer(services, "web", None, owner_only=True)
        assert not any("does not offer" in line for line in lines)
        assert len(told) == 1  # nothing new to tell
    finally:
        await lifecycle.stop(1)
        await close_services(services)
