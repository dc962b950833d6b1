"""suggestSplit through the real Claude brain and the local fake Messages API: the naming
answer suggests a split, and the system prompt of the next reply's request (only that
one) asks the model to offer it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.prompts import NAMING_SYSTEM
from bot.services import Services, close_services
from tests.brain.conftest import uncached
from tests.brain.test_model_not_found import replies, say
from tests.brain.test_router_e2e import e2e_config, start, wait_for

NAMING = (
    '{"title": "Server Check and Birthday Gift", "topics": ["server-check", '
    '"birthday-gift"], "suggestSplit": true, "splitTopic": "the birthday gift"}'
)


def answer(body: dict[str, Any]) -> Scripted:
    if NAMING_SYSTEM in str(body["system"]):
        return Scripted([Block("text", text=NAMING)])
    return Scripted([Block("text", text="Noted.")])


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI() as fake:
        for _ in range(40):
            fake.push(answer)
        yield fake


@pytest.fixture
async def services(tmp_path: Path, fake_api: FakeAnthropicAPI) -> AsyncIterator[Services]:
    s = await start(e2e_config(tmp_path, fake_api))
    yield s
    await close_services(s)


async def test_the_split_is_in_the_next_replys_system_prompt_only(
    services: Services, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    try:
        for n in range(1, 9):
            await say(services, f"message {n}: the server, and a gift", f"m{n}")
            await wait_for(lambda: len(replies(services)) == n)  # noqa: B023 (awaited here)
            await lifecycle.settle()
        bodies = [uncached(r.body) for r in fake_api.requests]
        named = [i for i, b in enumerate(bodies) if NAMING_SYSTEM in b["system"]]
        assert len(named) == 1  # at the 5th user message, once
        offers = [i for i, b in enumerate(bodies) if "the birthday gift" in b["system"]]
        assert len(offers) == 1, offers
        replies_after = [i for i in range(named[0] + 1, len(bodies)) if i not in named]
        # The first reply built after the naming was stored carries it: the 5th message's
        # when the naming answered before its reply was built, else the 6th's; no other.
        assert offers[0] in replies_after[:2]
        (offer,) = [bodies[i]["system"] for i in offers]
        assert "# Notes for this reply" in offer and "/new" in offer
        assert len(bodies) == 9  # eight replies and one naming
    finally:
        await lifecycle.stop(1)
