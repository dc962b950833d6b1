"""A request the API refuses as too long ("prompt is too long: N tokens > M maximum"):
the brain shrinks the context and asks once more, and says so plainly if that fails.

Regression: the estimate is not the model's count (a conversation in a script the
estimate undercounts, a long system prompt of notes), and a 400 "prompt is too long"
became "the model service rejected the request (400)" on this reply and on every later
one of the conversation, since nothing made the context any smaller."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from tests.brain.conftest import (
    Deltas,
    ManualClock,
    big_exchanges,
    make_brain,
    make_config,
    owner_request,
    seed_conversation,
    uncached,
)

HAIKU = "claude-haiku-4-5"


def model_with_window(limit: int, *, summary: str = "SUMMARY of the early turns") -> Any:
    """A model whose window is ``limit`` characters of request (in "tokens" = chars)."""

    def respond(body: dict[str, Any]) -> Scripted:
        size = len(json.dumps({k: body.get(k) for k in ("system", "messages", "tools")}))
        if size > limit:
            message = f"prompt is too long: {size} tokens > {limit} maximum"
            return Scripted(status=400, error_message=message)
        if body["model"] == HAIKU:
            return Scripted([Block("text", text=summary)])
        return Scripted([Block("text", text="answered")])

    return respond


@pytest.fixture
async def brain(tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace) -> AsyncIterator[Any]:
    made = make_brain(make_config(tmp_path, fake_api), core, ManualClock())
    yield made
    await made.client.close()


async def long_conversation(core: SimpleNamespace) -> str:
    """Eight long exchanges, then "and now?" waiting for its reply."""
    return await seed_conversation(core, [*big_exchanges(), ("user", "and now?")])


async def test_a_prompt_too_long_is_shrunk_and_asked_again(
    brain: Any, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Under our budget by the estimate (about 2,000 tokens of 24,000), over the model's.
    conv = await long_conversation(core)
    for _ in range(4):
        fake_api.push(model_with_window(9000))
    deltas = Deltas()
    reply = await brain.reply(owner_request("and now?", conv), deltas)
    assert reply.text == deltas.text == "answered"
    models = [uncached(r.body)["model"] for r in fake_api.requests]
    assert models == ["claude-sonnet-4-6", HAIKU, "claude-sonnet-4-6"]
    last = uncached(fake_api.requests[-1].body)
    assert "SUMMARY of the early turns" in last["system"]
    assert "user turn 1:" not in json.dumps(last["messages"])
    assert last["messages"][-1]["content"] == "and now?"
    # recorded: the next reply starts from the summary, not from the 400 again
    lines = core.conversations.read_lines(conv)
    assert any(line.get("event") == "compression" for line in lines)


async def test_without_a_summary_the_oldest_turns_are_left_out(
    brain: Any, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    conv = await long_conversation(core)
    fake_api.push(model_with_window(9000))
    fake_api.push(Scripted(status=400, error_message="no"))  # the summary cannot be had
    for _ in range(3):
        fake_api.push(model_with_window(9000))
    reply = await brain.reply(owner_request("and now?", conv))
    assert reply.text == "answered"
    last = uncached(fake_api.requests[-1].body)
    assert last["model"] == "claude-sonnet-4-6"
    assert last["messages"][-1]["content"] == "and now?"
    assert len(json.dumps(last["messages"])) < 9000


async def test_still_too_long_after_shrinking_says_so_once(
    brain: Any, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    for _ in range(4):
        fake_api.push(model_with_window(100))  # not even the system prompt fits
    reply = await brain.reply(owner_request("hello", conv))
    assert reply.extra == {"error": "too_long", "status": 400}
    assert "too long" in reply.text and "/new" in reply.text
    assert [uncached(r.body)["model"] for r in fake_api.requests] == ["claude-sonnet-4-6"] * 2
