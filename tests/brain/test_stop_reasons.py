"""What each stop_reason makes of a reply: refusal, max_tokens, pause_turn,
stop_sequence, through the real SDK against the fake API."""

from __future__ import annotations

from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.anthropic_reply import CUT_BEFORE_ANSWER, PAUSED_NOTE, REFUSED_REPLY
from tests.brain.conftest import (
    Deltas,
    make_brain,
    make_config,
    owner_request,
    seed_conversation,
    uncached,
)


async def test_a_refusal_without_text_says_the_model_declined(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: a refusal with no text got "The model returned no answer to this. Ask
    # again", which reads as a glitch to retry, not as the model declining.
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(Scripted([], stop_reason="refusal"))
    reply = await brain.reply(owner_request("hello", conv), Deltas())
    assert reply.text == REFUSED_REPLY and "declined" in reply.text
    assert reply.extra == {"error": "empty", "stopReason": "refusal"}


async def test_max_tokens_spent_before_any_text_says_so(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: an answer cut at max_tokens before its first word (all of it spent
    # thinking) got "The model returned no answer": not what happened, nor what helps.
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(Scripted([Block("thinking", text="long thoughts")], stop_reason="max_tokens"))
    reply = await brain.reply(owner_request("hello", conv), Deltas())
    assert reply.text == CUT_BEFORE_ANSWER and "length limit" in reply.text
    assert reply.extra == {"error": "empty", "stopReason": "max_tokens"}


async def test_a_paused_turn_is_continued(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: "pause_turn" (the API paused a long turn) ended the reply there, as if
    # the model had finished; the API's documentation says to send the response back
    # as it is, so the model continues its turn.
    conv = await seed_conversation(core, [("user", "what is new?")])
    fake_api.push(Scripted([Block("text", text="Let me check.")], stop_reason="pause_turn"))
    fake_api.push_text("Nothing new since Monday.")
    deltas = Deltas()
    reply = await brain.reply(owner_request("what is new?", conv), deltas)
    assert reply.text == "Let me check.\n\nNothing new since Monday." == deltas.text
    assert len(fake_api.requests) == 2
    resent = uncached(fake_api.requests[1].body)["messages"][-1]
    assert resent == {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}]}
    assert not reply.extra


async def test_a_stop_sequence_is_a_normal_end(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(Scripted([Block("text", text="Done.")], stop_reason="stop_sequence"))
    reply = await brain.reply(owner_request("hello", conv), Deltas())
    assert reply.text == "Done." and not reply.extra


async def test_a_turn_still_paused_at_the_round_limit_is_labelled_unfinished(
    tmp_path, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: every continuation of a paused turn takes a round of the tool loop; a
    # turn still paused when the rounds ran out went out as if the model had finished it.
    brain = make_brain(make_config(tmp_path, fake_api, max_tool_iterations=1), core)
    try:
        conv = await seed_conversation(core, [("user", "what is new?")])
        fake_api.push(Scripted([Block("text", text="Let me check.")], stop_reason="pause_turn"))
        fake_api.push(Scripted([Block("text", text="Still looking.")], stop_reason="pause_turn"))
        deltas = Deltas()
        reply = await brain.reply(owner_request("what is new?", conv), deltas)
        assert len(fake_api.requests) == 2  # bounded
        assert reply.text == "Let me check.\n\nStill looking.\n\n" + PAUSED_NOTE
        assert reply.extra == {"stopReason": "pause_turn"}
    finally:
        await brain.client.close()
