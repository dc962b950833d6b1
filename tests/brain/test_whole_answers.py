"""Calls not streamed (notes, titles, the summary inside an owner's reply): a deadline for
the whole answer.

Regression (session 40): the SDK's timeout is per read, so a server sending its JSON a
few bytes at a time held a one-shot call (and an owner's reply whose compression met it)
for as long as it trickled.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from tests.brain.conftest import (
    ManualClock,
    big,
    make_brain,
    make_config,
    nine_big_turns,
    owner_request,
)


def trickled(text: str) -> Scripted:
    """An answer sent four bytes every 0.05 s: about 4 s for the whole, never a read
    timeout of 0.3 s."""
    return Scripted([Block("text", text=text)], trickle_seconds=0.05)


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
