"""What a reply cost, over every attempt the brain made for it (bot/reply_generation.py
``all_attempts``)."""

from __future__ import annotations

from pathlib import Path

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.events import InboundMessage
from bot.services import close_services
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
