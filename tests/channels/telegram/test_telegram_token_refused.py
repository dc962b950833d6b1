"""Replies owed while Telegram refuses the bot token (401): held, not lost, not logged per try."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bot.bench.fakes.telegram_api import TOKEN, FakeTelegramServer
from bot.events import OutboundMessage
from bot.status_reads import stored_channel_problems
from channels.telegram import token_state
from tests.support import wait_logged

from .conftest import OWNER_ID, assert_no_tasks_left
from .stack import Stack, query_db, start_stack, texts

pytestmark = pytest.mark.slow

HELD = ["first, held", "second, held", "third, held"]


async def _queue_while_refused(
    stack: Stack, tg_server: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Revoke the token, then queue the replies the daemon owes (in this order)."""
    caplog.set_level(logging.INFO)
    stack.channel.refused_retry = 0.3
    stack.services.outbox.max_attempts = 3  # given up on (the reply lost) after 3
    tg_server.token = "123456:revoked"
    for text in HELD:
        await stack.services.outbox.enqueue(OutboundMessage("telegram", str(OWNER_ID), text))
    # The refusal noticed and told, and the first send held: awaited, not assumed done
    # within the bounded wait below (a busy machine could outlast it).
    await wait_logged(caplog, "telling the owner: telegram")
    await wait_logged(caplog, "sends to Telegram are held")
    # A negative check from here: nothing is tried, nothing given up on, in the time of
    # dozens of the outbox's retries (base 0.05 s).
    await asyncio.sleep(2.0)


async def _rows(stack: Stack) -> list[tuple[str, int]]:
    rows = await stack.services.outbox.db.fetchall(
        "SELECT status, attempts FROM outbox ORDER BY id"
    )
    return [(r[0], r[1]) for r in rows]


def _loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records if r.levelno >= 30]


async def test_replies_held_by_a_refused_token_go_out_in_order_once_it_is_restored(
    tmp_path: Path, tg_server: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stack = await start_stack(tmp_path / "data", tg_server)
    try:
        caplog.clear()
        await _queue_while_refused(stack, tg_server, caplog)
        # Before, each reply was retried as a temporary failure: a warning per attempt,
        # and after max_attempts the outbox gave up on it (the reply lost).
        assert await _rows(stack) == [("pending", 0)] * 3
        # said once, and the owner told once (not through Telegram: nothing waits)
        error, told = _loud(caplog)
        assert error.startswith("ERROR Telegram refused the bot token")
        assert told.startswith("WARNING telling the owner: telegram: Telegram refused")
        assert stack.channel.problems()
        tg_server.token = TOKEN  # restored with BotFather: no restart
        await stack.wait(lambda: len(tg_server.sent_to(OWNER_ID)) >= 3)
        await asyncio.sleep(0.3)
        assert texts(tg_server.sent_to(OWNER_ID)) == HELD  # in order, once each
        assert [status for status, _ in await _rows(stack)] == ["sent"] * 3
        assert stack.channel.problems() == [] and stack.channel.started
    finally:
        await stack.stop()
    await assert_no_tasks_left()


async def test_replies_held_by_a_refused_token_survive_a_stop_and_go_after_a_restart(
    tmp_path: Path,
    tg_server: FakeTelegramServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(token_state, "HELD_RETRY_AFTER_STOP", 3.0)  # 60 s in a daemon
    stack = await start_stack(tmp_path / "data", tg_server)
    try:
        await _queue_while_refused(stack, tg_server, caplog)
        assert await _rows(stack) == [("pending", 0)] * 3
    finally:
        loop = asyncio.get_running_loop()
        asked = loop.time()
        await stack.stop()
    assert loop.time() - asked < 5  # the held send gives up at once
    # kept, tried once more no sooner than HELD_RETRY_AFTER_STOP (not over and over
    # while the stop drains the replies, each try an attempt and a warning)
    rows = query_db(stack.config.state_path, "SELECT status, attempts FROM outbox ORDER BY id")
    assert rows == [("pending", 1), ("pending", 0), ("pending", 0)]
    await assert_no_tasks_left()
    assert tg_server.sent_to(OWNER_ID) == []
    tg_server.token = TOKEN  # the owner set a working token, and restarts
    stack = await start_stack(tmp_path / "data", tg_server)
    try:
        await stack.wait(lambda: len(tg_server.sent_to(OWNER_ID)) >= 3)
        await asyncio.sleep(0.3)
        assert texts(tg_server.sent_to(OWNER_ID)) == HELD
        assert [status for status, _ in await _rows(stack)] == ["sent"] * 3
    finally:
        await stack.stop()
    await assert_no_tasks_left()


async def test_a_refused_token_is_told_to_the_owner_without_waiting_for_telegram(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    # Regression: the refusal was logged and kept for status, and the owner was not
    # told; told through Telegram (the escalation channel here), the alert would have
    # waited for the token it was about. With no other channel to the owner it goes to
    # the dashboard (its "notice") at once, and the status line keeps it.
    stack = await start_stack(tmp_path / "data", tg_server)
    notices: list[str] = []

    async def notice(text: str) -> None:
        notices.append(text)

    stack.services.bus.subscribe("notice", notice)
    try:
        stack.channel.refused_retry = 0.3
        tg_server.token = "123456:revoked"
        await stack.wait(lambda: any("refused the bot token" in n for n in notices))
        assert stored_channel_problems(stack.config.state_path, ["telegram"]) == [
            f"telegram: {stack.channel.problems()[0]}"
        ]
        tg_server.token = TOKEN
        await stack.wait(lambda: stack.channel.started and not stack.channel.problems())
        tg_server.inject_message(OWNER_ID, "back?")
        await stack.wait(lambda: len(tg_server.sent_to(OWNER_ID)) >= 1)
        # cleared for status, and never sent late to Telegram once the token worked
        assert stored_channel_problems(stack.config.state_path, ["telegram"]) == []
        assert not any("refused" in t for t in texts(tg_server.sent_to(OWNER_ID)))
        assert len([n for n in notices if "refused the bot token" in n]) == 1
    finally:
        await stack.stop()
    await assert_no_tasks_left()
