"""A reply stopped mid-stream still reports what its model calls cost (bot.brain.base.Spend)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain import stream_message
from bot.brain.base import BrainRequest, Spend
from bot.brain.stream_message import accumulate_event
from tests.brain.conftest import Deltas, make_brain, make_config, seed_conversation
from tests.support import wait_until


async def test_a_stopped_reply_keeps_the_tokens_its_calls_spent(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the engine recorded a stopped reply with no usage and no cost, though
    # the calls before the stop (a tool round, the stream cut short) were billed.
    started: list[str] = []  # the events the engine's stream reader has taken in

    def accumulate(*, event: Any, **kwargs: Any) -> Any:
        started.append(event.type)
        return accumulate_event(event=event, **kwargs)

    monkeypatch.setattr(stream_message, "accumulate_event", accumulate)
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
        # Stopped once the second call's message_start (its 700 input tokens) has been
        # read by the client: before, a fixed 0.4 s after the request reached the fake
        # server, which a busy machine could outlast (the stop then came before it).
        await wait_until(lambda: started.count("message_start") == 2, what="2 message_starts")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert spend.usage.input == 1200  # both calls' input, exactly
        assert spend.usage.output >= 40
        assert spend.cost is not None and spend.cost > 0
    finally:
        await brain.client.close()
