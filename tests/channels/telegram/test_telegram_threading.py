"""In a private chat, a reply that lands after newer messages says what it answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.fakes.telegram_api import FakeTelegramServer
from channels.telegram.chat_positions import CHATS_KEPT, CHATS_REMEMBERED, ChatPositions

from .conftest import OWNER_ID, assert_no_tasks_left
from .stack import Stack, start_stack

pytestmark = pytest.mark.slow


def _threaded_under(tg_server: FakeTelegramServer) -> list[int | None]:
    return [
        (c.get("reply_parameters") or {}).get("message_id")
        for c in tg_server.calls_of("sendMessage")
        if c["chat_id"] == str(OWNER_ID)
    ]


async def test_the_answer_to_an_edit_made_after_the_reply_is_threaded_under_it(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    original = tg_server.inject_message(OWNER_ID, "meet at 5?")
    await tg_server.wait_sent(OWNER_ID, 1)
    tg_server.inject_edit(original, "meet at 6?")  # the owner fixes it, already answered
    await tg_server.wait_sent(OWNER_ID, 2)
    latest = tg_server.inject_message(OWNER_ID, "and bring the keys")
    await tg_server.wait_sent(OWNER_ID, 3)
    # Before, the second answer came unthreaded below the first: on the phone it read
    # as a second answer to the same words, the edited message far above it. The first
    # and the last answer the newest message, right above them: not threaded.
    assert _threaded_under(tg_server) == [None, original["message_id"], None]
    assert latest["message_id"] > original["message_id"]


def test_chat_positions_are_kept_for_the_most_recent_chats_only() -> None:
    positions = ChatPositions()
    positions.saw(1, 10)
    positions.saw(1, 7)  # an older one seen late (a redelivery): the newest stays
    assert positions.behind(1, 9) and not positions.behind(1, 10)
    for chat in range(2, CHATS_REMEMBERED + 2):
        positions.saw(chat, 1)
    assert not positions.behind(1, 9)  # forgotten: unthreaded, as after a restart


async def test_threading_knows_the_newest_message_across_a_restart(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    data = tmp_path / "data"
    first = await start_stack(data, tg_server)
    try:
        original = tg_server.inject_message(OWNER_ID, "meet at 5?")
        await tg_server.wait_sent(OWNER_ID, 1)
    finally:
        await first.stop()
    second = await start_stack(data, tg_server)
    try:
        tg_server.inject_edit(original, "meet at 6?")  # already answered, before the stop
        await tg_server.wait_sent(OWNER_ID, 2)
    finally:
        await second.stop()
    await assert_no_tasks_left()
    # Before, the positions were in memory only: after the restart the answer to the
    # edit came unthreaded, below the first answer, as if it answered that one.
    assert _threaded_under(tg_server) == [None, original["message_id"]]


def test_chat_positions_kept_are_the_recent_private_chats_and_unreadable_ones_ignored() -> None:
    positions = ChatPositions()
    positions.saw(-100, 50)  # a group: its answers are threaded anyway
    for chat in range(1, CHATS_KEPT + 2):
        positions.saw(chat, 10)
    restored = ChatPositions()
    restored.load(positions.dump())
    assert restored.behind(CHATS_KEPT + 1, 9) and not restored.behind(1, 9)
    assert not restored.behind(-100, 9)
    restored.load("not json")  # said and ignored: what was known stays
    assert restored.behind(2, 9)
