"""A public group allowed by its ``@name`` is the chat first seen under that name: a
stranger's group given the name later (once the group gave it up) is not answered."""

from __future__ import annotations

from typing import Any

from bot.bench.fakes.telegram_api import FakeTelegramServer
from channels.telegram.adapter import TelegramChannel

from .conftest import STRANGER_ID, RecordingHost, SleepRecorder, telegram_config

FAMILY, IMPOSTOR = -1001110001, -1002220002


def _say(server: FakeTelegramServer, chat_id: int, text: str) -> None:
    msg: dict[str, Any] = server.make_message(chat_id, text, from_id=STRANGER_ID)
    msg["chat"]["username"] = "Family_Pub"  # Telegram: names are case-insensitive
    server.push_update("message", msg)


async def test_another_chat_under_an_allowed_groups_name_is_ignored_across_a_restart(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> None:
    # Regression: the name was matched at every message, so once the family's group
    # gave it up, whoever took it had the bot answer their group as the allowed one.
    cfg = telegram_config(tg_server.base_url, groups=[{"id": "@family_pub", "respond": "always"}])
    first = TelegramChannel(cfg, None, sleep=sleeps)
    await first.start(host)
    try:
        _say(tg_server, FAMILY, "the family's")
        await host.wait_delivered(1)
        _say(tg_server, IMPOSTOR, "a stranger's group, renamed")
        _say(tg_server, FAMILY, "the family's again")
        await host.wait_delivered(2)
    finally:
        await first.stop()
    second = TelegramChannel(cfg, None, sleep=sleeps)  # kept across a restart
    await second.start(host)
    try:
        _say(tg_server, IMPOSTOR, "after a restart")
        _say(tg_server, FAMILY, "still the family")
        await host.wait_delivered(3)
    finally:
        await second.stop()
    assert [(m.chat_id, m.text) for m in host.delivered] == [
        (str(FAMILY), "the family's"),
        (str(FAMILY), "the family's again"),
        (str(FAMILY), "still the family"),
    ]
