"""Cost and usage with prompt caching's tokens: written and read cache tokens are no part
of the API's ``input_tokens`` and are billed at their own prices."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.base import BrainReply, BrainRequest, Usage
from bot.brain.cost import cost_usd, summarize_costs, tracking
from bot.config import AppConfig
from bot.config.model import PriceConfig
from tests.brain.conftest import seed_conversation


def cached(text: str, write: int, read: int) -> Scripted:
    return Scripted(
        [Block("text", text=text)],
        input_tokens=100,
        output_tokens=50,
        cache_write_tokens=write,
        cache_read_tokens=read,
    )


async def cached_reply(
    brain: AnthropicBrain, core: SimpleNamespace, fake: FakeAnthropicAPI, alias: str, read: int
) -> BrainReply:
    """An owner reply of ``alias`` whose answer counts 2,000 cache writes (sonnet) or
    none (else), and ``read`` cache reads."""
    conv = await seed_conversation(core, [("user", "hello")])
    fake.push(cached("Hi.", write=2000 if alias == "sonnet" else 0, read=read))
    request = BrainRequest(
        profile="owner", channel="web", text="hello", model_alias=alias, conversation_id=conv
    )
    return await brain.reply(request)


async def test_a_cached_reply_is_billed_for_its_cache_tokens(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: only input_tokens was read, so a reply whose prompt came from the
    # cache was recorded at the price of its 100 uncached tokens.
    reply = await cached_reply(brain, core, fake_api, "sonnet", read=30000)
    assert fake_api.requests[-1].stream  # the counts come from the stream's events
    assert reply.usage == Usage(100, 50, cache_write=2000, cache_read=30000)
    # sonnet: 3 in, 15 out; so 3.75 a cache write, 0.30 a cache read
    assert reply.cost == pytest.approx((100 * 3 + 2000 * 3.75 + 30000 * 0.3 + 50 * 15) / 1e6)


async def test_a_one_shot_call_is_billed_for_its_cache_tokens(
    brain: AnthropicBrain, fake_api: FakeAnthropicAPI
) -> None:
    fake_api.push(cached("Notes.", write=0, read=4000))
    with tracking() as spent:
        await brain.complete(system="s", prompt="p")
    assert not fake_api.requests[-1].stream
    assert spent.usage == Usage(100, 50, cache_read=4000)
    assert spent.fields()["usage"] == {"input": 100, "output": 50, "cacheRead": 4000}
    assert spent.cost == pytest.approx((100 * 1 + 4000 * 0.1 + 50 * 5) / 1e6)  # haiku


async def test_stored_cache_tokens_count_in_the_sums(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    from bot.reply_writes import usage_fields  # the fields the reply's turn is written with

    reply = await cached_reply(brain, core, fake_api, "haiku", read=900)
    conv = (await core.conversations.list())[0].id
    assert reply.usage is not None
    fields = usage_fields(reply.usage)
    assert fields == {"input": 100, "output": 50, "cacheRead": 900}
    manager = core.conversations
    await manager.append_turn(conv, "assistant", reply.text, usage=fields, cost=reply.cost)
    summary = summarize_costs(manager.read_lines(conv))
    assert (summary.input_tokens, summary.output_tokens) == (1000, 50)
    assert summary.cost == pytest.approx((100 * 1 + 900 * 0.1 + 50 * 5) / 1e6)
    rec = await manager.get(conv)
    assert (rec.tokens_in, rec.tokens_out) == (1000, 50)  # the index's sums agree


def test_configured_cache_prices_win_over_the_multiples(config: AppConfig) -> None:
    config.models.prices["sonnet"] = PriceConfig(input=3, output=15, cache_write=6, cache_read=1)
    usage = Usage(0, 0, cache_write=1_000_000, cache_read=1_000_000)
    assert cost_usd(config, "sonnet", usage) == pytest.approx(7.0)
