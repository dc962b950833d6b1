"""What the naming model may answer, through the real SDK against the local fake Messages
API, and the title each answer gives: 2-6 words in Title Case, at most 80 characters,
kebab-case topics; an answer with no usable title leaves the keyword stand-in, still
owed to the model (``throughTurn`` 0)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.naming import parse_naming, salvage_naming
from bot.lifecycle.prompts import NAMING_SYSTEM
from bot.lifecycle.titles import clean_title
from bot.services import Services, close_services

from .claude_fakes import GatedAPI, claude_config, open_claude

# (the model's answer, the title stored, its topics; None: the keyword stand-in)
ANSWERS: list[tuple[str, str | None, list[str] | None]] = [
    ('{"title": "\\"Server Launch Plan\\"", "topics": ["launch"]}', "Server Launch Plan", None),
    ('{"title": "“Server Launch Plan”", "topics": ["launch"]}', "Server Launch Plan", None),
    ('{"title": "Server launch plan.", "topics": ["launch"]}', "Server Launch Plan", None),
    ('{"title": "Server Launch Plan…", "topics": ["launch"]}', "Server Launch Plan", None),
    (
        '{"title": "Planning the server launch for the new shop with Anna and the team",'
        ' "topics": ["launch"]}',
        "Planning the Server Launch",
        None,
    ),
    ('{"title": "🚀 Server Launch Plan 🎉", "topics": ["launch"]}', "Server Launch Plan", None),
    ('{"title": "SERVER LAUNCH PLAN", "topics": ["launch"]}', "Server Launch Plan", None),
    (
        'Here you go:\n```json\n{"title": "Server Launch Plan", "topics": ["Server Launch",'
        ' "shop_setup", "Server Launch"]}\n```',
        "Server Launch Plan",
        ["server-launch", "shop-setup"],
    ),
    ('{"title": "Server Launch Plan", "topics": ["launch", "shop"],}', "Server Launch Plan", None),
    ("{'title': 'Server Launch Plan', 'topics': ['launch']}", "Server Launch Plan", None),
    ('{"title": "Server Launch Pl', None, None),  # cut inside the title: nothing to keep
    ('{"title": "🚀🎉"}', None, None),
    ("I would call it a launch chat.", None, None),
]


@pytest.fixture
def services(claude_services: Services) -> Services:
    return claude_services


async def test_every_kind_of_naming_answer_gives_a_clean_title_or_the_stand_in(
    services: Services, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Regression: an emoji, curly quotes, a trailing ellipsis and ALL CAPS stayed in the
    # title, and an answer that was nearly JSON (a trailing comma, single quotes) lost
    # its title to the offline keywords.
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    manager = services.conversations
    try:
        for answer, title, topics in ANSWERS:
            conv = (await manager.create("web")).id
            for n in range(1, 5):
                await manager.append_turn(conv, "user", f"Shop server launch step {n}?")
                await manager.append_turn(conv, "assistant", f"Step {n}: check the load.")
            fake_api.push_text(answer)
            asked = len(fake_api.requests)
            await manager.append_turn(conv, "user", "And the DNS for the launch?")
            await lifecycle.settle()
            assert len(fake_api.requests) == asked + 1, answer  # exactly once, at turn 5
            assert NAMING_SYSTEM in str(fake_api.requests[-1].body["system"])
            rec = await manager.require(conv)
            assert rec.title, answer
            assert 1 <= len(rec.title.split()) <= 6 and len(rec.title) <= 80, rec.title
            if title is None:
                assert rec.last_named_turn == 0, answer  # a stand-in, owed to the model
                continue
            assert (rec.title, rec.last_named_turn) == (title, 5), answer
            assert rec.topics == (topics or rec.topics) and rec.topics, answer
            assert all(t == t.lower() and " " not in t for t in rec.topics), rec.topics
    finally:
        await lifecycle.stop(1)


def test_a_title_loses_emoji_curly_quotes_and_shouting() -> None:
    assert clean_title("👩\u200d💻 Coding Session 🇫🇷") == "Coding Session"
    assert clean_title("«Reise nach Paris»") == "Reise Nach Paris"
    assert clean_title("NAS BACKUP PLAN") == "NAS Backup Plan"  # short words: acronyms
    assert clean_title("Plan for the trip –") == "Plan for the Trip"
    assert clean_title("東京 旅行 計画") == "東京 旅行 計画"
    assert clean_title("Q3 Budget Review") == "Q3 Budget Review"


def test_an_answer_that_is_nearly_json_keeps_its_fields() -> None:
    text = '{"title": "Server \\"Prod\\" Check", "topics": ["a", "b"], "suggestSplit": true,}'
    assert parse_naming(text) is None
    assert salvage_naming(text) == {
        "title": 'Server "Prod" Check',
        "topics": ["a", "b"],
        "suggestSplit": True,
    }
    assert salvage_naming("no title here") is None


async def test_a_rename_while_the_naming_request_is_in_flight_wins(
    tmp_path: Path, clock: ManualClock
) -> None:
    async with GatedAPI(NAMING_SYSTEM) as fake:
        config = claude_config(tmp_path, fake.base_url)
        services = await open_claude(config)
        lifecycle = Lifecycle(config, services, clock=clock)
        await lifecycle.start()
        manager = services.conversations
        try:
            conv = (await manager.create("web")).id
            for n in range(1, 6):
                await manager.append_turn(conv, "user", f"Shop server launch step {n}?")
                await manager.append_turn(conv, "assistant", f"Step {n}: check the load.")
            fake.push_text('{"title": "Server Launch Plan", "topics": ["launch"]}')
            await asyncio.wait_for(fake.held.wait(), 60)  # the naming request is in flight
            await manager.rename(conv, "Anna's shop")
            fake.gate.set()
            await lifecycle.settle()
            rec = await manager.require(conv)
            assert (rec.title, rec.manually_named) == ("Anna's shop", True)
            # Ten turns later an idle pass re-names: never over the manual title either.
            for n in range(6, 16):
                await manager.append_turn(conv, "user", f"Shop server launch step {n}?")
            fake.push_text("Notes on the launch.")
            fake.push_text('{"title": "Server Launch Plan", "topics": ["launch"]}')
            clock.advance(600)
            await lifecycle.run_due()
            assert (await manager.require(conv)).title == "Anna's shop"
        finally:
            fake.gate.set()
            await lifecycle.stop(1)
            await close_services(services)
