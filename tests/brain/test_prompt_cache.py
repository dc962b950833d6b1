"""Prompt caching (bot.brain.prompt_cache): the breakpoints the owner's requests carry,
against the fake Messages API counting cache writes and reads as the API does.

Regression: no request carried ``cache_control``, so every tool round of a reply and
every next message paid the whole system prompt and history at the full input price.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from anthropic import AsyncAnthropic

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI, RecordedRequest
from bot.bench.fakes.anthropic_cache import PromptCache
from bot.brain.anthropic import AnthropicBrain
from bot.brain.base import BrainReply, BrainRequest
from bot.brain.prompt_cache import breakpoints, with_breakpoints
from bot.config import AppConfig
from tests.brain.conftest import big, big_exchanges, make_config, owner_request, seed_conversation

CACHE = {"type": "ephemeral"}


class Now:
    """The brain's wall clock, moved by the test."""

    def __init__(self) -> None:
        self.value = datetime(2026, 11, 27, 18, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.value


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(prompt_cache=True) as fake:
        yield fake


def cached_brain(config: AppConfig, services: Any, now: Now) -> AnthropicBrain:
    client = AsyncAnthropic(api_key="test-key", base_url=config.brain.base_url, max_retries=0)
    return AnthropicBrain(config, services, client, now=now)


@pytest.fixture
async def brain(config: AppConfig, core: SimpleNamespace) -> AsyncIterator[AnthropicBrain]:
    b = cached_brain(config, core, Now())
    yield b
    await b.client.close()


def marked_blocks(request: RecordedRequest) -> list[tuple[str, str]]:
    """(where, block type) of each block with a breakpoint: "system", or the role."""
    found = [("system", b["type"]) for b in request.body["system"] if "cache_control" in b]
    for message in request.body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            found += [(message["role"], b["type"]) for b in content if "cache_control" in b]
    return found


def last_blocks(request: RecordedRequest) -> list[dict[str, Any]]:
    content = request.body["messages"][-1]["content"]
    assert isinstance(content, list)
    return list(content)


async def answer(brain: AnthropicBrain, core: SimpleNamespace, conv: str, text: str) -> BrainReply:
    """The owner's next message ``text`` in ``conv`` (stored first, as the router does)
    and its reply (stored after)."""
    await core.conversations.append_turn(conv, "user", text)
    reply = await brain.reply(owner_request(text, conv))
    await core.conversations.append_turn(conv, "assistant", reply.text)
    return reply


async def test_a_first_request_marks_the_system_prompt_and_the_newest_message(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, big_exchanges(2))
    fake_api.push_text("Hi.")
    await answer(brain, core, conv, "hello there")
    request = fake_api.requests[0]
    assert marked_blocks(request) == [("system", "text"), ("user", "text")]
    text, clock = last_blocks(request)
    assert text == {"type": "text", "text": "hello there", "cache_control": CACHE}
    # the clock after the breakpoint, and not in the system prompt (see the next test)
    assert clock == {
        "type": "text",
        "text": "(Current date and time: Friday 27 November 2026, "
        "19:00 (Europe/Berlin, UTC+01:00).)",
    }
    assert "19:00" not in request.body["system"][0]["text"]


async def test_a_tool_round_reads_the_prompt_so_far_from_the_cache(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, big_exchanges(2))
    fake_api.push_tool_use("search_conversations", {"query": "boiler"})
    fake_api.push_text("Found nothing.")
    reply = await answer(brain, core, conv, "what about the boiler?")
    first, second = fake_api.requests
    assert marked_blocks(second) == [("system", "text"), ("user", "text"), ("user", "tool_result")]
    # the newest owner message keeps its breakpoint on its text, not on the clock note
    assert "cache_control" in second.body["messages"][-3]["content"][0]
    assert "cache_control" not in second.body["messages"][-3]["content"][1]
    # the second round reads all the first one wrote (replayed: the fake's own counts)
    cache = PromptCache()
    counts = [cache.usage(first.body), cache.usage(second.body)]
    assert counts[1]["cache_read_input_tokens"] == counts[0]["cache_creation_input_tokens"] > 0
    usage = reply.usage
    assert usage.cache_read == counts[1]["cache_read_input_tokens"]
    assert usage.cache_write == sum(c["cache_creation_input_tokens"] for c in counts)
    # billed at the cache's prices (sonnet: 3 in, 15 out; 3.75 a cache write, 0.30 a read)
    expected = usage.input * 3 + usage.cache_write * 3.75 + usage.cache_read * 0.3
    assert reply.cost == pytest.approx((expected + usage.output * 15) / 1e6)
    assert first.body["system"] == second.body["system"]


async def test_the_next_message_reads_the_conversation_from_the_cache(
    config: AppConfig, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    now = Now()
    brain = cached_brain(config, core, now)
    try:
        conv = await seed_conversation(core, big_exchanges(3))
        fake_api.push_text("First answer.")
        first = await answer(brain, core, conv, big(4, "user"))
        now.value += timedelta(minutes=2)  # the clock moved on: the prefix did not
        fake_api.push_text("Second answer.")
        second = await answer(brain, core, conv, "and then?")
    finally:
        await brain.client.close()
    assert first.usage.cache_read == 0
    # everything the first request wrote is read back: system, tools, the whole history
    assert second.usage.cache_read == first.usage.cache_write
    assert second.usage.cache_write < first.usage.cache_write / 4  # its new turns only
    assert marked_blocks(fake_api.requests[1]) == [("system", "text"), ("user", "text")]


async def test_no_breakpoints_with_the_switch_off(
    tmp_path: Path, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    config = make_config(tmp_path, fake_api, prompt_cache=False)
    brain = cached_brain(config, core, Now())
    try:
        conv = await seed_conversation(core, big_exchanges(2))
        fake_api.push_tool_use("search_conversations", {"query": "boiler"})
        fake_api.push_text("Found nothing.")
        reply = await answer(brain, core, conv, "what about the boiler?")
    finally:
        await brain.client.close()
    assert all("cache_control" not in r.text for r in fake_api.requests)
    assert "19:00" in fake_api.requests[0].body["system"]  # the clock where it was
    assert fake_api.requests[0].body["messages"][-1]["content"] == "what about the boiler?"
    assert reply.usage.cache_read == reply.usage.cache_write == 0


async def test_a_restricted_reply_shares_no_cache_prefix(
    brain: AnthropicBrain, fake_api: FakeAnthropicAPI
) -> None:
    fake_api.push_text("Hello.")
    request = BrainRequest(
        profile="restricted", channel="telegram", text="hi", model_alias="sonnet", scope="Say hi."
    )
    reply = await brain.reply(request)
    body = fake_api.requests[0].body
    assert "cache_control" not in fake_api.requests[0].text and "tools" not in body
    assert reply.usage.cache_read == 0


def test_breakpoints_skip_thinking_and_empty_text_blocks() -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "s"}
    params = {
        "system": "You help.",
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "text", "text": "b"}, thinking]},
        ],
    }
    marked = with_breakpoints(params, params["messages"][0])
    assert marked["messages"][1]["content"] == [
        {"type": "text", "text": "b", "cache_control": CACHE},
        thinking,
    ]
    assert marked["messages"][0]["content"] == [
        {"type": "text", "text": "a", "cache_control": CACHE}
    ]
    assert breakpoints(marked) == 3
    assert params["messages"][0]["content"] == "a"  # the loop's own messages stay unmarked
    empty = {
        "system": "",
        "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
    }
    assert breakpoints(with_breakpoints(empty)) == 0


def test_the_fake_refuses_what_the_api_refuses() -> None:
    cache = PromptCache()
    five = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": str(n), "cache_control": CACHE} for n in range(5)
                ],
            }
        ]
    }
    assert "maximum of 4" in str(cache.problem(five))
    empty = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "", "cache_control": CACHE}]}
        ]
    }
    assert "empty text" in str(cache.problem(empty))


async def conversation_cost(tmp_path: Path, core: SimpleNamespace, cache: bool) -> float:
    """The cost of ten owner messages in one conversation (every third with a tool round),
    two minutes apart, with ``brain.prompt_cache`` ``cache``: the fake counts the cache
    as the API does."""
    async with FakeAnthropicAPI(fallback="echo", prompt_cache=True) as fake:
        config = make_config(tmp_path, fake, prompt_cache=cache)
        now = Now()
        brain = cached_brain(config, core, now)
        total = 0.0
        try:
            conv = await seed_conversation(core, [])
            for n in range(1, 11):
                if n % 3 == 0:
                    fake.push_tool_use("search_conversations", {"query": f"topic {n}"})
                reply = await answer(brain, core, conv, big(n, "user"))
                total += reply.cost or 0.0
                now.value += timedelta(minutes=2)
        finally:
            await brain.client.close()
    return total


async def test_a_cached_conversation_costs_less(
    tmp_path: Path, core: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    cached = await conversation_cost(tmp_path / "on", core, cache=True)
    uncached = await conversation_cost(tmp_path / "off", core, cache=False)
    with capsys.disabled():
        print(f"\n10 messages: ${cached:.6f} with prompt_cache, ${uncached:.6f} without")
    assert 0 < cached < uncached
