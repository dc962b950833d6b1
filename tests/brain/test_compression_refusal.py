"""A refusal written as text is not recorded as the conversation's summary.

Regression (session 40): the summarising model answered "I'm sorry, but I can't help with
summarizing this conversation." with ``stop_reason`` ``end_turn``, as models usually
refuse; only an empty answer and ``stop_reason: "refusal"`` were caught, so the apology
was appended as the ``compression`` event's summary. It stood in for turns 1..N in every
later reply, and in every later summary as ``<previous_summary>``: what those turns said
was gone from the working context for good.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.worded_refusals import refused_in_words
from tests.brain.conftest import (
    ManualClock,
    big,
    make_brain,
    make_config,
    nine_big_turns,
    owner_request,
)

REFUSAL = "I'm sorry, but I can't help with summarizing this conversation."


def events(core: SimpleNamespace, conv: str) -> list[dict]:
    return [ln for ln in core.conversations.read_lines(conv) if ln["type"] == "event"]


@pytest.mark.parametrize(
    "answer",
    [
        REFUSAL,
        "Summary: I am unable to summarise this.",
        "Sure! Here is the summary: Sorry, I cannot summarise this.",
    ],
)
async def test_a_refusal_in_words_is_no_summary_and_the_next_reply_tries_again(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace, answer: str
) -> None:
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        conv = await nine_big_turns(core)
        fake_api.push_text(answer, input_tokens=900, output_tokens=15)
        fake_api.push_text("reply 9")
        reply = await brain.reply(owner_request(big(9, "user"), conv))
        assert reply.text == "reply 9"
        sent = fake_api.requests[1].body
        assert "user turn 1:" in str(sent["messages"])  # uncompressed: nothing dropped
        assert "sorry" not in str(sent["system"]).lower()
        # nothing recorded as the summary; what the refused call cost is on its own event
        [failed] = events(core, conv)
        assert failed["event"] == "compression_failed" and "summary" not in failed
        assert failed["usage"] == {"input": 900, "output": 15}

        # the next reply tries again, and the real summary's prompt has no previous one
        await core.conversations.append_turn(conv, "assistant", "reply 9")
        await core.conversations.append_turn(conv, "user", big(10, "user"))
        fake_api.push_text("- The owner discussed lorem ipsum.")
        fake_api.push_text("reply 10")
        await brain.reply(owner_request(big(10, "user"), conv))
        prompt = fake_api.requests[2].body["messages"][0]["content"]
        assert "<previous_summary>" not in prompt and "user turn 1:" in prompt
        assert events(core, conv)[-1]["summary"] == "- The owner discussed lorem ipsum."
        assert "The owner discussed lorem ipsum." in str(fake_api.requests[3].body["system"])
    finally:
        await brain.client.close()


def test_a_summary_about_an_apology_is_not_a_refusal() -> None:
    assert refused_in_words(REFUSAL)
    # third person, about the conversation: a summary, whatever it reports
    assert not refused_in_words("The owner said: I'm sorry I missed the call; rebook it.")
    assert not refused_in_words("I'm sorry " + "x" * 400)  # too long for a refusal
