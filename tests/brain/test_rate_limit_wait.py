"""A rate limit whose retry-after is past the retry budget: the waiting reply honours it
instead of asking again every ``brain.pending_retry_interval``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.events import InboundMessage
from bot.reply_generation import RETRY_AFTER_CAP
from bot.services import Services, close_services
from tests.brain.test_router_e2e import RecordingChannel, e2e_config, start, wait_for


@pytest.fixture
async def services(tmp_path: Path, fake_api: FakeAnthropicAPI) -> AsyncIterator[Services]:
    s = await start(e2e_config(tmp_path, fake_api))
    yield s
    await close_services(s)


@pytest.mark.parametrize(("asked", "waited"), [(600, 600), (86400, RETRY_AFTER_CAP)])
async def test_a_waiting_reply_honours_a_long_retry_after(
    services: Services, fake_api: FakeAnthropicAPI, asked: float, waited: float
) -> None:
    # Regression: a 429 asking for ten minutes was retried every 30 s by every waiting
    # reply, each request refused again.
    web: RecordingChannel = services.channels["web"]  # type: ignore[assignment]
    waits: list[float] = []

    async def recorded(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    services.replies.generation.sleep = recorded
    fake_api.push_error(429, retry_after=asked, message="rate limited")
    fake_api.push_text("Now then.")
    await services.router.deliver(
        InboundMessage(
            channel="web", sender_id="owner", text="hi", message_id="r1", chat_id="dashboard"
        )
    )
    await wait_for(lambda: any(m.kind == "reply" for m in web.sent))
    assert waits == [waited]
    assert [m.text for m in web.sent if m.kind == "reply"] == ["Now then."]
    assert len(fake_api.requests) == 2
