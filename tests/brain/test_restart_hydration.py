"""After a restart the working context holds what it held before, or a summary of it.

Regression (session 40): hydration took seed 000's window alone (the last 20 turns or
8,000 tokens) after the summary's ``compressedThrough``. A chatty conversation of short
messages, never near the compression budget, had every turn in its context before a
restart and only the last 20 after it, with no summary of the others: the owner's fact of
turn 1 was gone from the context until the conversation passed the budget again,
hundreds of messages later (only ``fetch_context`` could read it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from anthropic import AsyncAnthropic

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.anthropic import AnthropicBrain, FlushRequest
from bot.brain.base import BrainReply
from bot.brain.working_contexts import WorkingContexts
from bot.config import AppConfig
from bot.transcript import event_line, turn_line
from tests.brain.conftest import (
    ManualClock,
    big,
    make_brain,
    make_config,
    owner_request,
    seed_conversation,
    uncached,
)

FACT = "FACT: the door code for the cabin is 8152."


def chat(count: int) -> list[tuple[str, str]]:
    """``count`` short exchanges, the owner's fact in the first."""
    turns = [("user", FACT), ("assistant", "Noted, reply 1.")]
    for n in range(2, count + 1):
        turns += [("user", f"message {n}: next item, number {n}"), ("assistant", f"Noted {n}.")]
    return turns


async def answer(brain: AnthropicBrain, core: SimpleNamespace, conv: str, text: str) -> BrainReply:
    """The owner's next message (stored first, as the router does) and its reply."""
    await core.conversations.append_turn(conv, "user", text)
    reply = await brain.reply(owner_request(text, conv))
    await core.conversations.append_turn(conv, "assistant", reply.text)
    return reply


def summarising(fake: FakeAnthropicAPI) -> list[Any]:
    return [r for r in fake.requests if r.body["model"] == "claude-haiku-4-5"]


async def test_a_restart_keeps_every_turn_since_the_summary_when_they_fit(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api)  # default budgets: 24,000 / 8,000 / 20 turns
    conv = await seed_conversation(core, chat(60))
    brain = make_brain(config, core, ManualClock())  # a fresh process: cold hydration
    try:
        fake_api.push_text("Noted, 61.")
        await answer(brain, core, conv, "message 61: another small item")
        body = uncached(fake_api.requests[0].body)
        assert "8152" in str(body["messages"])  # turn 1, 60 turns back, still in context
        assert len(body["messages"]) == 121
        assert "not shown" not in body["system"]
        assert not summarising(fake_api)
    finally:
        await brain.client.close()


def test_hydration_starts_after_the_summary_when_the_turns_since_fit() -> None:
    lines: list[dict[str, Any]] = []
    for n in range(1, 41):
        lines += [turn_line("user", f"u{n}", n), turn_line("assistant", f"a{n}", n)]
        if n == 10:
            lines.append(event_line("compression", compressedThrough=10, summary="S"))
    seed = WorkingContexts(max_turns=20, max_tokens=8000, keep_tokens=4000)
    assert seed.assemble("c", lines).start_turn == 21  # seed 000's window alone
    ours = WorkingContexts(max_turns=20, max_tokens=8000, keep_tokens=4000, budget_tokens=24000)
    ctx = ours.assemble("c", lines)
    assert ctx.start_turn == 11 and ctx.unsummarised == 0
    tight = WorkingContexts(max_turns=20, max_tokens=8000, keep_tokens=4000, budget_tokens=200)
    ctx = tight.assemble("c", lines)  # over the budget: the window, the rest counted
    assert ctx.start_turn == 21 and ctx.unsummarised == 10


async def test_a_restart_over_the_budget_summarises_the_turns_it_leaves_out_at_once(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(
        tmp_path, fake_api, compression_budget_tokens=3000, working_context_tokens=1000
    )
    turns = [(role, big(n, role)) for n in range(1, 31) for role in ("user", "assistant")]
    turns[0] = ("user", f"{FACT} {big(1, 'user')}")
    conv = await seed_conversation(core, turns)
    flushes: list[FlushRequest] = []

    async def memory_flush(flush: FlushRequest) -> None:
        flushes.append(flush)

    services = SimpleNamespace(**vars(core), memory_flush=memory_flush)
    brain = make_brain(config, services, ManualClock())
    try:
        fake_api.push_text("- FACT: the cabin's door code is 8152.", input_tokens=5000)
        fake_api.push_text("reply 31")
        await answer(brain, core, conv, big(31, "user"))
        [summary_call] = summarising(fake_api)
        prompt = summary_call.body["messages"][0]["content"]
        assert "8152" in prompt and "[turn 1] Owner:" in prompt
        [event] = [ln for ln in core.conversations.read_lines(conv) if ln["type"] == "event"]
        start = brain.contexts.session_start(conv)
        assert start is not None and event["compressedThrough"] == start - 1
        assert f"[turn {start - 1}] Assistant:" in prompt
        assert f"[turn {start}]" not in prompt  # the window stays as it is
        assert event["usage"]["input"] == 5000 and event["cost"] > 0  # its cost recorded
        assert not flushes  # no turn of the context left it
        reply_body = uncached(fake_api.requests[-1].body)
        assert "door code is 8152" in reply_body["system"]
        assert reply_body["messages"][0]["content"].startswith(f"user turn {start}:")
        assert f"Turns 1-{start - 1} of this conversation are not shown" in reply_body["system"]

        # another restart: the summary and every turn after it, nothing summarised again
        again = make_brain(config, core, ManualClock())
        try:
            fake_api.push_text("reply 32")
            await answer(again, core, conv, "and now?")
            assert len(summarising(fake_api)) == 1
            body = uncached(fake_api.requests[-1].body)
            assert body["messages"][0]["content"].startswith(f"user turn {start}:")
        finally:
            await again.client.close()
    finally:
        await brain.client.close()


async def test_a_failed_summary_of_the_left_out_turns_is_tried_again_next_reply(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(
        tmp_path,
        fake_api,
        compression_budget_tokens=3000,
        working_context_tokens=1000,
        retry_budget_seconds=0,
    )
    turns = [(role, big(n, role)) for n in range(1, 31) for role in ("user", "assistant")]
    conv = await seed_conversation(core, turns)
    brain = make_brain(config, core, ManualClock())
    try:
        fake_api.push_text("I'm sorry, but I can't help with summarizing this conversation.")
        fake_api.push_text("reply 31")
        reply = await answer(brain, core, conv, "short one")
        assert reply.text == "reply 31"
        events = [ln for ln in core.conversations.read_lines(conv) if ln["type"] == "event"]
        assert [e["event"] for e in events] == ["compression_failed"]
        fake_api.push_text("- The owner and the assistant discussed lorem ipsum.")
        fake_api.push_text("reply 32")
        await answer(brain, core, conv, "short two")
        assert len(summarising(fake_api)) == 2
        events = [ln for ln in core.conversations.read_lines(conv) if ln["type"] == "event"]
        assert [e["event"] for e in events] == ["compression_failed", "compression"]
        assert "discussed lorem ipsum" in uncached(fake_api.requests[-1].body)["system"]
    finally:
        await brain.client.close()


def cached_brain(config: AppConfig, services: Any) -> AnthropicBrain:
    client = AsyncAnthropic(api_key="test-key", base_url=config.brain.base_url, max_retries=0)
    now = datetime(2026, 11, 27, 18, 0, tzinfo=UTC)
    return AnthropicBrain(config, services, client, now=lambda: now)


async def test_after_a_restart_the_next_message_reads_the_conversation_from_the_cache(
    tmp_path, core: SimpleNamespace
) -> None:
    # The context after a restart is the one before it: the same prefix, read from the
    # prompt cache (seed 000's window started elsewhere, with a "not shown" line in the
    # system prompt, and the whole prompt was written again).
    async with FakeAnthropicAPI(prompt_cache=True) as fake:
        config = make_config(tmp_path, fake)
        conv = await seed_conversation(core, chat(30))
        before = cached_brain(config, core)
        try:
            fake.push_text("Noted, 31.")
            await answer(before, core, conv, "message 31: one more")
        finally:
            await before.client.close()
        after = cached_brain(config, core)  # the restart
        try:
            fake.push_text("Noted, 32.")
            reply = await answer(after, core, conv, "message 32: and another")
        finally:
            await after.client.close()
    assert reply.usage is not None
    assert reply.usage.cache_read > 10 * reply.usage.cache_write
