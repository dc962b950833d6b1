"""The inbound spool (bot/spool.py): a message the disk refused is held, reported in the
health, stored once writes succeed again, and the owner is alerted once per outage."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import pytest

from bot.channel import DeliveryError
from bot.events import InboundMessage
from bot.spool import InboundSpool
from tests.conftest import OWNER_TELEGRAM_ID
from tests.support import inbound


async def _until(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_held_messages_are_routed_in_order_then_drained() -> None:
    routed: list[str] = []
    drained: list[bool] = []

    async def route(message: InboundMessage) -> None:
        routed.append(message.message_id)

    spool = InboundSpool(route, lambda: drained.append(True))
    spool.hold(inbound("one", message_id="a"))
    spool.hold(inbound("two", message_id="b"))
    assert len(spool) == 2
    await _until(lambda: drained)
    assert routed == ["a", "b"]
    assert len(spool) == 0


async def test_a_refused_message_is_stored_once_the_disk_accepts_writes(
    services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.router.STORAGE_RETRIES", ())
    alerts: list[str] = []

    async def alert_owner(text: str) -> None:
        alerts.append(text)

    monkeypatch.setattr(services, "alert_owner", alert_owner)
    append_turn = services.conversations.append_turn
    failing = True

    async def flaky_append_turn(*args: Any, **kwargs: Any) -> Any:
        if failing:
            raise OSError(28, "No space left on device")
        return await append_turn(*args, **kwargs)

    monkeypatch.setattr(services.conversations, "append_turn", flaky_append_turn)
    message = inbound("remember the milk", sender=OWNER_TELEGRAM_ID, message_id="held-1")
    with pytest.raises(DeliveryError, match="storage failure"):
        await services.router.deliver(message)
    assert services.health()["spooled"] == 1
    assert len(alerts) == 1 and "Storage problem" in alerts[0]

    failing = False
    await _until(lambda: services.health()["spooled"] == 0)
    assert services.router._storage_alerted is False  # the next outage alerts again
    conv_id = await services.index.conversation_for_ref("telegram", "held-1")
    assert conv_id is not None
    turns = [
        line["content"]
        for line in services.store.read_lines(conv_id)
        if line.get("type") == "turn" and line.get("role") == "user"
    ]
    assert turns == ["remember the milk"]


async def test_a_refused_index_write_of_a_stored_turn_is_answered_now_once(
    services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Guard (QA 23: "the retry is treated as a duplicate and the reply waits for the
    # next start"): the transcript took the owner's message and SQLite refused its index
    # write ("database or disk is full"). The message is not refused to the channel nor
    # held: it is answered now, once, and the index catches up at its next write.
    import bot.conversation_writes as writes
    from tests.conftest import settle
    from tests.sqlite_driver import sqlite3

    monkeypatch.setattr("bot.router.STORAGE_RETRIES", ())
    await services.router.deliver(inbound("hello", sender=OWNER_TELEGRAM_ID, message_id="m-0"))
    await settle(services)
    real_apply = writes.apply_lines
    refusals = 1

    def refusing_apply(*args: Any, **kwargs: Any) -> Any:
        nonlocal refusals
        if refusals:
            refusals -= 1
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode = 13  # SQLITE_FULL
            raise exc
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(writes, "apply_lines", refusing_apply)
    message = inbound("remember the milk", sender=OWNER_TELEGRAM_ID, message_id="held-1")
    await services.router.deliver(message)  # neither refused nor held
    assert refusals == 0 and services.health()["spooled"] == 0
    await settle(services)
    conv_id = await services.index.conversation_for_ref("telegram", "held-1")
    assert conv_id is not None  # caught up by the reply's write
    await services.router.deliver(message)  # the channel's redelivery: a duplicate
    await settle(services)
    lines = services.store.read_lines(conv_id)
    turns = [(x["role"], x["turnNumber"]) for x in lines if x.get("type") == "turn"]
    assert turns == [("user", 1), ("assistant", 1), ("user", 2), ("assistant", 2)]


async def test_a_chat_whose_messages_stay_refused_does_not_hold_up_the_others() -> None:
    """Retried head first and alone, a message that cannot be stored until a restart (its
    conversation's transcript was unreadable at start) kept every other chat's held
    messages in memory after the disk had room again. The refused chat's messages stay
    held in their order; the others are stored."""
    routed: list[str] = []
    drained: list[bool] = []
    refuse_b_once = [True]

    async def route(message: InboundMessage) -> None:
        if message.chat_id == "stuck":
            raise OSError(errno.EACCES, "transcript could not be read at start")
        if message.message_id == "b" and refuse_b_once[0]:
            refuse_b_once[0] = False
            raise OSError(errno.ENOSPC, "No space left on device")
        routed.append(message.message_id)

    spool = InboundSpool(route, lambda: drained.append(True))
    spool.hold(inbound("one", chat="stuck", message_id="s1"))
    spool.hold(inbound("two", chat="stuck", message_id="s2"))
    spool.hold(inbound("three", chat="other", message_id="b"))
    spool.hold(inbound("four", chat="other", message_id="c"))
    await _until(lambda: routed == ["b", "c"], timeout=5)
    assert [m.message_id for m in spool._held] == ["s1", "s2"] and not drained


async def test_a_held_message_outlives_a_kill_before_the_disk_has_room(tmp_path: Any) -> None:
    # Regression (session 39): held messages reached the spool file only at a clean
    # stop; a kill -9 (or a power cut) before the disk had room again lost them.
    from bot.spool_file import SPOOL_NAME

    async def full(message: InboundMessage) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    spool = InboundSpool(full, lambda: None)
    assert await spool.restore(tmp_path) == 0
    spool.hold(inbound("the alarm code is 4711", message_id="k-1"))
    await _until(lambda: (tmp_path / SPOOL_NAME).exists())
    spool.hold(inbound("and the gate is 0815", message_id="k-2"))
    await _until(lambda: (tmp_path / SPOOL_NAME).read_bytes().count(b"\n") == 2)
    # killed here: no stop, no save; the next start finds both, each once

    routed: list[str] = []

    async def room(message: InboundMessage) -> None:
        routed.append(message.message_id)

    drained: list[bool] = []
    after = InboundSpool(room, lambda: drained.append(True))
    assert await after.restore(tmp_path) == 2
    await _until(lambda: drained)
    assert routed == ["k-1", "k-2"]
    assert not (tmp_path / SPOOL_NAME).exists()
    task = spool._task
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_message_held_when_the_daemon_stops_is_stored_at_the_next_start(
    config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 39): the spool was memory only. A message held on a full disk
    # (the loopback answered 202 "held, do not send it again", the dashboard kept=true)
    # was lost by a restart before space came back: the daemon exited 0, nothing was
    # stored after the restart, and the stop logged nothing about it.
    from bot.daemon_stop import shutdown
    from bot.services import open_services
    from bot.spool import HeldForRetry
    from bot.spool_file import RESERVE_BYTES, RESERVE_NAME, SPOOL_NAME
    from tests.conftest import shutdown_services

    monkeypatch.setattr("bot.router.STORAGE_RETRIES", ())
    data = config.data_dir
    services = await open_services(config)
    try:
        assert await services.router.spool.restore(data) == 0  # the daemon's start
        assert (data / RESERVE_NAME).stat().st_size == RESERVE_BYTES

        async def alert_owner(text: str) -> None:
            pass

        async def full(*args: Any, **kwargs: Any) -> Any:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(services, "alert_owner", alert_owner)
        monkeypatch.setattr(services.conversations, "append_turn", full)
        message = inbound("the alarm code is 4711", sender=OWNER_TELEGRAM_ID, message_id="h-1")
        with pytest.raises(HeldForRetry):
            await services.router.deliver(message)
    finally:
        await shutdown(services, [], None, drain_seconds=1)  # tried once more: still full
    assert (data / SPOOL_NAME).exists()

    services = await open_services(config)  # the restart, with room again
    try:
        assert await services.router.spool.restore(data) == 1
        await _until(lambda: services.health()["spooled"] == 0)
        conv_id = await services.index.conversation_for_ref("telegram", "h-1")
        assert conv_id is not None
        turns = [
            line["content"]
            for line in services.store.read_lines(conv_id)
            if line.get("type") == "turn" and line.get("role") == "user"
        ]
        assert turns == ["the alarm code is 4711"]
        assert not (data / SPOOL_NAME).exists()  # all of it stored: the file goes
    finally:
        await shutdown_services(services)


async def test_the_stop_tries_the_held_messages_once_more() -> None:
    routed: list[str] = []
    refusing = [True]

    async def route(message: InboundMessage) -> None:
        if refusing[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        routed.append(message.message_id)

    spool = InboundSpool(route, lambda: None)
    spool.hold(inbound("one", message_id="a"))
    spool.hold(inbound("one", message_id="a"))  # a channel's redelivery: held once
    await asyncio.sleep(0)  # its first round, refused: the next waits a second
    refusing[0] = False  # space is back as the daemon stops
    await spool.stop(timeout=5)
    assert routed == ["a"] and len(spool) == 0
    spool.hold(inbound("two", message_id="b"))  # after the stop: kept for the file only
    await asyncio.sleep(0.05)
    assert routed == ["a"] and len(spool) == 1
