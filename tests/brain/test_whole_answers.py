"""Calls not streamed (notes, titles, the summary inside an owner's reply): a deadline for
the whole answer, and an answer that is no message.

Regressions (session 40): the SDK's timeout is per read, so a server sending its JSON a
few bytes at a time held a one-shot call (and an owner's reply whose compression met it)
for as long as it trickled; and a proxy's page sent with 200 came back from the SDK as a
string, read as a message: AttributeError, and inside compression the owner got the
apology and their message was never answered.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.base import BrainUnavailable
from tests.brain.conftest import (
    ManualClock,
    big,
    make_brain,
    make_config,
    nine_big_turns,
    owner_request,
)

PORTAL = b"<html><body><h1>Proxy authentication required</h1></body></html>"


def trickled(text: str) -> Scripted:
    """An answer sent four bytes every 0.05 s: about 4 s for the whole, never a read
    timeout of 0.3 s."""
    return Scripted([Block("text", text=text)], trickle_seconds=0.05)


def portal() -> Scripted:
    return Scripted(raw=PORTAL, raw_type="text/html")


async def test_a_trickled_one_shot_answer_is_abandoned_and_asked_again(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, request_timeout=0.3)
    brain = make_brain(config, core, ManualClock())
    try:
        fake_api.push(trickled("the trickled notes, late"))
        fake_api.push_text("notes on time")
        text = await asyncio.wait_for(brain.complete(system="s", prompt="p"), 3)
        assert text == "notes on time" and len(fake_api.requests) == 2
    finally:
        await brain.client.close()


async def test_a_trickled_summary_does_not_hold_the_owners_reply(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, request_timeout=0.3, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        conv = await nine_big_turns(core)
        fake_api.push(trickled("- the trickled summary"))
        fake_api.push_text("- Boiler: done.")  # the summary, asked again
        fake_api.push_text("reply 9")
        reply = await asyncio.wait_for(brain.reply(owner_request(big(9, "user"), conv)), 3)
        assert reply.text == "reply 9"
        assert [r.stream for r in fake_api.requests] == [False, False, True]
    finally:
        await brain.client.close()


async def test_a_page_sent_with_200_is_an_outage_not_a_crash(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, retry_budget_seconds=1.0, retry_max_delay=0.1)
    brain = make_brain(config, core, ManualClock())
    try:
        fake_api.push(portal())
        fake_api.push_text("notes")
        assert await brain.complete(system="s", prompt="p") == "notes"  # asked again
        for _ in range(40):
            fake_api.push(portal())
        try:
            await brain.complete(system="s", prompt="p")
        except BrainUnavailable as exc:  # the portal for the whole budget: an outage
            assert "no message" in str(exc)
        else:
            raise AssertionError("a page was taken for an answer")
    finally:
        await brain.client.close()


async def test_a_summary_that_meets_a_page_leaves_the_reply_uncompressed(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(
        tmp_path,
        fake_api,
        compression_budget_tokens=1500,
        retry_budget_seconds=0.2,
        retry_base_delay=0.05,
        retry_max_delay=0.1,
    )
    brain = make_brain(config, core, ManualClock())
    try:
        conv = await nine_big_turns(core)

        def answer(body: dict) -> Scripted:
            if body.get("stream"):  # the reply itself gets through
                return Scripted([Block("text", text="reply 9")])
            return portal()  # every summary attempt meets the portal

        for _ in range(40):
            fake_api.push(answer)
        reply = await brain.reply(owner_request(big(9, "user"), conv))
        assert reply.text == "reply 9"
        last = fake_api.requests[-1].body
        assert "user turn 1:" in str(last["messages"])  # sent uncompressed
    finally:
        await brain.client.close()


class FailingSummaries:
    """The brain's API for the compressor, whose summary call fails as nothing foreseen."""

    async def call(self, params: dict, deltas: object, budget: float | None = None) -> object:
        raise RuntimeError("something unforeseen in the summary call")


async def test_any_failure_of_the_summary_call_leaves_the_reply_uncompressed(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Only an outage and a rejection were caught: anything else ended the owner's reply
    # in the apology, although the reply itself would have worked (docs/brain.md: a
    # failed summary is not fatal).
    config = make_config(tmp_path, fake_api, compression_budget_tokens=1500)
    brain = make_brain(config, core, ManualClock())
    try:
        conv = await nine_big_turns(core)
        brain.compressor.api = FailingSummaries()  # type: ignore[assignment]
        fake_api.push_text("reply 9")
        reply = await brain.reply(owner_request(big(9, "user"), conv))
        assert reply.text == "reply 9"
        assert "user turn 1:" in str(fake_api.requests[-1].body["messages"])
    finally:
        await brain.client.close()
