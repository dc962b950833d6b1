"""Abbreviation through the real Claude brain and the local fake Messages API: what the
request holds for a very long conversation, and how overload and rate limits are
retried by the sweep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.config.model import ConversationsConfig
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.prompts import ABBREVIATION_SYSTEM
from bot.services import Services, close_services
from tests.brain.test_model_not_found import replies, say
from tests.brain.test_router_e2e import e2e_config, start, wait_for

from .claude_fakes import GatedAPI, claude_config, open_claude

BUDGET = 6000  # conversations.abbreviation_input_chars


@pytest.fixture
async def services(tmp_path: Path, fake_api: FakeAnthropicAPI) -> AsyncIterator[Services]:
    limits = ConversationsConfig(abbreviation_input_chars=BUDGET)
    s = await open_claude(claude_config(tmp_path, fake_api.base_url, conversations=limits))
    yield s
    await close_services(s)


async def chat(services: Services, turns: int, size: int = 200) -> str:
    manager = services.conversations
    conv = (await manager.create("web")).id
    for n in range(1, turns + 1):
        await manager.append_turn(conv, "user", f"Question {n} " + "about the NAS " * (size // 14))
        await manager.append_turn(conv, "assistant", f"Answer {n} " + "keep RAID-6 " * (size // 12))
    return conv


async def test_a_very_long_conversation_is_noted_from_a_bounded_input(
    services: Services, fake_api: FakeAnthropicAPI, lifecycle: Lifecycle, clock: ManualClock
) -> None:
    # 120 turns of some 6,000 characters each (720,000): the request holds the most
    # recent turns that fit the budget, each cut, and the previous notes, not the whole.
    conv = await chat(services, 120, size=3000)
    # The turn-5 naming runs in the background as chat() adds turns: done before the
    # fake is scripted, or (late, under load) it took the notes' answer, or failed after
    # the clock moved, which put the re-naming's retry after the second pass's notes.
    await lifecycle.settle()
    fake_api.push_text("User and Assistant compared RAID levels for the NAS; chose RAID-6.")
    clock.advance(600)
    await lifecycle.run_due()
    (body,) = [r.body for r in fake_api.requests if ABBREVIATION_SYSTEM in str(r.body["system"])]
    prompt = body["messages"][0]["content"]
    prompt = prompt if isinstance(prompt, str) else "".join(b["text"] for b in prompt)
    assert len(prompt) < 2 * BUDGET, len(prompt)
    assert "[120] User: Question 120" in prompt and "[1] User" not in prompt
    assert "only its most recent turns follow" in prompt
    rec = await services.conversations.require(conv)
    assert rec.abbreviated_turn == 120 and not rec.needs_abbreviation

    # More turns: the next notes fold the previous ones in, still bounded.
    await services.conversations.append_turn(conv, "user", "And the spare disk?")
    fake_api.push_text("User chose RAID-6 and a cold spare.")
    clock.advance(600)
    await lifecycle.run_due()
    # The abbreviation's request, not merely the last one: a re-naming may follow it in
    # the same pass (Flow 5 (h)), as it did under load when the turn-5 naming ran late.
    body = [r.body for r in fake_api.requests if ABBREVIATION_SYSTEM in str(r.body["system"])][-1]
    prompt = str(body["messages"][0]["content"])
    assert "compared RAID levels for the NAS; chose RAID-6" in prompt
    assert len(prompt) < 2 * BUDGET + 1000


async def test_overload_leaves_the_flag_and_the_next_sweep_asks_again(
    services: Services, fake_api: FakeAnthropicAPI, lifecycle: Lifecycle, clock: ManualClock
) -> None:
    conv = await chat(services, 2)
    fake_api.push_error(529, message="Overloaded")
    clock.advance(600)
    await lifecycle.run_due()
    rec = await services.conversations.require(conv)
    assert rec.needs_abbreviation and rec.abbreviation is None
    fake_api.push_text("User asked about the NAS; RAID-6 kept.")
    clock.advance(300)  # the sweep
    await lifecycle.run_due()
    rec = await services.conversations.require(conv)
    assert rec.abbreviation == "User asked about the NAS; RAID-6 kept."
    assert not rec.needs_abbreviation


async def test_a_rate_limit_asking_for_longer_than_a_sweep_is_honoured(
    services: Services, fake_api: FakeAnthropicAPI, lifecycle: Lifecycle, clock: ManualClock
) -> None:
    # Regression: a 429 asking for 15 minutes was asked again at the next sweep (5), and
    # the one after, each refused again.
    conv = await chat(services, 2)
    fake_api.push_error(429, retry_after=900, message="rate limited")
    clock.advance(600)
    await lifecycle.run_due()
    asked = len(fake_api.requests)
    assert (await services.conversations.require(conv)).needs_abbreviation
    for _ in range(2):
        clock.advance(300)
        await lifecycle.run_due()
    assert len(fake_api.requests) == asked  # within the 900 s: deferred, not asked
    fake_api.push_text("User asked about the NAS; RAID-6 kept.")
    clock.advance(300)
    await lifecycle.run_due()
    rec = await services.conversations.require(conv)
    assert rec.abbreviation == "User asked about the NAS; RAID-6 kept."
    assert not rec.needs_abbreviation


async def test_a_reply_goes_out_while_the_notes_of_its_conversation_are_slow(
    tmp_path: Path, clock: ManualClock
) -> None:
    async with GatedAPI(ABBREVIATION_SYSTEM) as fake:
        services = await start(e2e_config(tmp_path, fake))
        lifecycle = Lifecycle(services.config, services, clock=clock)
        await lifecycle.start()
        try:
            await say(services, "Which RAID level for the NAS?", "m1")
            await wait_for(lambda: len(replies(services)) == 1, timeout=60)
            (conv,) = [c.id for c in await services.conversations.list()]
            clock.advance(600)
            await lifecycle.timers.run_due()  # the idle timer: the notes are asked for
            await asyncio.wait_for(fake.held.wait(), 60)
            await say(services, "And the spare disk?", "m2")
            await wait_for(lambda: len(replies(services)) == 2, timeout=60)
            assert lifecycle.queue.current == conv and not fake.gate.is_set()
            assert "And the spare disk?" in replies(services)[1]  # the echo of the fake
            fake.gate.set()
            await lifecycle.settle()
            rec = await services.conversations.require(conv)
            assert rec.abbreviation and rec.abbreviated_turn < rec.turn_count  # owed again
        finally:
            fake.gate.set()
            await lifecycle.stop(1)
            await close_services(services)


NOTES = "User chose RAID-6 for the NAS; open: buy two disks."


@pytest.mark.parametrize(
    "answer",
    [
        f"Meeting notes: {NOTES}",
        f"**Summary:** {NOTES}",
        # Regression: these stayed at the head of the notes (shown, embedded)
        f"Here are the meeting notes for this conversation:\n\n{NOTES}",
        f"Here is a concise summary:\n{NOTES}",
        f"# Meeting Notes\n\n{NOTES}",
        f"## Summary of the conversation\n{NOTES}",
        f"Sure! Here are the notes you asked for:\n\n{NOTES}",  # (session 39)
    ],
)
async def test_a_preamble_before_the_notes_is_left_out(
    services: Services,
    fake_api: FakeAnthropicAPI,
    lifecycle: Lifecycle,
    clock: ManualClock,
    answer: str,
) -> None:
    conv = await chat(services, 2)
    fake_api.push_text(answer)
    clock.advance(600)
    await lifecycle.run_due()
    assert (await services.conversations.require(conv)).abbreviation == NOTES


async def test_notes_that_only_start_like_a_preamble_are_kept_whole(
    services: Services, fake_api: FakeAnthropicAPI, lifecycle: Lifecycle, clock: ManualClock
) -> None:
    conv = await chat(services, 2)
    answer = f"## NAS\nNotes on RAID: {NOTES}"  # a subject heading, a label of content
    fake_api.push_text(answer)
    clock.advance(600)
    await lifecycle.run_due()
    assert (await services.conversations.require(conv)).abbreviation == answer
