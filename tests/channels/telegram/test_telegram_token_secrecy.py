"""The bot token never leaves the Telegram channel in an error (channels/telegram/wire.py).

aiohttp's error text names the request's URL, which holds the token
(``/bot<token>/getMe``): an ``api_base`` that answers no HTTP (``http://host:443``, a
TLS port) or a proxy's redirect loop. aiogram copies it into
``TelegramNetworkError.message``, and before session 40 it reached the log's WARNINGs,
the tracebacks (through the chained aiohttp error), ``outbox.last_error`` and the
owner's alert."""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import AsyncIterator

import pytest
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramNetworkError
from aiogram.methods import SendMessage
from aiohttp import ClientConnectorError, ClientPayloadError, web
from aiohttp.client_reqrep import ConnectionKey

from bot.bench.fakes.telegram_api import TOKEN
from bot.events import OutboundMessage
from channels.telegram.adapter import TelegramChannel
from channels.telegram.retries import unconfirmed
from channels.telegram.wire import without_token

from .conftest import OWNER_ID, RecordingHost, SleepRecorder, telegram_config, wait_until

SECRET = TOKEN.split(":", 1)[1]


@pytest.fixture(params=["redirect loop", "no http"])
async def bad_api_base(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """The base URL of a server that is no Bot API: a proxy redirecting each request to
    itself (aiohttp: TooManyRedirects), or a TLS port asked in plain HTTP (its answer, a
    TLS alert, is no HTTP status line)."""
    if request.param == "redirect loop":

        async def loop_redirect(req: web.Request) -> web.StreamResponse:
            raise web.HTTPPermanentRedirect(location=str(req.rel_url))

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", loop_redirect)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        await runner.cleanup()
        return

    async def tls_alert(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"\x15\x03\x01\x00\x02\x02\x50")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(tls_alert, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()
    await server.wait_closed()


def _all_text(exc: BaseException) -> str:
    """What a traceback of ``exc`` prints (its chain included), and its attributes."""
    text = "".join(traceback.format_exception(exc))
    while exc is not None:
        text += repr(exc) + repr(vars(exc)) + str(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return text


async def test_a_failed_send_says_no_token(
    channel: TelegramChannel, bad_api_base: str, caplog: pytest.LogCaptureFixture
) -> None:
    channel.config.send_retries = 1
    channel.session.api = TelegramAPIServer.from_base(bad_api_base)
    await channel.session.close()  # no pooled connection to the fake server
    with caplog.at_level(logging.INFO), pytest.raises(Exception) as failed:
        await channel.send(OutboundMessage("telegram", str(OWNER_ID), "hello", outbox_id=3))
    text = _all_text(failed.value)
    assert SECRET not in text, text
    # it still says what failed, and where
    assert "/bot***/sendMessage" in str(failed.value), failed.value
    assert "failed (" in caplog.text  # the retry's WARNING
    assert SECRET not in caplog.text, caplog.text


async def test_polling_and_setup_failures_say_no_token(
    bad_api_base: str, host: RecordingHost, sleeps: SleepRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    channel = TelegramChannel(telegram_config(bad_api_base), None, sleep=sleeps)
    with caplog.at_level(logging.INFO, logger="my_agent.telegram"):
        await channel.start(host)
        try:
            await wait_until(lambda: "Telegram polling failed" in caplog.text)
        finally:
            await channel.stop()
    assert "Telegram setup failed" in caplog.text
    assert SECRET not in caplog.text, caplog.text


def test_a_failed_connect_keeps_its_cause() -> None:
    # A connect that failed names the host only, and the retries read it (nothing was
    # sent: retried freely): it stays chained.
    method = SendMessage(chat_id=1, text="hi")
    key = ConnectionKey("127.0.0.1", 9, False, True, None, None, None)
    try:
        try:
            raise ClientConnectorError(key, OSError(111, "Connection refused"))
        except ClientConnectorError as exc:
            raise TelegramNetworkError(method, f"ClientConnectorError: {exc}") from exc
    except TelegramNetworkError as error:
        without_token(error, TOKEN)
        assert isinstance(error.__cause__, ClientConnectorError)
        assert not unconfirmed(method, error)


def test_an_error_naming_the_url_loses_the_token_and_its_cause() -> None:
    method = SendMessage(chat_id=1, text="hi")
    url = f"url='http://127.0.0.1:443/bot{TOKEN}/sendMessage'"
    try:
        try:
            raise ClientPayloadError(f"Bad status line, {url}")
        except ClientPayloadError as exc:
            raise TelegramNetworkError(method, f"ClientPayloadError: {exc}") from exc
    except TelegramNetworkError as error:
        without_token(error, TOKEN)
        assert error.__cause__ is None and error.__suppress_context__
        assert error.message == (
            "ClientPayloadError: Bad status line, url='http://127.0.0.1:443/bot***/sendMessage'"
        )
        assert SECRET not in _all_text(error)
