"""A proxy's page answering 403 or 413 is said as what it is (session 41), not as the
model service refusing the key or finding the conversation too long; the API's own JSON
403 and 413 keep their meaning."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.anthropic_reply import TOO_LONG
from bot.brain.base import BrainAccessRefused, BrainRequest, BrainUnavailable, ForeignAnswer
from bot.brain.foreign_answers import plain_excerpt
from bot.events import InboundMessage
from bot.services import close_services
from tests.brain.conftest import Deltas, seed_conversation
from tests.brain.test_router_e2e import (
    RecordingChannel,
    e2e_config,
    start,
    status_brain_line,
    wait_for,
)

PROXY_403 = b"""<!DOCTYPE html>
<html><head><title>Access Denied</title>
<style>body { font-family: sans-serif; color: #c00 }</style>
<script>window.onload = function () { track('blocked'); };</script></head>
<body><div class="box"><h1>Access Denied</h1>
<p>Your request to <b>api.anthropic.com</b> was blocked by the corporate web policy
(category: AI services). Contact the IT help desk &amp; quote incident 4711.</p></div>
</body></html>"""
PROXY_413 = b"""<html>
<head><title>413 Request Entity Too Large</title></head>
<body>
<center><h1>413 Request Entity Too Large</h1></center>
<hr><center>nginx/1.24.0</center>
</body>
</html>"""


def request(conv_id: str, text: str) -> BrainRequest:
    return BrainRequest(
        profile="owner", channel="web", text=text, model_alias="sonnet", conversation_id=conv_id
    )


def test_a_page_becomes_a_short_plain_excerpt() -> None:
    shown = plain_excerpt(PROXY_403.decode())
    assert shown.startswith("Access Denied Your request to api.anthropic.com was blocked")
    assert "<" not in shown and "track(" not in shown and "font-family" not in shown
    assert "&amp;" not in shown and len(shown) <= 120 and shown.endswith("…")
    # the title, repeated by the body, once
    assert plain_excerpt(PROXY_413.decode()) == "413 Request Entity Too Large nginx/1.24.0"
    assert plain_excerpt("") == "(an empty body)"


async def test_a_proxys_413_page_is_not_a_conversation_too_long(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Before: taken for the API's request_too_large, the conversation was compressed,
    # asked again, and the owner told it was too long for the model (start /new).
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(Scripted(status=413, raw=PROXY_413))
    reply = await brain.reply(request(conv, "hello"), Deltas())
    assert len(fake_api.requests) == 1  # not shrunk and asked again
    assert reply.text != TOO_LONG and "too long for the model" not in reply.text
    assert "not by the service itself (HTTP 413" in reply.text
    assert "413 Request Entity Too Large" in reply.text and "nginx/1.24.0" in reply.text
    assert "<" not in reply.text and "/new" in reply.text
    assert reply.extra == {"error": "not_api", "status": 413}
    lines = core.conversations.read_lines(conv)
    assert not any(line.get("kind") == "compression" for line in lines)


async def test_the_apis_own_413_is_still_too_long(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push_error(413, message="Request exceeds the maximum allowed number of bytes")
    fake_api.push_error(413, message="Request exceeds the maximum allowed number of bytes")
    reply = await brain.reply(request(conv, "hello"), Deltas())
    assert reply.text == TOO_LONG
    assert reply.extra == {"error": "too_long", "status": 413}


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (Scripted(status=403, raw=PROXY_403), ForeignAnswer),
        (Scripted(status=403, error_message="not allowed"), BrainAccessRefused),
    ],
    ids=["proxy-page", "api-json"],
)
async def test_a_403_is_the_apis_only_with_its_own_error(
    brain: AnthropicBrain,
    core: SimpleNamespace,
    fake_api: FakeAnthropicAPI,
    answer: Scripted,
    raised: type[Exception],
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(answer)
    with pytest.raises(BrainUnavailable) as caught:
        await brain.reply(request(conv, "hello"), Deltas())
    assert type(caught.value) is raised
    assert isinstance(caught.value, ForeignAnswer | BrainAccessRefused)
    assert caught.value.status == 403
    assert len(fake_api.requests) == 1


async def test_the_owner_is_told_a_proxy_refused_and_the_reply_comes_later(
    tmp_path: Path,
) -> None:
    # Before: "The language model service refuses my access (403: permission denied)",
    # and /status "access refused: 403": the key and the account were fine.
    async with FakeAnthropicAPI() as fake:
        services = await start(e2e_config(tmp_path, fake))
        try:
            blocked = True

            def answer(body: object) -> Scripted:
                if blocked:
                    fake.push(answer)  # the next request meets the proxy too
                    return Scripted(status=403, raw=PROXY_403)
                return Scripted([Block("text", text="Hello!")])

            fake.push(answer)
            web: RecordingChannel = services.channels["web"]  # type: ignore[assignment]
            await services.router.deliver(
                InboundMessage(
                    channel="web",
                    sender_id="owner",
                    text="Hello?",
                    message_id="p1",
                    chat_id="dashboard",
                )
            )
            await wait_for(lambda: any(m.kind == "notice" for m in web.sent))
            (notice,) = [m for m in web.sent if m.kind == "notice"]
            assert "not by the service itself (HTTP 403" in notice.text
            assert "Access Denied Your request to api.anthropic.com" in notice.text
            assert "permission denied" not in notice.text and "<" not in notice.text
            line = await status_brain_line(services, web, "s1")
            assert "refused by something in between" in line and "HTTP 403" in line
            assert "access refused" not in line and "<" not in line
            blocked = False
            await wait_for(lambda: any(m.kind == "reply" for m in web.sent))
            assert [m.text for m in web.sent if m.kind == "reply"] == ["Hello!"]
        finally:
            await close_services(services)
