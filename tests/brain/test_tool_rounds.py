"""What the owner gets when a tool round goes wrong: a later round rejected or unreadable,
a refusal after some text, a response with too many tool calls, a tool call cut at
``max_tokens``. What was already said stays said, with a notice after it."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import CUT_SHORT, AnthropicBrain
from bot.brain.anthropic_api import UnreadableAnswer
from bot.brain.anthropic_reply import REFUSAL_NOTE
from bot.config.model import BrainConfig
from tests.brain.conftest import Deltas, make_brain, make_config, owner_request, seed_conversation


def tool_results(body: dict) -> list[dict]:
    return [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"]


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
    assert "too long" in notice and notice.startswith("[")
    assert reply.extra == {"error": "too_long", "status": 400}
    assert reply.usage is not None and reply.usage.input > 0  # the first round was paid


async def test_an_unreadable_answer_in_a_later_round_keeps_what_was_said(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: three unreadable answers (a garbled stream) in the second round raised
    # out of the brain and the owner got the reply engine's apology alone.
    conv = await seed_conversation(core, [("user", "find the quote")])
    fake_api.push_tool_use("search_conversations", {"query": "quote"}, text="Searching now.")
    for _ in range(3):
        bad = Block("tool_use", name="search_conversations", input={"query": "quote"})
        fake_api.push(Scripted([bad], garble_after_deltas=1))
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
        bad = Block("tool_use", name="search_conversations", input={"query": "quote"})
        fake_api.push(Scripted([bad], garble_after_deltas=1))
    with pytest.raises(UnreadableAnswer):
        await brain.reply(owner_request("find the quote", conv), Deltas())


@pytest.mark.parametrize(
    ("chunks", "named"),
    [
        (['{"query": ', "boiler}"], "is not valid JSON"),
        (['["boiler"]'], "must be a JSON object, not list"),
        # Regression: read as inf / nan, then repeated in the next request, which could
        # not be written as JSON: the reply ended in the apology
        (['{"query": "boiler", "limit": 1e999}'], "the number 1e999 is out of range"),
        (['{"query": "boiler", "limit": NaN}'], "NaN is not a JSON number"),
    ],
)
async def test_tool_input_that_is_not_a_json_object_gets_an_error_result(
    brain: AnthropicBrain,
    core: SimpleNamespace,
    fake_api: FakeAnthropicAPI,
    chunks: list[str],
    named: str,
) -> None:
    # Regression: the SDK raised on tool input that is not JSON and the whole answer was
    # asked for again (three times, then the owner got the apology): the model never
    # learnt what was wrong. Now the call is answered with an error naming the problem,
    # in the same reply, and the model corrects it in its next round.
    conv = await seed_conversation(core, [("user", "what about the boiler?")])
    bad = Block("tool_use", name="search_conversations", chunks=chunks)
    fake_api.push(Scripted([Block("text", text="Let me look."), bad]))
    fake_api.push_tool_use("search_conversations", {"query": "boiler"})
    fake_api.push_text("Nothing about the boiler.")
    reply = await brain.reply(owner_request("what about the boiler?", conv), Deltas())
    assert reply.text == "Let me look.\n\nNothing about the boiler."
    assert len(fake_api.requests) == 3  # no call asked again
    second = fake_api.requests[1].body
    [result] = tool_results(second)
    assert result["is_error"] is True
    assert named in result["content"] and "input_schema" in result["content"]
    call = second["messages"][-2]["content"][-1]
    assert call["type"] == "tool_use" and call["input"] == {}  # an object, as the API takes
    assert tool_results(fake_api.requests[2].body)[0]["is_error"] is False


async def test_tool_input_never_readable_ends_at_the_round_limit(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Bounded: a model that keeps writing unreadable input uses up its tool rounds
    # (brain.max_tool_iterations), then answers without tools.
    brain = make_brain(make_config(tmp_path, fake_api, max_tool_iterations=2), core)
    conv = await seed_conversation(core, [("user", "boiler?")])
    for _ in range(2):
        bad = Block("tool_use", name="search_conversations", chunks=["{oops"])
        fake_api.push(Scripted([bad]))
    fake_api.push_text("I could not search.")
    reply = await brain.reply(owner_request("boiler?", conv), Deltas())
    assert reply.text == "I could not search." and len(fake_api.requests) == 3
    assert fake_api.requests[2].body["tool_choice"] == {"type": "none"}


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


async def test_tool_calls_over_the_cap_get_an_error_result(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: a response with 50 tool_use blocks ran all 50 searches.
    config = make_config(tmp_path, fake_api, max_tool_calls_per_response=3)
    brain = make_brain(config, core)
    searched: list[str] = []
    search = core.search.search

    async def counting(query: str, **kwargs: object) -> object:
        searched.append(query)
        return await search(query, **kwargs)

    core.search.search = counting
    try:
        conv = await seed_conversation(core, [("user", "search everything")])
        blocks = [
            Block("tool_use", name="search_conversations", input={"query": f"q{n}"})
            for n in range(50)
        ]
        fake_api.push(Scripted(blocks))
        fake_api.push_text("Done.")
        with caplog.at_level(logging.WARNING, logger="my_agent.brain"):
            reply = await brain.reply(owner_request("search everything", conv))
        assert reply.text == "Done."
        assert searched == ["q0", "q1", "q2"]
        results = tool_results(fake_api.requests[1].body)
        assert len(results) == 50  # every tool_use needs its tool_result
        assert [r["is_error"] for r in results[:3]] == [False] * 3
        assert all(r["is_error"] for r in results[3:])
        assert "at most 3 tool calls" in results[3]["content"]
        assert any("50 tool calls" in r.getMessage() for r in caplog.records)
    finally:
        await brain.client.close()


def test_the_tool_call_cap_has_a_default() -> None:
    assert BrainConfig().max_tool_calls_per_response == 8


async def test_a_tool_call_cut_at_max_tokens_is_answered_and_the_loop_goes_on(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: the reply stopped there with "cut short ... say continue" and the tool
    # never ran; now the cut call gets an error result and the model may call it again.
    conv = await seed_conversation(core, [("user", "what about the boiler?")])
    cut = Block("tool_use", name="search_conversations", chunks=['{"query": "boi'])
    fake_api.push(Scripted([Block("text", text="Let me look."), cut], stop_reason="max_tokens"))
    fake_api.push_tool_use("search_conversations", {"query": "boiler"})
    fake_api.push_text("Nothing about the boiler yet.")
    deltas = Deltas()
    reply = await brain.reply(owner_request("what about the boiler?", conv), deltas)
    assert reply.text == "Let me look.\n\nNothing about the boiler yet."
    assert CUT_SHORT not in reply.text and reply.extra == {}
    assert deltas.text == reply.text
    first = tool_results(fake_api.requests[1].body)
    assert len(first) == 1 and first[0]["is_error"]
    assert "max_tokens" in first[0]["content"]
    assert tool_results(fake_api.requests[2].body)[0]["is_error"] is False


async def test_a_reply_cut_by_the_context_window_says_so(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: stop_reason "model_context_window_exceeded" (the answer ran into the
    # model's context window: the tool results of a reply can fill it) went out
    # mid-sentence with no sign that more was coming, as max_tokens used to.
    conv = await seed_conversation(core, [("user", "summarise it all")])
    fake_api.push_tool_use("fetch_context", {"conversationId": conv}, text="Reading.")
    cut = Scripted(
        [Block("text", text="The first point is")], stop_reason="model_context_window_exceeded"
    )
    fake_api.push(cut)
    reply = await brain.reply(owner_request("summarise it all", conv), Deltas())
    assert reply.text == "Reading.\n\nThe first point is\n\n" + CUT_SHORT
    assert reply.extra == {"stopReason": "model_context_window_exceeded"}


async def test_a_tool_call_cut_by_the_context_window_is_answered(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, [("user", "and the boiler?")])
    cut = Block("tool_use", name="search_conversations", chunks=['{"query": "boi'])
    fake_api.push(Scripted([cut], stop_reason="model_context_window_exceeded"))
    fake_api.push_text("Nothing found.")
    reply = await brain.reply(owner_request("and the boiler?", conv), Deltas())
    assert reply.text == "Nothing found."
    assert tool_results(fake_api.requests[1].body)[0]["is_error"]


async def test_tools_asked_for_in_the_last_round_are_not_run(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Regression (session 40): the last call asks for no tools (tool_choice none); a
    # response that held tool_use blocks all the same had them run, their results never
    # sent: a search spent for nothing.
    brain = make_brain(make_config(tmp_path, fake_api, max_tool_iterations=2), core)
    conv = await seed_conversation(core, [("user", "find the kayak")])
    searched: list[int] = []
    real = core.search.search

    async def counting(*args: Any, **kwargs: Any) -> Any:
        searched.append(len(fake_api.requests))
        return await real(*args, **kwargs)

    core.search.search = counting
    for n in range(3):
        call = Block("tool_use", name="search_conversations", input={"query": f"kayak {n}"})
        fake_api.push(Scripted([Block("text", text=f"round {n}"), call]))
    reply = await brain.reply(owner_request("find the kayak", conv), Deltas())
    assert len(fake_api.requests) == 3
    assert fake_api.requests[2].body["tool_choice"] == {"type": "none"}
    assert searched == [1, 2]  # none after the last call
    assert reply.text == "round 0\n\nround 1\n\nround 2"
