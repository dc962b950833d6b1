"""Answers of Telegram that only the owner can fix, told through the host's alerts: a
token of the wrong form (404 to getMe), another instance polling with the token (409);
and an answer that is not Telegram's at all (a proxy's HTML page), logged on one line."""

from __future__ import annotations

import json
import logging

import pytest
from aiogram.exceptions import ClientDecodeError

from bot.bench.fakes.telegram_api import FakeTelegramServer
from bot.events import OutboundMessage
from channels.telegram import poll_conflict
from channels.telegram.adapter import TelegramChannel
from channels.telegram.decode_errors import EXCERPT_CHARS, excerpt

from .conftest import (
    OWNER_ID,
    ManualClock,
    RecordingHost,
    SleepRecorder,
    telegram_config,
    wait_until,
)


async def test_a_404_to_get_me_is_a_refused_token_told_and_cleared(
    tg_server: FakeTelegramServer, host: RecordingHost
) -> None:
    # Regression: Telegram answers a token of the wrong form (a character lost in the
    # copy from BotFather) with 404 Not Found; it was taken for an outage, retried with
    # a warning every minute forever, and the owner never told.
    tg_server.fail_next("getMe", code=404, description="Not Found", times=2)
    ch = TelegramChannel(telegram_config(tg_server.base_url), None)
    ch.refused_retry = 0.3
    await ch.start(host)
    try:
        [problem] = ch.problems()
        assert "404 Not Found" in problem and "TELEGRAM_BOT_TOKEN" in problem
        assert host.alerts == [("telegram", "token", problem)] and ch.sending_blocked
        tg_server.inject_message(OWNER_ID, "back?")  # the third getMe is answered
        await host.wait_delivered(1, timeout=15)
        assert ch.started and ch.problems() == []
        assert json.loads(host.cursors[("telegram", "alert:token")]) == {}
    finally:
        await ch.stop()


OTHER_POLLER = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot "
    "instance is running"
)


def _kept(host: RecordingHost) -> dict[str, str]:
    return dict(json.loads(host.cursors.get(("telegram", "alert:conflict"), "{}")))


async def test_another_instance_polling_is_told_once_and_cleared_when_it_stops(
    tg_server: FakeTelegramServer, host: RecordingHost, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: a second instance polling with the token (its polls and ours ending
    # each other's with 409) was a warning per retry, forever; the owner, whose messages
    # went partly to the other instance, was never told.
    caplog.set_level(logging.DEBUG, logger="my_agent.telegram")
    clock = ManualClock()
    config = telegram_config(tg_server.base_url, reconnect_backoff_cap=0.05)
    tg_server.fail_next("getUpdates", code=409, description=OTHER_POLLER, times=4)
    ch = TelegramChannel(config, None)
    ch.conflicts.clock = clock
    await ch.start(host)
    try:
        await wait_until(lambda: len(tg_server.calls_of("getUpdates")) >= 5)
        [(channel, key, problem)] = {a for a in host.alerts if a[2]}
        assert (channel, key) == ("telegram", "conflict") and not ch.sending_blocked
        assert "409" in str(problem) and "another program polls" in str(problem)
        assert ch.problems() == [problem]
        loud = [r.levelname for r in caplog.records if r.levelno >= logging.WARNING]
        assert loud == ["WARNING", "WARNING", "ERROR"]  # not one per retry
        # polls between the other's: not over yet (they interleave)
        tg_server.inject_message(OWNER_ID, "one")
        await host.wait_delivered(1)
        assert ch.problems() and _kept(host)
    finally:
        await ch.stop()
    # a restart while it lasts: kept, not cleared at the first poll (then told again)
    ch = TelegramChannel(config, None)
    ch.conflicts.clock = clock
    await ch.start(host)
    try:
        tg_server.inject_message(OWNER_ID, "two")
        await host.wait_delivered(2)
        assert _kept(host)
        clock.now += poll_conflict.CLEAR_AFTER  # no conflict for ten minutes: over
        tg_server.inject_message(OWNER_ID, "three")
        await host.wait_delivered(3)
        await wait_until(lambda: not _kept(host))
        assert ch.problems() == [] and host.alerts[-1] == ("telegram", "conflict", None)
    finally:
        await ch.stop()


BAD_GATEWAY = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n" + "<!-- padding -->\n" * 200 + "</html>"
)


async def test_an_html_answer_is_logged_on_one_line_with_an_excerpt(
    tg_server: FakeTelegramServer,
    host: RecordingHost,
    sleeps: SleepRecorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Regression: a proxy's HTML 502 page in place of Telegram's JSON was logged as
    # "Telegram polling failed (Failed to decode object\nCaused from error: ...\nContent:
    # <html>...)": several lines and the whole body (journalctl showed a page of HTML).
    caplog.set_level(logging.WARNING, logger="my_agent.telegram")
    tg_server.answer_raw_next("getUpdates", BAD_GATEWAY)
    tg_server.answer_raw_next("sendMessage", BAD_GATEWAY)
    ch = TelegramChannel(telegram_config(tg_server.base_url), None, sleep=sleeps)
    await ch.start(host)
    try:
        tg_server.inject_message(OWNER_ID, "still here")
        await host.wait_delivered(1, timeout=15)
        with pytest.raises(ClientDecodeError) as raised:  # still aiogram's error
            await ch.send(OutboundMessage("telegram", str(OWNER_ID), "hello"))
    finally:
        await ch.stop()
    [line] = [r.getMessage() for r in caplog.records if "polling failed" in r.getMessage()]
    for text in (line, str(raised.value)):
        assert "\n" not in text and "\r" not in text and len(text) < 400, text
        assert "JSONDecodeError" in text and "502 Bad Gateway" in text
        assert "<html>\\r\\n<head>" in text and "</html>" not in text
        assert f"({len(BAD_GATEWAY) - EXCERPT_CHARS} more characters)" in text


def test_an_excerpt_escapes_controls_and_says_what_was_cut() -> None:
    assert excerpt("a\nb\tc\x1b[0m\x85\u2028") == "a\\nb\\tc\\x1b[0m\\x85\\u2028"
    assert excerpt("é" * 5, limit=3) == "ééé… (2 more characters)"
