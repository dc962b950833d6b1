"""SQLite refusing a write ("database or disk is full") while the files still take it:
the message is held and retried like one the file refused, the owner is told, and a
third party's record file never gets the message twice."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bot.channel import DeliveryError
from bot.events import InboundMessage
from bot.spool import InboundSpool
from tests.conftest import OWNER_TELEGRAM_ID
from tests.sqlite_driver import sqlite3
from tests.support import inbound

SQLITE_FULL = 13


def _disk_full() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = SQLITE_FULL  # type: ignore[attr-defined]
    return exc


async def _until(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


@pytest.fixture
def alerts(services: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr("bot.router.STORAGE_RETRIES", ())
    sent: list[str] = []

    async def alert_owner(text: str) -> None:
        sent.append(text)

    monkeypatch.setattr(services, "alert_owner", alert_owner)
    return sent


async def test_a_strangers_message_the_index_refused_is_recorded_once(
    services: Any, alerts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the party's file took the message, the tables refused it; the retry
    # (the spool's, or the channel's redelivery) found no trace of it in the tables and
    # appended it, and the party's first line, to the file a second time.
    db = services.external.db
    real_run = db.run
    refusals = [1]

    async def run(fn: Any, **kw: Any) -> Any:
        if refusals and getattr(fn, "__name__", "") == "_apply":
            refusals.pop()
            raise _disk_full()
        return await real_run(fn, **kw)

    monkeypatch.setattr(db, "run", run)
    message = inbound("hello from a stranger", sender="999", message_id="s-1")
    with pytest.raises(DeliveryError, match="storage failure"):
        await services.router.deliver(message)
    assert len(alerts) == 1 and "database or disk is full" in alerts[0]
    await _until(lambda: services.health()["spooled"] == 0)  # the spool stored it
    await services.router.deliver(message)  # the channel's redelivery: a duplicate
    [path] = services.external.directory.glob("p*.jsonl")
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert [line["type"] for line in lines].count("meta") == 1
    inbound_lines = [line for line in lines if line.get("direction") == "in"]
    assert [line["messageRef"] for line in inbound_lines] == ["s-1"]
    # its flow ran once, after it was stored: one acknowledgement, one escalation
    kinds = [line.get("kind") or line.get("event") for line in lines]
    assert kinds.count("acknowledgement") == 1 and kinds.count("escalation") == 1
    rows = await services.index_db.fetchall(
        "SELECT message_ref FROM external_messages WHERE direction = 'in'"
    )
    assert rows == [("s-1",)]


async def test_sqlite_refusing_an_owners_message_holds_it_and_tells_the_owner(
    services: Any, alerts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: only an OSError was storage trouble; SQLite's "database or disk is
    # full" went to the channel as a bug: not held, not retried, the owner not told.
    append_turn = services.conversations.append_turn
    refusals = [1]

    async def refusing(*args: Any, **kwargs: Any) -> Any:
        if refusals:
            refusals.pop()
            raise _disk_full()
        return await append_turn(*args, **kwargs)

    monkeypatch.setattr(services.conversations, "append_turn", refusing)
    message = inbound("remember the milk", sender=OWNER_TELEGRAM_ID, message_id="own-1")
    with pytest.raises(DeliveryError, match="storage failure"):
        await services.router.deliver(message)
    assert len(alerts) == 1
    await _until(lambda: services.health()["spooled"] == 0)
    assert await services.index.conversation_for_ref("telegram", "own-1") is not None


async def test_the_spool_keeps_retrying_past_a_sqlite_refusal_and_a_bug() -> None:
    # Regression: only an OSError was retried; any other error ended the spool's task
    # with the message left at the head, and it and every message held after it stayed
    # in memory, never retried (lost at the next stop).
    routed: list[str] = []
    drained: list[bool] = []
    failures = {"a": [_disk_full()], "b": [RuntimeError("a bug")]}

    async def route(message: InboundMessage) -> None:
        pending = failures.get(message.message_id)
        if pending:
            raise pending.pop()
        routed.append(message.message_id)

    spool = InboundSpool(route, lambda: drained.append(True))
    for ref in ("a", "b", "c"):
        spool.hold(inbound("x", message_id=ref))
    await _until(lambda: drained, timeout=5)
    # the refusal is retried; the bug is logged and let go (its channel redelivers it)
    assert routed == ["a", "c"] and len(spool) == 0
