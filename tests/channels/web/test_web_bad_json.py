"""JSON the dashboard's server cannot read, over real sockets: a WebSocket frame or an
API body nested past the decoder's depth, a body that is not UTF-8. Each is answered
as malformed; before, the decoder's RecursionError (a few KB of "[[[[" is enough) and
UnicodeDecodeError went uncaught: the tab's socket closed with no word (1006), the API
and the login page answered 500, and each left a traceback in the log."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from tests.channels.web.conftest import Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEEP = "[" * 6000  # past the JSON decoder's recursion limit


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


async def test_a_frame_nested_too_deep_is_malformed_and_the_socket_stays(
    ws_factory, caplog: pytest.LogCaptureFixture
) -> None:
    tab = await ws_factory()
    await tab.ws.send_str(DEEP)
    await tab.wait_for(lambda f: f["type"] == "error" and "malformed" in f["message"])
    await tab.send(type="ping", t=7)  # the same socket still answers
    assert (await tab.wait_for(lambda f: f["type"] == "pong"))["t"] == 7
    assert not tab.ws.closed
    assert tracebacks(caplog) == []


async def test_api_bodies_that_cannot_be_read_are_a_400(
    stack: Stack, client: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {"Content-Type": "application/json", "Origin": stack.origin}
    for body in (b"\xff\xfe{", DEEP.encode()):
        async with client.post(
            f"{stack.url}/api/external/p1/tier", data=body, headers=headers
        ) as r:
            assert (r.status, await r.text()) == (400, "malformed JSON")
    assert tracebacks(caplog) == []


async def test_a_login_nested_too_deep_is_a_wrong_token_not_a_500(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {"Content-Type": "application/json", "Origin": stack.origin}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{stack.url}/login", data=DEEP, headers=headers) as r:
            assert r.status == 401
            assert await r.json() == {"error": "invalid token"}
    assert tracebacks(caplog) == []
    assert any(r.levelno == logging.WARNING for r in caplog.records)  # "login failed"
