"""Answers of Telegram that only the owner can fix, told through the host's alerts: a
token of the wrong form (404 to getMe), another instance polling with the token (409)."""

from __future__ import annotations

import json

from bot.bench.fakes.telegram_api import FakeTelegramServer
from channels.telegram.adapter import TelegramChannel

from .conftest import OWNER_ID, RecordingHost, telegram_config


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
        assert host.alerts == [("telegram", "token", problem, True)]
        tg_server.inject_message(OWNER_ID, "back?")  # the third getMe is answered
        await host.wait_delivered(1, timeout=15)
        assert ch.started and ch.problems() == []
        assert json.loads(host.cursors[("telegram", "alert:token")]) == {}
    finally:
        await ch.stop()
