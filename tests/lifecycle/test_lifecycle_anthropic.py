"""The lifecycle over the real core (``open_services``) and the real Claude brain, whose
SDK talks HTTP to the local fake Messages API: the ``haiku`` alias, an outage and its
retry on the sweep, naming from the model's JSON."""

from __future__ import annotations

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.base import UtilityModel
from bot.brain.cost import summarize_costs
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.prompts import ABBREVIATION_SYSTEM, NAMING_SYSTEM
from bot.services import Services


@pytest.fixture
def services(claude_services: Services) -> Services:
    return claude_services


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


async def test_notes_and_naming_are_counted_in_the_conversations_cost(
    services: Services, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Regression: the haiku calls that write a conversation's title and notes were paid
    # for but recorded nowhere: /status and the dashboard showed only replies and
    # compressions, less than was spent.
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    try:
        manager = services.conversations
        conv = (await manager.create("web")).id
        for n in range(1, 5):
            await manager.append_turn(conv, "user", f"Should the NAS use RAID-{n}?")
            await manager.append_turn(conv, "assistant", f"RAID-{n} trades space for safety.")
        fake_api.push_text(
            '{"title": "NAS RAID choice", "topics": ["nas"]}', input_tokens=800, output_tokens=40
        )
        await manager.append_turn(conv, "user", "Let's settle on RAID-6 then.")
        await lifecycle.settle()
        fake_api.push_text("User chose RAID-6.", input_tokens=1200, output_tokens=60)
        clock.advance(600)
        await lifecycle.run_due()
        lines = manager.read_lines(conv)
        (named,) = [ln for ln in lines if ln.get("event") == "title_assigned"]
        assert named["usage"] == {"input": 800, "output": 40}
        assert named["cost"] == (800 * 1.0 + 40 * 5.0) / 1e6
        (noted,) = [ln for ln in lines if ln.get("event") == "abbreviation"]
        assert noted["usage"] == {"input": 1200, "output": 60}
        total = summarize_costs(lines)
        assert (total.input_tokens, total.output_tokens) == (2000, 100)
        assert total.cost == pytest.approx((2000 * 1.0 + 100 * 5.0) / 1e6)
        rec = await manager.require(conv)  # what /status and the dashboard show
        assert (rec.tokens_in, rec.tokens_out) == (2000, 100)
        assert rec.cost_total == pytest.approx(total.cost)
    finally:
        await lifecycle.stop(1)


async def test_notes_and_titles_cut_at_max_tokens_are_asked_again_with_room(
    services: Services, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    # Regression: the one-shot calls ignored their stop reason. Notes cut at
    # abbreviation_max_tokens (200 words of German or Russian pass 400 tokens) were stored
    # mid-sentence, and a naming answer cut inside its JSON was no JSON: offline title.
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    try:
        manager = services.conversations
        conv = (await manager.create("web")).id
        for n in range(1, 5):
            await manager.append_turn(conv, "user", f"Soll das NAS RAID-{n} nutzen?")
            await manager.append_turn(
                conv, "assistant", f"RAID-{n} tauscht Platz gegen Sicherheit."
            )
        fake_api.push(
            Scripted(
                [Block("text", text='{"title": "NAS RAID Wahl", "topics": ["na')],
                stop_reason="max_tokens",
                output_tokens=200,
            )
        )
        fake_api.push_text('{"title": "NAS RAID Wahl", "topics": ["nas", "raid"]}')
        await manager.append_turn(conv, "user", "Dann nehmen wir RAID-6.")
        await lifecycle.settle()
        first, second = fake_api.requests[-2].body, fake_api.requests[-1].body
        assert second["max_tokens"] > first["max_tokens"]
        rec = await manager.require(conv)
        assert rec.title == "NAS RAID Wahl" and rec.topics == ["nas", "raid"]

        fake_api.push(
            Scripted(
                [Block("text", text="User entschied sich nach dem Vergleich von RAID-1 bis")],
                stop_reason="max_tokens",
                output_tokens=400,
            )
        )
        fake_api.push_text(
            "User entschied sich nach dem Vergleich von RAID-1 bis RAID-4 für RAID-6."
        )
        clock.advance(600)
        await lifecycle.run_due()
        rec = await manager.require(conv)
        assert rec.abbreviation == (
            "User entschied sich nach dem Vergleich von RAID-1 bis RAID-4 für RAID-6."
        )
        assert fake_api.requests[-1].body["max_tokens"] == 2 * (
            services.config.conversations.abbreviation_max_tokens
        )
        (noted,) = [ln for ln in manager.read_lines(conv) if ln.get("event") == "abbreviation"]
        assert noted["usage"]["output"] >= 400  # the cut answer was paid for too
    finally:
        await lifecycle.stop(1)
