"""Compression fires when system prompt + turns + tools pass the budget, summary once.

Regression (session 40): the trigger added the system prompt (which holds the summary)
and ``WorkingContext.tokens()`` (summary + turns): the summary was counted twice, so a
conversation was compressed at the budget minus the summary's size, earlier with every
longer summary.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.anthropic import AnthropicBrain
from bot.brain.tokens import estimate_tokens
from bot.labels import title_for_model
from tests.brain.conftest import ManualClock, make_brain, make_config, owner_request

SUMMARY = " ".join(f"The owner mentioned fact number {n}." for n in range(300))  # ~2,500


async def request_size(brain: AnthropicBrain, conv: str, text: str) -> int:
    """What the first call of a reply to ``text`` takes, the summary counted once: the
    system prompt (with the summary), the turns and the tool definitions."""
    brain.contexts.moved(conv, 4)  # the session since the last compression (at turn 3)
    lines = await asyncio.to_thread(brain.services.conversations.read_lines, conv)
    record = await brain.services.conversations.get(conv)
    ctx = brain.contexts.assemble(conv, lines, text)
    system = brain._owner_system(owner_request(text, conv), ctx, title_for_model(record))
    assert ctx.summary == SUMMARY and SUMMARY in system
    turns = sum(t.tokens for t in ctx.turns)
    return estimate_tokens(system) + turns + brain._tools_tokens


async def test_compression_fires_past_the_budget_not_the_budget_minus_the_summary(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    manager = core.conversations
    rec = await manager.create("web")
    for n in range(1, 4):  # summarised
        await manager.append_turn(rec.id, "user", f"old question {n}")
        await manager.append_turn(rec.id, "assistant", f"old answer {n}")
    await manager.append_event(rec.id, "compression", compressedThrough=3, summary=SUMMARY)
    for n in range(4, 9):
        await manager.append_turn(rec.id, "user", f"user turn {n}: what about item {n}?")
        await manager.append_turn(rec.id, "assistant", f"assistant turn {n}: item {n} is done.")
    text = "user turn 9: and the last one?"
    await manager.append_turn(rec.id, "user", text)

    probe = make_brain(make_config(tmp_path, fake_api, working_context_turns=2), core)
    size = await request_size(probe, rec.id, text)
    await probe.client.close()
    assert size < 2 * estimate_tokens(SUMMARY)  # the summary is most of it

    # at the budget exactly: no compression (counted twice, it was ~2,500 tokens over)
    config = make_config(
        tmp_path, fake_api, compression_budget_tokens=size, working_context_turns=2
    )
    brain = make_brain(config, core, ManualClock())
    brain.contexts.moved(rec.id, 4)
    try:
        fake_api.push_text("reply 9")
        await brain.reply(owner_request(text, rec.id))
        assert [r.body["model"] for r in fake_api.requests] == ["claude-sonnet-4-6"]
        assert "user turn 4:" in str(fake_api.requests[0].body["messages"])
    finally:
        await brain.client.close()

    # one token past it: compressed, the summary and the older turns summarised again
    config = make_config(
        tmp_path, fake_api, compression_budget_tokens=size - 1, working_context_turns=2
    )
    brain = make_brain(config, core, ManualClock())
    brain.contexts.moved(rec.id, 4)
    try:
        fake_api.push_text("- The owner mentioned facts 0-299; items 4-7 are done.")
        fake_api.push_text("reply 9")
        await brain.reply(owner_request(text, rec.id))
        models = [r.body["model"] for r in fake_api.requests[1:]]
        assert models == ["claude-haiku-4-5", "claude-sonnet-4-6"]
    finally:
        await brain.client.close()
