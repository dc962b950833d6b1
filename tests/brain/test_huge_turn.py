"""One message larger than the whole working-context budget (a pasted 200 KB log).

Regression: the message was cut to ``brain.compression_budget_tokens`` itself, so with the
system prompt the context was over the budget for as long as the message was in it: each
reply compressed (a summarising call), the first follow-up summarised the log away
(the owner's "and what about the end of it?" was answered from a 300-word summary),
and the cut kept only the log's start (the error at its end was never shown)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.tokens import estimate_tokens
from tests.brain.conftest import (
    ManualClock,
    big_exchanges,
    make_brain,
    make_config,
    owner_request,
    seed_conversation,
    uncached,
)

HAIKU = "claude-haiku-4-5"
TAIL = "FATAL: checksum mismatch in block 77, giving up"


def pasted_log() -> str:
    """About 200 KB of log whose one useful line is the last."""
    lines = [f"2026-03-01T10:{n // 60 % 60:02d}:{n % 60:02d} INFO step {n} ok" for n in range(5500)]
    return "\n".join([*lines, TAIL]) + "\n"


def request_tokens(body: dict[str, Any]) -> int:
    """The estimate of what a request sends: system prompt, messages, tool definitions."""
    return estimate_tokens(body["system"]) + sum(
        estimate_tokens(json.dumps(body.get(k), ensure_ascii=False)) for k in ("messages", "tools")
    )


def model(body: dict[str, Any]) -> Scripted:
    if body["model"] == HAIKU:
        return Scripted([Block("text", text="SUMMARY of the early turns")])
    return Scripted([Block("text", text="answered")])


async def test_a_message_over_the_whole_budget_keeps_the_context_in_it(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api)  # the default budget: 24,000 tokens
    budget = config.brain.compression_budget_tokens
    brain = make_brain(config, core, ManualClock())
    log = pasted_log()
    assert len(log) > 200_000
    try:
        conv = await seed_conversation(core, [*big_exchanges(4), ("user", log)])
        for _ in range(10):
            fake_api.push(model)
        asked = [log, "what went wrong?", "and in which block?"]
        for n, text in enumerate(asked):
            if n:
                await core.conversations.append_turn(conv, "user", text)
            reply = await brain.reply(owner_request(text, conv))
            assert reply.text == "answered"
            await core.conversations.append_turn(conv, "assistant", reply.text)
        replies = [
            uncached(r.body) for r in fake_api.requests if uncached(r.body)["model"] != HAIKU
        ]
        summaries = [
            uncached(r.body) for r in fake_api.requests if uncached(r.body)["model"] == HAIKU
        ]
        assert len(replies) == 3
        for body in replies:
            assert request_tokens(body) <= budget, request_tokens(body)
            sent = str(body["messages"])
            # a useful cut: its start, and its end (where a log says what went wrong)
            assert "INFO step 0 ok" in sent and TAIL in sent
            assert "characters not shown" in sent
        # compressed once (the turns before the log), not again on each follow-up
        assert len(summaries) <= 1
    finally:
        await brain.client.close()
