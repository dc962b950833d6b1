"""A group the owner did not allow: its messages dropped, named in the log hourly with
their count, not once per message (channels/telegram/ignored_groups.py)."""

from __future__ import annotations

import logging

import pytest

from bot.bench.fakes.telegram_api import FakeTelegramServer
from channels.telegram import ignored_groups
from channels.telegram.adapter import TelegramChannel

from .conftest import (
    GROUP_ID,
    OTHER_GROUP_ID,
    OWNER_ID,
    ManualClock,
    RecordingHost,
    telegram_config,
)

NOT_ALLOWED = "not in channels.telegram.groups"


def _info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.INFO and "ignor" in r.getMessage() and "group" in r.getMessage()
    ]


async def test_a_busy_group_not_allowed_is_named_hourly_with_its_count(
    tg_server: FakeTelegramServer, host: RecordingHost, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: every message of a group not allowed was an INFO line; a busy group
    # (the bot added to it by anyone) flooded the log.
    caplog.set_level(logging.DEBUG, logger="my_agent.telegram")
    clock = ManualClock()
    ch = TelegramChannel(telegram_config(tg_server.base_url), None)
    ch.ignored.clock = clock
    await ch.start(host)
    try:
        for n in range(20):
            tg_server.inject_message(OTHER_GROUP_ID, f"chatter {n}", from_id=OWNER_ID)
        tg_server.inject_message(GROUP_ID, "@my_agent_bot hello", from_id=OWNER_ID)
        await host.wait_delivered(1)
        assert [m.text for m in host.delivered] == ["@my_agent_bot hello"]
        [first] = _info_lines(caplog)
        assert str(OTHER_GROUP_ID) in first and NOT_ALLOWED in first
        caplog.clear()
        clock.now += ignored_groups.LOG_EVERY  # an hour on: named again, with the count
        tg_server.inject_message(OTHER_GROUP_ID, "still chatting", from_id=OWNER_ID)
        tg_server.inject_message(OTHER_GROUP_ID, "and more", from_id=OWNER_ID)
        tg_server.inject_message(GROUP_ID, "@my_agent_bot again", from_id=OWNER_ID)
        await host.wait_delivered(2)
        [again] = _info_lines(caplog)
        assert "19 more ignored" in again
        caplog.clear()
    finally:
        await ch.stop()
    # what was dropped since it was last named is said at stop
    [summary] = _info_lines(caplog)
    assert f"1 more message(s) ignored in groups not allowed ({OTHER_GROUP_ID}: 1)" in summary


async def test_the_groups_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiogram.types import Chat

    monkeypatch.setattr(ignored_groups, "REMEMBERED", 3)
    ignored = ignored_groups.IgnoredGroups({}, clock=ManualClock())
    for chat_id in range(-110, -100):
        assert ignored.drops(Chat(id=chat_id, type="supergroup", title="spam"))
    assert list(ignored.seen) == [-103, -102, -101]
    assert not ignored.drops(Chat(id=OWNER_ID, type="private"))
