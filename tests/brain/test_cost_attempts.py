"""What a reply cost, over every attempt the brain made for it (bot/reply_generation.py
``all_attempts``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.base import BrainRequest, BrainUnavailable, Spend
from bot.events import InboundMessage
from bot.services import close_services
from tests.brain.conftest import Deltas, seed_conversation
from tests.brain.test_router_e2e import e2e_config, start, wait_for


async def test_a_reply_redone_after_an_outage_keeps_the_cost_of_its_first_attempt(
    tmp_path: Path,
) -> None:
    # Regression (session 39): round 1 of the tool loop was paid, round 2 met an outage
    # past the retry budget, and the reply was made again from the start: the turn and
    # the conversation's cost held the last attempt's calls only (a third of it gone).
    async with FakeAnthropicAPI() as fake:
        services = await start(e2e_config(tmp_path, fake))
        try:
            search = Block("tool_use", name="search_conversations", input={"query": "boiler"})

            def first(body: object) -> Scripted:
                fake.down_for(0.6)  # the next call: 529 past the 0.2 s retry budget
                return Scripted([search], input_tokens=1000, output_tokens=50)

            fake.push(first)
            fake.push(Scripted([search], input_tokens=1000, output_tokens=50))
            fake.push(
                Scripted(
                    [Block("text", text="The boiler was serviced in May.")],
                    input_tokens=1200,
                    output_tokens=30,
                )
            )
            await services.router.deliver(
                InboundMessage(
                    channel="web",
                    sender_id="owner",
                    text="When was the boiler serviced?",
                    message_id="m1",
                    chat_id="dashboard",
                )
            )
            web = services.channels["web"]
            await wait_for(lambda: any(m.kind == "reply" for m in web.sent), timeout=20)
            conv = next(m for m in web.sent if m.kind == "reply").conversation_id
            assert conv is not None
            turn = [
                line
                for line in services.conversations.read_lines(conv)
                if line.get("role") == "assistant"
            ][-1]
            record = await services.conversations.get(conv)
            assert record is not None
            # three calls paid: 1000/50, then 1000/50 and 1200/30 (sonnet: $3 / $15 per M)
            assert turn["usage"]["input"] == record.tokens_in == 3200
            assert turn["usage"]["output"] == record.tokens_out == 130
            assert abs(record.cost_total - (3200 * 3 + 130 * 15) / 1e6) < 1e-9
        finally:
            await close_services(services)


async def test_a_stream_that_failed_midway_and_was_retried_is_counted(tmp_path: Path) -> None:
    # Regression (session 41): the first attempt's message_start (1000 input tokens) was
    # billed, then an overloaded error frame ended it and the retry answered. Only the
    # retry's message was accounted: the turn, the conversation's cost and /status
    # counted 1000 input tokens of the 2000 paid.
    async with FakeAnthropicAPI() as fake:
        services = await start(e2e_config(tmp_path, fake))
        try:
            chunks = ["The boiler ", "was serviced ", "in May."]
            text = "".join(chunks)
            fake.push(
                Scripted(
                    [Block("text", text=text, chunks=chunks)],
                    input_tokens=1000,
                    output_tokens=30,
                    fail_after_deltas=2,
                )
            )
            fake.push(
                Scripted(
                    [Block("text", text=text, chunks=chunks)], input_tokens=1000, output_tokens=30
                )
            )
            await services.router.deliver(
                InboundMessage(
                    channel="web",
                    sender_id="owner",
                    text="When was the boiler serviced?",
                    message_id="m1",
                    chat_id="dashboard",
                )
            )
            web = services.channels["web"]
            await wait_for(lambda: any(m.kind == "reply" for m in web.sent), timeout=20)
            reply = next(m for m in web.sent if m.kind == "reply")
            assert reply.text == text
            conv = reply.conversation_id
            assert conv is not None
            turn = [
                line
                for line in services.conversations.read_lines(conv)
                if line.get("role") == "assistant"
            ][-1]
            record = await services.conversations.get(conv)
            assert record is not None
            assert len(fake.requests) == 2
            # both attempts' input, exactly once each; the failed one's output at least
            # what it streamed ("The boiler was serviced ": 6 tokens estimated)
            assert turn["usage"]["input"] == record.tokens_in == 2000
            assert turn["usage"]["output"] == record.tokens_out
            assert 30 + 6 <= record.tokens_out < 30 + 30
            expected = (2000 * 3 + record.tokens_out * 15) / 1e6  # sonnet: $3 / $15 per M
            assert abs(record.cost_total - expected) < 1e-9
            assert abs(turn["cost"] - expected) < 1e-9
        finally:
            await close_services(services)


async def test_attempts_that_failed_midway_are_counted_when_the_reply_waits(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Every attempt is billed its input (message_start) and breaks after a few words,
    # until the retry budget runs out: the reply waits for the model (BrainUnavailable),
    # and the request's running total, which the reply made later is recorded with,
    # holds every attempt (before session 41: none of them).
    conv = await seed_conversation(core, [("user", "hello")])
    for _ in range(40):
        fake_api.push(
            Scripted(
                [Block("text", text="Hello there, Robin.")], input_tokens=700, fail_after_deltas=1
            )
        )
    spend = Spend()
    request = BrainRequest(
        profile="owner",
        channel="web",
        text="hello",
        model_alias="sonnet",
        conversation_id=conv,
        spend=spend,
    )
    with pytest.raises(BrainUnavailable):
        await brain.reply(request, Deltas())
    attempts = len(fake_api.requests)
    assert attempts >= 2
    assert spend.usage.input == 700 * attempts
    assert spend.cost is not None and spend.cost > 0
