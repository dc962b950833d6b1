"""The inbound spool (bot/spool.py): a message the disk refused is held, reported in the
health, stored once writes succeed again, and the owner is alerted once per outage."""

from __future__ import annotations

import asyncio
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
