"""What the owner gets when a tool round goes wrong: a later round rejected or unreadable,
a refusal after some text. What was already said stays said, with a notice after it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.anthropic_api import UnreadableAnswer
from bot.brain.anthropic_reply import REFUSAL_NOTE
from tests.brain.conftest import Deltas, owner_request, seed_conversation


async def test_a_rejection_in_a_later_round_keeps_what_was_said(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: the whole reply became the "rejected" notice, and the text the owner had
    # already watched stream in ("Let me look that up.") was gone from the reply and the
    # transcript.
    conv = await seed_conversation(core, [("user", "What did Jonas quote?")])
    fake_api.push_tool_use("search_conversations", {"query": "Jonas"}, text="Let me look that up.")
    fake_api.push_error(400, message="prompt is too long")
    deltas = Deltas()
    reply = await brain.reply(owner_request("What did Jonas quote?", conv), deltas)
    assert deltas.text == "Let me look that up."
    said, notice = reply.text.split("\n\n", 1)
    assert said == "Let me look that up."
    assert "rejected the request (400)" in notice and notice.startswith("[")
    assert reply.extra == {"error": "rejected", "status": 400}
    assert reply.usage is not None and reply.usage.input > 0  # the first round was paid


async def test_an_unreadable_answer_in_a_later_round_keeps_what_was_said(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: three unreadable answers (tool input that is not JSON) in the second
    # round raised out of the brain and the owner got the reply engine's apology alone.
    conv = await seed_conversation(core, [("user", "find the quote")])
    fake_api.push_tool_use("search_conversations", {"query": "quote"}, text="Searching now.")
    for _ in range(3):
        bad = Block("tool_use", name="search_conversations", chunks=['{"query": ]'])
        fake_api.push(Scripted([bad]))
    reply = await brain.reply(owner_request("find the quote", conv), Deltas())
    said, notice = reply.text.split("\n\n", 1)
    assert said == "Searching now."
    assert "could not be read" in notice
    assert reply.extra["error"] == "unreadable"
    assert len(fake_api.requests) == 4


async def test_an_unreadable_first_answer_still_fails(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Nothing said yet: the failure goes to the reply engine (its apology), as before.
    conv = await seed_conversation(core, [("user", "find the quote")])
    for _ in range(3):
        bad = Block("tool_use", name="search_conversations", chunks=['{"query": ]'])
        fake_api.push(Scripted([bad]))
    with pytest.raises(UnreadableAnswer):
        await brain.reply(owner_request("find the quote", conv), Deltas())


@pytest.mark.parametrize("earlier_round", [False, True])
async def test_a_refusal_after_text_keeps_it_with_a_note(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, earlier_round: bool
) -> None:
    # Regression: the text before a refusal went out as if it were the whole answer,
    # with no sign that the model had stopped (and no stop reason on the turn).
    conv = await seed_conversation(core, [("user", "tell me")])
    if earlier_round:
        fake_api.push_tool_use("search_conversations", {"query": "x"}, text="Part one.")
        fake_api.push(Scripted([], stop_reason="refusal"))
    else:
        fake_api.push(Scripted([Block("text", text="Part one.")], stop_reason="refusal"))
    reply = await brain.reply(owner_request("tell me", conv), Deltas())
    assert reply.text == "Part one.\n\n" + REFUSAL_NOTE
    assert reply.extra == {"stopReason": "refusal"}
