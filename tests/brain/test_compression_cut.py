"""A summary cut at its max_tokens is not recorded as the conversation's summary.

Regression: the summarising call runs with ``max_tokens`` 1024 and its answer was recorded
whatever its stop reason. A summary that ran out of room (a long conversation, a language
that costs more tokens per word) stopped mid-sentence and was appended as the
``compression`` event: the older turns it had not reached left the context for good, on
this reply and every later one, with nothing in their place.
"""

from __future__ import annotations

from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.base import BrainRequest
from tests.brain.conftest import ManualClock, make_brain, make_config, seed_conversation


def big(n: int, who: str) -> str:
    return f"{who} turn {n}: " + ("lorem ipsum dolor sit amet " * 15)  # ~105 tokens


def events(core: SimpleNamespace, conv: str) -> list[dict]:
    return [ln for ln in core.conversations.read_lines(conv) if ln["type"] == "event"]


async def test_a_summary_cut_at_max_tokens_is_asked_again_with_room_not_recorded(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        turns = [(role, big(n, role)) for n in range(1, 9) for role in ("user", "assistant")]
        turns[2] = ("user", "My passport number is X1234567 and it expires on 3 May 2027")
        conv = await seed_conversation(core, [*turns, ("user", big(9, "user"))])
        cut = "- Owner's passport: X1234567, expires 3 May"
        fake_api.push(
            Scripted([Block("text", text=cut)], stop_reason="max_tokens", output_tokens=1024)
        )
        fake_api.push_text("- Owner's passport: X1234567, expires 3 May 2027.\n- Boiler: done.")
        fake_api.push_text("reply 9")
        reply = await brain.reply(
            BrainRequest(
                profile="owner",
                channel="web",
                text=big(9, "user"),
                model_alias="sonnet",
                conversation_id=conv,
            )
        )
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
        turns = [(role, big(n, role)) for n in range(1, 9) for role in ("user", "assistant")]
        conv = await seed_conversation(core, [*turns, ("user", big(9, "user"))])
        for _ in range(2):
            fake_api.push(Scripted([Block("text", text="- the owner")], stop_reason="max_tokens"))
        fake_api.push_text("reply 9")
        reply = await brain.reply(
            BrainRequest(
                profile="owner",
                channel="web",
                text=big(9, "user"),
                model_alias="sonnet",
                conversation_id=conv,
            )
        )
        assert reply.text == "reply 9"
        assert "user turn 1:" in str(fake_api.requests[2].body["messages"])  # nothing dropped
        assert not events(core, conv)
    finally:
        await brain.client.close()
