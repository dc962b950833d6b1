"""Flood control (429 ``retry_after``) while a long reply goes out in parts, and the
"typing…" indicator meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from bot.bench.fakes.telegram_api import ApiError, FakeTelegramServer
from bot.channel import RetryLater
from bot.events import OutboundMessage
from channels.telegram import typing_indicator
from channels.telegram.adapter import TelegramChannel

from .conftest import (
    OWNER_ID,
    RecordingHost,
    SleepRecorder,
    fail_sends,
    flood_checks,
    wait_until,
)


def _three_parts() -> str:
    return "\n\n".join(f"{word} " * 600 for word in ("alpha", "beta", "gamma"))


async def test_a_long_flood_wait_mid_reply_sends_each_part_once_in_order(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    msg = OutboundMessage("telegram", str(OWNER_ID), _three_parts(), outbox_id=31)
    tg_server.fail_next("sendMessage", code=429, retry_after=40)  # over max_retry_after
    with pytest.raises(RetryLater) as info:
        await channel.send(msg)
    assert info.value.retry_after == 40  # the outbox sends no sooner than Telegram said
    assert tg_server.sent == []
    await channel.send(msg)  # the outbox again, later
    assert [m["text"].split()[0] for m in tg_server.sent] == ["alpha", "beta", "gamma"]
    tg_server.sent.clear()
    # part 2 refused by a flood wait: handed back, and part 1 is not sent again
    fail_sends(tg_server, {2}, ApiError(429, "Too Many Requests: retry after 40", 40))
    msg = OutboundMessage("telegram", str(OWNER_ID), _three_parts(), outbox_id=32)
    with pytest.raises(RetryLater):
        await channel.send(msg)
    await channel.send(msg)
    assert [m["text"].split()[0] for m in tg_server.sent] == ["alpha", "beta", "gamma"]


async def test_typing_is_not_asked_during_a_chat_actions_own_flood_wait(
    tg_server: FakeTelegramServer, channel: TelegramChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(typing_indicator, "TYPING_REFRESH_SECONDS", 0.01)
    tg_server.fail_next("sendChatAction", code=429, retry_after=30)
    held = flood_checks(channel)
    await channel.typing(str(OWNER_ID))
    # dozens of refreshes, each held (counted: a fixed 0.3 s could hold none on a busy
    # machine, and the check below would then prove nothing)
    await wait_until(lambda: held.count(True) >= 20)
    # Before, the 429 was ignored and "typing…" asked again at every refresh.
    assert len(tg_server.calls_of("sendChatAction")) == 1
    assert str(OWNER_ID) in channel._typing  # shown again once the wait is over


async def test_typing_is_not_asked_while_a_send_waits_out_a_flood(
    tg_server: FakeTelegramServer, channel: TelegramChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(typing_indicator, "TYPING_REFRESH_SECONDS", 0.01)
    waits: list[float] = []
    release = asyncio.Event()

    async def flood_wait(seconds: float) -> None:
        waits.append(seconds)
        await release.wait()

    channel.sender.sleep = flood_wait
    held = flood_checks(channel)
    await channel.typing(str(OWNER_ID))
    tg_server.fail_next("sendMessage", code=429, retry_after=3)  # waited out in the sender
    send = asyncio.ensure_future(
        channel.send(OutboundMessage("telegram", str(OWNER_ID), _three_parts()))
    )
    await wait_until(lambda: waits == [3.0])
    # A refresh held by the flood: any chat action asked before it has been answered
    # (counted by the server). Before, the count was taken at once, and one still on
    # its way to the server could land after it.
    await wait_until(lambda: True in held)
    asked = len(tg_server.calls_of("sendChatAction"))
    # dozens of refreshes within the wait, counted, each held
    await wait_until(lambda: held.count(True) >= 20)
    # Before, "typing…" went on every refresh while every send to the chat waited.
    assert len(tg_server.calls_of("sendChatAction")) == asked
    release.set()
    await send
    assert [m["text"].split()[0] for m in tg_server.sent] == ["alpha", "beta", "gamma"]
    assert str(OWNER_ID) not in channel._typing


async def test_a_reply_buttons_prompt_waits_out_a_long_flood_and_holds_nothing_else(
    tg_server: FakeTelegramServer,
    channel: TelegramChannel,
    host: RecordingHost,
    sleeps: SleepRecorder,
) -> None:
    escalation = tg_server.make_message(OWNER_ID, "Stranger wrote: hi", from_id=424242)
    tg_server.fail_next("sendMessage", code=429, retry_after=30)  # over max_retry_after
    tg_server.inject_callback(OWNER_ID, "/reply p1a2b3", escalation)
    tg_server.inject_message(OWNER_ID, "meanwhile")
    await tg_server.wait_sent(OWNER_ID, 1)
    await host.wait_delivered(1)
    # Before, the press failed five times in a second (five requests in the ban, the
    # press acknowledged five times), then was dropped: no prompt ever came.
    assert 30.0 in sleeps.delays
    assert len(tg_server.calls_of("answerCallbackQuery")) == 1
    assert len(tg_server.calls_of("sendMessage")) == 2  # refused once, then sent once
    assert tg_server.sent[-1]["reply_markup"]["force_reply"] is True
    assert [m.text for m in host.delivered] == ["meanwhile"]


async def test_a_reply_of_several_parts_rings_once_and_again_when_resumed(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    def rings() -> list[bool]:
        return [not c.get("disable_notification") for c in tg_server.calls_of("sendMessage")]

    await channel.send(OutboundMessage("telegram", str(OWNER_ID), _three_parts()))
    # Before, the phone rang for each of the three parts.
    assert rings() == [True, False, False]
    tg_server.calls.clear()
    fail_sends(tg_server, {2}, ApiError(429, "Too Many Requests: retry after 40", 40))
    msg = OutboundMessage("telegram", str(OWNER_ID), _three_parts(), outbox_id=33)
    with pytest.raises(RetryLater):
        await channel.send(msg)
    await channel.send(msg)  # 40 s later: the rest rings, once
    assert rings() == [True, False, True, False]
