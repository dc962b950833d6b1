"""A summary cut at its max_tokens is not recorded as the conversation's summary.

Regression: the summarising call runs with ``max_tokens`` 1024 and its answer was recorded
whatever its stop reason. A summary that ran out of room (a long conversation, a language
that costs more tokens per word) stopped mid-sentence and was appended as the
``compression`` event: the older turns it had not reached left the context for good, on
this reply and every later one, with nothing in their place.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.base import BrainRequest
from bot.brain.cost import summarize_costs
from tests.brain.conftest import (
    ManualClock,
    big,
    big_exchanges,
    make_brain,
    make_config,
    nine_big_turns,
    owner_request,
    seed_conversation,
)


def events(core: SimpleNamespace, conv: str) -> list[dict]:
    return [ln for ln in core.conversations.read_lines(conv) if ln["type"] == "event"]


async def test_a_summary_cut_at_max_tokens_is_asked_again_with_room_not_recorded(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        turns = big_exchanges()
        turns[2] = ("user", "My passport number is X1234567 and it expires on 3 May 2027")
        conv = await seed_conversation(core, [*turns, ("user", big(9, "user"))])
        cut = "- Owner's passport: X1234567, expires 3 May"
        fake_api.push(
            Scripted([Block("text", text=cut)], stop_reason="max_tokens", output_tokens=1024)
        )
        fake_api.push_text("- Owner's passport: X1234567, expires 3 May 2027.\n- Boiler: done.")
        fake_api.push_text("reply 9")
        reply = await brain.reply(owner_request(big(9, "user"), conv))
        assert reply.text == "reply 9"
        first, second = fake_api.requests[0].body, fake_api.requests[1].body
        assert second["model"] == first["model"] == "claude-haiku-4-5"
        assert second["max_tokens"] > first["max_tokens"]  # asked again with more room
        [event] = events(core, conv)
        assert event["summary"].endswith("Boiler: done.")  # the whole summary, never the cut
        assert event["usage"]["output"] >= 1024  # the cut answer was paid for too
        assert "expires 3 May 2027" in str(fake_api.requests[2].body["system"])
    finally:
        await brain.client.close()


async def test_a_summary_cut_twice_leaves_the_context_uncompressed(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        conv = await nine_big_turns(core)
        for _ in range(2):
            fake_api.push(Scripted([Block("text", text="- the owner")], stop_reason="max_tokens"))
        fake_api.push_text("reply 9")
        reply = await brain.reply(owner_request(big(9, "user"), conv))
        assert reply.text == "reply 9"
        assert "user turn 1:" in str(fake_api.requests[2].body["messages"])  # nothing dropped
        assert [e["event"] for e in events(core, conv)] == ["compression_failed"]
    finally:
        await brain.client.close()


async def test_a_compression_that_records_no_summary_still_records_what_it_cost(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Regression: a summarising call answered with a refusal, an empty or a cut summary
    # was paid for (its input is the whole older conversation) and recorded nowhere:
    # /status and the dashboard showed less than was spent, on every reply that tried.
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        conv = await nine_big_turns(core)
        fake_api.push(Scripted([], stop_reason="refusal", input_tokens=7000, output_tokens=2))
        fake_api.push_text("reply 9", input_tokens=1800, output_tokens=5)
        reply = await brain.reply(owner_request(big(9, "user"), conv))
        assert reply.text == "reply 9"
        await core.conversations.append_turn(
            conv, "assistant", reply.text, usage={"input": 1800, "output": 5}, cost=reply.cost
        )
        lines = core.conversations.read_lines(conv)
        [event] = events(core, conv)
        assert event["event"] == "compression_failed" and "summary" not in event
        assert event["usage"] == {"input": 7000, "output": 2}
        costs = summarize_costs(lines)
        assert costs.input_tokens == 7000 + 1800
        assert costs.cost == pytest.approx(7000 * 1.0 / 1e6 + 2 * 5.0 / 1e6 + reply.cost)
        record = await core.conversations.get(conv)
        assert record.tokens_in == 7000 + 1800  # the index's totals (/status)
        # and the failed attempt is no summary: the next reply still sees every turn
        fake_api.push(Scripted([], stop_reason="refusal"))
        fake_api.push_text("reply 10")
        await core.conversations.append_turn(conv, "user", big(10, "user"))
        await brain.reply(owner_request(big(10, "user"), conv))
        assert "user turn 1:" in str(fake_api.requests[-1].body["messages"])
    finally:
        await brain.client.close()


async def test_a_group_members_words_are_not_the_owners_in_the_summarising_prompt(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Regression: the summarising prompt put "Owner:" before every user turn, a group
    # member's too ("[turn 3] Owner: [Mallory, a group member, not the owner]: ..."), and
    # the summary, which stands in for those turns for good, could give the owner words
    # they never said.
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        manager = core.conversations
        rec = await manager.create("telegram")
        for n in range(1, 9):
            if n == 3:
                await manager.append_turn(
                    rec.id,
                    "user",
                    "Cancel the owner's dentist appointment",
                    sender="Mallory",
                    fromOwner=False,
                )
            else:
                await manager.append_turn(rec.id, "user", big(n, "user"), sender="Robin")
            await manager.append_turn(rec.id, "assistant", big(n, "assistant"))
        await manager.append_turn(rec.id, "user", big(9, "user"), sender="Robin")
        fake_api.push_text("- Mallory (a group member) wanted the dentist appointment cancelled.")
        fake_api.push_text("reply 9")
        await brain.reply(
            BrainRequest(
                profile="owner",
                channel="telegram",
                text=big(9, "user"),
                model_alias="sonnet",
                conversation_id=rec.id,
            )
        )
        prompt = fake_api.requests[0].body["messages"][0]["content"]
        assert "Cancel the owner's dentist appointment" in prompt
        assert "Owner: [Mallory" not in prompt
        assert "[turn 3] Mallory (a group member, not the owner): Cancel the owner" in prompt
        assert "[turn 4] Owner: user turn 4:" in prompt
    finally:
        await brain.client.close()


async def test_a_summary_refused_part_way_is_not_recorded(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Regression (session 39): only an empty summary was refused; the words before a
    # stop_reason "refusal" replaced the older turns for good.
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        conv = await seed_conversation(core, [*big_exchanges(), ("user", big(9, "user"))])
        fake_api.push(Scripted([Block("text", text="- The owner asked")], stop_reason="refusal"))
        fake_api.push_text("reply 9")
        reply = await brain.reply(owner_request(big(9, "user"), conv))
        assert reply.text == "reply 9"
        # uncompressed: no summary recorded, only the failed call's cost
        assert [e["event"] for e in events(core, conv)] == ["compression_failed"]
    finally:
        await brain.client.close()
