"""A slash command from the owner's side (bot/command_flow.py) while storage refuses
part of its writes: recorded in its conversation once, run once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.channel import DeliveryError
from tests.conftest import OWNER_TELEGRAM_ID, settle
from tests.sqlite_driver import sqlite3
from tests.support import inbound


def _disk_full() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = 13  # type: ignore[attr-defined]  # SQLITE_FULL
    return exc


async def test_a_command_state_db_refuses_is_recorded_once_however_often_retried(
    services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 39): the command is recorded before its claim, and the claim
    # is what state.db refused; every retry (the router's three, then each round of the
    # spool's for as long as the outage lasted) found no claim and recorded it again:
    # one /rename showed as 8 commands in the transcript, and growing.
    monkeypatch.setattr("bot.router.STORAGE_RETRIES", (0, 0))

    async def alert_owner(text: str) -> None:
        pass

    monkeypatch.setattr(services, "alert_owner", alert_owner)
    await services.router.deliver(inbound("hello", sender=OWNER_TELEGRAM_ID, message_id="m-0"))
    await settle(services)
    conv_id = await services.index.conversation_for_ref("telegram", "m-0")
    runs = services.router.runs
    real_claim = runs.claim
    refusals = [1, 1, 1]  # the router's attempts; the spool's first round is taken

    async def claim(*args: Any, **kwargs: Any) -> Any:
        if refusals:
            refusals.pop()
            raise _disk_full()
        return await real_claim(*args, **kwargs)

    monkeypatch.setattr(runs, "claim", claim)
    rename = inbound("/rename Garden plans", sender=OWNER_TELEGRAM_ID, message_id="m-1")
    with pytest.raises(DeliveryError, match="storage failure"):
        await services.router.deliver(rename)
    async with asyncio.timeout(10):
        while services.health()["spooled"]:
            await asyncio.sleep(0.02)
    assert not refusals
    commands = [
        line
        for line in services.store.read_lines(conv_id)
        if line.get("type") == "event" and line.get("event") == "command"
    ]
    assert [(c["command"], c["args"]) for c in commands] == [("/rename", "Garden plans")]
    assert (await services.conversations.get(conv_id)).title == "Garden plans"
    await services.router.deliver(rename)  # the channel's redelivery: a duplicate
    assert len([x for x in services.store.read_lines(conv_id) if x.get("event") == "command"]) == 1
