"""A reply stopped mid-stream still reports what its model calls cost (bot.brain.base.Spend)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.base import BrainRequest, Spend
from tests.brain.conftest import Deltas, make_brain, make_config, seed_conversation


async def test_a_stopped_reply_keeps_the_tokens_its_calls_spent(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Regression: the engine recorded a stopped reply with no usage and no cost, though
    # the calls before the stop (a tool round, the stream cut short) were billed.
    config = make_config(tmp_path, fake_api, request_timeout=60)
    brain = make_brain(config, core)
    try:
        conv = await seed_conversation(core, [("user", "what did the plumber quote?")])
        fake_api.push_tool_use(
            "search_conversations", {"query": "plumber"}, input_tokens=500, output_tokens=40
        )
        # the second call starts (message_start: 700 input tokens), then only pings
        fake_api.push(Scripted([Block("text", text="never")], input_tokens=700, ping_seconds=30))
        spend = Spend()
        request = BrainRequest(
            profile="owner",
            channel="web",
            text="what did the plumber quote?",
            model_alias="sonnet",
            conversation_id=conv,
            spend=spend,
        )
        task = asyncio.ensure_future(brain.reply(request, Deltas()))
        for _ in range(200):
            if len(fake_api.requests) == 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.4)  # message_start of the second call has arrived
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert spend.usage.input == 1200  # both calls' input, exactly
        assert spend.usage.output >= 40
        assert spend.cost is not None and spend.cost > 0
    finally:
        await brain.client.close()
