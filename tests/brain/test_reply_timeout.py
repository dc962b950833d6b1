"""A reply's streamed calls within ``brain.reply_timeout`` as a whole (session 41): a
server trickling a token every few seconds never stalls, and before it held the reply,
and the conversation's lock with the owner's next messages, for as long as it trickled."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.base import BrainRequest, Spend
from bot.brain.restricted_reply import RESTRICTED_CUT
from bot.config.model import BrainConfig
from bot.events import InboundMessage
from bot.services import close_services
from tests.brain.conftest import (
    Deltas,
    ManualClock,
    make_brain,
    make_config,
    party_question,
    seed_conversation,
)
from tests.brain.test_router_e2e import e2e_config, start, wait_for

WORDS = [f"word{n} " for n in range(40)]  # 40 deltas: 10 s at 0.25 s each


def request(conv_id: str, text: str, spend: Spend | None = None) -> BrainRequest:
    return BrainRequest(
        profile="owner",
        channel="web",
        text=text,
        model_alias="sonnet",
        conversation_id=conv_id,
        spend=spend,
    )


async def test_a_slow_steady_stream_is_cut_at_the_reply_timeout(
    tmp_path: Path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, reply_timeout=1.0)
    brain = make_brain(config, core)
    try:
        conv = await seed_conversation(core, [("user", "tell me a long story")])
        fake_api.push(
            Scripted(
                [Block("text", text="".join(WORDS), chunks=WORDS)],
                input_tokens=900,
                trickle_seconds=0.25,
            )
        )
        deltas, spend = Deltas(), Spend()
        started = asyncio.get_running_loop().time()
        reply = await brain.reply(request(conv, "tell me a long story", spend), deltas)
        assert asyncio.get_running_loop().time() - started < 5  # not the 10 s of trickle
        said, note = reply.text.split("\n\n")
        # what was streamed stays, marked as cut off; never asked again
        assert said.startswith("word0 word1") and "word39" not in said
        assert said == deltas.text.strip()
        assert note.startswith("[This answer was cut off here") and "brain.reply_timeout" in note
        assert reply.extra == {"error": "timeout"}
        assert len(fake_api.requests) == 1
        # the cut call's tokens: its input (message_start), once
        assert reply.usage is not None and reply.usage.input == spend.usage.input == 900
        assert spend.cost is not None and spend.cost > 0
    finally:
        await brain.client.close()


async def test_tool_rounds_count_towards_the_same_limit(
    tmp_path: Path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, reply_timeout=1.0)
    brain = make_brain(config, core)
    try:
        conv = await seed_conversation(core, [("user", "what about the boiler?")])
        search = Block("tool_use", name="search_conversations", input={"query": "boiler"})
        # round 1: some words and a tool call, about 0.7 s; round 2 alone would fit in
        # the limit (0.8 s), both together do not
        fake_api.push(
            Scripted(
                [Block("text", text="Let me look.", chunks=["Let ", "me look."]), search],
                trickle_seconds=0.15,
            )
        )
        answer = ["The boiler ", "was serviced ", "in May ", "by Jo."]
        fake_api.push(
            Scripted([Block("text", text="".join(answer), chunks=answer)], trickle_seconds=0.2)
        )
        reply = await brain.reply(request(conv, "what about the boiler?"), Deltas())
        assert len(fake_api.requests) == 2
        assert reply.text.startswith("Let me look.")
        assert "by Jo." not in reply.text
        assert reply.text.endswith(
            'Ask again, or say "continue" for the rest.]'
        ) and reply.extra == {"error": "timeout"}
    finally:
        await brain.client.close()


async def test_nothing_said_within_the_limit_is_a_notice(
    tmp_path: Path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # A stream that trickles only thinking, or is cut before its first word: a notice
    # that ends the reply, not a wait for the model (which would hold the conversation
    # again on the next try).
    config = make_config(tmp_path, fake_api, reply_timeout=1.0)
    brain = make_brain(config, core)
    try:
        conv = await seed_conversation(core, [("user", "hello")])
        thoughts = ["Hmm. "] * 40
        fake_api.push(
            Scripted(
                [Block("thinking", text="".join(thoughts), chunks=thoughts), Block("text", "Hi")],
                trickle_seconds=0.25,
            )
        )
        reply = await brain.reply(request(conv, "hello"), Deltas())
        assert reply.text.startswith("I could not answer this: the model service had not")
        assert reply.extra == {"error": "timeout"}
        assert len(fake_api.requests) == 1
    finally:
        await brain.client.close()


async def test_the_cut_reply_is_recorded_and_the_conversation_goes_on(tmp_path: Path) -> None:
    async with FakeAnthropicAPI() as fake:
        config = e2e_config(tmp_path, fake)
        config.brain.reply_timeout = 1.0
        services = await start(config)
        try:
            fake.push(
                Scripted(
                    [Block("text", text="".join(WORDS), chunks=WORDS)],
                    input_tokens=900,
                    trickle_seconds=0.25,
                )
            )
            fake.push_text("Here is the short one.")
            web = services.channels["web"]
            for n, text in enumerate(["tell me a long story", "a short one, please"]):
                await services.router.deliver(
                    InboundMessage(
                        channel="web",
                        sender_id="owner",
                        text=text,
                        message_id=f"m{n}",
                        chat_id="dashboard",
                    )
                )
            # the owner's next message is answered: the first reply let the conversation go
            await wait_for(lambda: sum(m.kind == "reply" for m in web.sent) == 2, timeout=8)
            first, second = [m for m in web.sent if m.kind == "reply"]
            assert "[This answer was cut off here" in first.text
            assert second.text == "Here is the short one."
            conv = first.conversation_id
            assert conv is not None and second.conversation_id == conv
            turns = [
                line
                for line in services.conversations.read_lines(conv)
                if line.get("type") == "turn"
            ]
            assert [t["role"] for t in turns] == ["user", "user", "assistant", "assistant"]
            cut = next(t for t in turns if t["role"] == "assistant")
            assert cut["content"] == first.text
            assert cut["error"] == "timeout"
            assert cut["usage"]["input"] == 900 and cut["cost"] > 0
        finally:
            await close_services(services)


def test_the_limit_is_validated() -> None:
    assert BrainConfig().reply_timeout == 600.0
    for wrong in (0, 0.5, -3, 86401):
        with pytest.raises(ValidationError):
            BrainConfig(reply_timeout=wrong)


async def test_a_known_partys_slow_reply_is_cut_too(
    tmp_path: Path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, reply_timeout=1.0)
    brain = make_brain(config, core)
    try:
        fake_api.push(
            Scripted([Block("text", text="".join(WORDS), chunks=WORDS)], trickle_seconds=0.25)
        )
        reply = await brain.reply(
            BrainRequest(
                profile="restricted",
                channel="web",
                text="hello",
                model_alias="sonnet",
                party_name="Mallory",
                scope="Say when the owner is free.",
            ),
            Deltas(),
        )
        said, note = reply.text.split("\n\n")
        assert said.startswith("word0") and "word39" not in said
        assert note == RESTRICTED_CUT  # no configuration key named to the party
        assert reply.extra == {"error": "timeout"} and len(fake_api.requests) == 1
    finally:
        await brain.client.close()


@pytest.mark.parametrize("profile", ["owner", "restricted"])
async def test_the_fall_back_to_the_default_shares_the_replys_timeout(
    tmp_path: Path, fake_api: FakeAnthropicAPI, core: SimpleNamespace, profile: str
) -> None:
    # Regression (session 42): a model the service does not offer (404) is answered by
    # models.default, and that call started a fresh brain.reply_timeout: the reply could
    # wait up to twice the limit. One deadline per reply: here the 404 and its check took
    # the whole limit (the brain's clock moved past it), so the default is not asked.
    clock = ManualClock()
    config = make_config(tmp_path, fake_api, reply_timeout=30.0)
    brain = make_brain(config, core, clock)
    opus = config.resolve_model("opus")
    fake_api.unknown_models.add(opus)
    fake_api.push_text("Sunday it opens at ten.")
    after_404 = brain.models.after_404

    async def slow_check(alias: str, refused: Any) -> str | None:
        instead = await after_404(alias, refused)
        clock.now += 31.0  # the first model's call and the Models API: past the limit
        return instead

    brain.models.after_404 = slow_check  # type: ignore[method-assign]
    try:
        if profile == "owner":
            conv = await seed_conversation(core, [("user", "Is the shop open on Sunday?")])
            asked = replace(request(conv, "Is the shop open on Sunday?"), model_alias="opus")
        else:
            asked = party_question("opus")
        reply = await brain.reply(asked, Deltas())
        assert reply.extra.get("error") == "timeout", reply.text
        assert "Sunday it opens at ten." not in reply.text
        assert [r.body["model"] for r in fake_api.requests] == [opus]  # not the default
    finally:
        await brain.client.close()
