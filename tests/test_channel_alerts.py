"""A channel's problem that will not fix itself (bot/channel_alerts.py, the router's
``alert_owner``): told to the owner once a period across restarts, kept for
``my-agent status`` while the daemon is stopped, cleared (and told again at once when
it comes back) once solved."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot import redaction
from bot.status_reads import stored_channel_problems
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    shutdown_services,
    start_telegram_core,
    telegram_config,
)

PROBLEM = "the IMAP server refused the login (NO bad password; imap.example.com:993)"


async def test_a_problem_is_told_once_kept_for_status_and_cleared(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    services, telegram = await start_telegram_core(config)
    try:
        router = services.router
        await router.alert_owner("email", "imap", PROBLEM)
        await router.alert_owner("email", "imap", PROBLEM)  # every later attempt says it
        [told] = await telegram.wait_count(1)
        assert told.kind == "notice" and PROBLEM in told.text
        assert "email" in told.text
        assert stored_channel_problems(config.state_path, ["email"]) == [f"email: {PROBLEM}"]
    finally:
        await shutdown_services(services)
    # A restart in a loop, the problem still there: kept, not told again.
    services, telegram = await start_telegram_core(config)
    try:
        await services.router.alert_owner("email", "imap", PROBLEM)
        # another problem, told: had the first been told again, it would have gone first
        await services.router.alert_owner("telegram", "token", "another")
        [other] = await telegram.wait_count(1)
        assert "another" in other.text and PROBLEM not in other.text
        telegram.sent.clear()
        # Solved: the kept line is gone, and when it comes back that is news.
        await services.router.alert_owner("email", "imap", None)
        assert stored_channel_problems(config.state_path, ["email"]) == []
        await services.router.alert_owner("email", "imap", PROBLEM)
        [again] = await telegram.wait_count(1)
        assert PROBLEM in again.text
    finally:
        await shutdown_services(services)


async def test_clearing_what_was_never_raised_writes_nothing(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    services, telegram = await start_telegram_core(config)
    try:
        await services.router.alert_owner("email", "imap", None)
        assert await services.router.get_cursor("email", "alert:imap") is None
        assert telegram.sent == []
    finally:
        await shutdown_services(services)


async def test_while_the_escalation_channel_cannot_send_alerts_go_by_another(
    tmp_path: Path,
) -> None:
    # Regression: with Telegram refusing the bot token, owner alerts (that one, or an
    # IMAP login refused) went to Telegram, the escalation channel, where the send
    # waited for the token; a stop lost them.
    config = telegram_config(tmp_path)
    services, telegram = await start_telegram_core(config)
    email = await attach_channel(services, RecordingChannel("email"))
    telegram.sending_blocked = True  # type: ignore[attr-defined]
    try:
        await services.router.alert_owner("telegram", "token", "token refused")
        await services.router.alert_owner("email", "imap", PROBLEM)
        told = await email.wait_count(2)
        assert sorted("token refused" in m.text for m in told) == [False, True]
        assert all(m.channel == "email" for m in told) and telegram.sent == []
        telegram.sending_blocked = False  # type: ignore[attr-defined]
        await services.router.alert_owner("telegram", "other", "back to telegram")
        [back] = await telegram.wait_count(1)
        assert "back to telegram" in back.text
    finally:
        await shutdown_services(services)


async def test_with_no_other_channel_it_is_the_dashboards_and_the_status_lines(
    tmp_path: Path,
) -> None:
    config = telegram_config(tmp_path)
    services, telegram = await start_telegram_core(config)
    told = asyncio.Event()
    notices: list[str] = []

    async def notice(text: str) -> None:
        notices.append(text)
        told.set()

    services.bus.subscribe("notice", notice)
    telegram.sending_blocked = True  # type: ignore[attr-defined]
    try:
        await services.router.alert_owner("telegram", "token", "token refused")
        await asyncio.wait_for(told.wait(), 10)
        assert "token refused" in notices[0] and telegram.sent == []
        problems = stored_channel_problems(config.state_path, ["telegram"])
        assert problems == ["telegram: token refused"]
    finally:
        await shutdown_services(services)


async def test_a_problem_naming_a_secret_is_kept_and_told_masked(tmp_path: Path) -> None:
    # Regression (session 40): a channel's problem quoting a library's error text kept a
    # secret in state.db and sent it to the owner (aiohttp's names the Bot API's URL).
    config = telegram_config(tmp_path)
    redaction.SECRETS.use(["hunter22-mail"])  # (tests/conftest.py puts them back)
    services, telegram = await start_telegram_core(config)
    try:
        await services.router.alert_owner("email", "imap", "NO [AUTH] hunter22-mail refused")
        [told] = await telegram.wait_count(1)
        assert "NO [AUTH] *** refused" in told.text and "hunter22" not in told.text
        kept = stored_channel_problems(config.state_path, ["email"])
        assert kept == ["email: NO [AUTH] *** refused"]
        await services.alert_owner("the send failed: hunter22-mail")
        [_, direct] = await telegram.wait_count(2)
        assert direct.text == "the send failed: ***"
    finally:
        await shutdown_services(services)
