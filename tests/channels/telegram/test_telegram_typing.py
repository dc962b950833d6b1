"""The "typing…" indicator while several replies are owed in one chat."""

from __future__ import annotations

from bot.bench.fakes.telegram_api import FakeTelegramServer
from bot.events import OutboundMessage
from channels.telegram.adapter import TelegramChannel

from .conftest import OWNER_ID, wait_until

CHAT = str(OWNER_ID)


def _actions(tg_server: FakeTelegramServer) -> int:
    return len(tg_server.calls_of("sendChatAction"))


async def test_typing_is_kept_until_the_last_reply_owed_in_the_chat_is_sent(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    await channel.typing(CHAT)  # two replies being written (two questions)
    await channel.typing(CHAT)
    assert _actions(tg_server) == 2
    await channel.send(OutboundMessage("telegram", CHAT, "the first answer"))
    # Before, "typing…" stopped here while the second answer was still being written;
    # Telegram clears it at each message sent, so it is shown again at once.
    assert CHAT in channel._typing
    await wait_until(lambda: _actions(tg_server) == 3)
    await channel.send(OutboundMessage("telegram", CHAT, "the second answer"))
    assert CHAT not in channel._typing


async def test_a_message_that_answers_nothing_keeps_the_owed_reply_typing(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    await channel.typing(CHAT)
    # a command's answer (/help) sent while the model's reply is written
    await channel.send(OutboundMessage("telegram", CHAT, "the commands", kind="command"))
    assert CHAT in channel._typing
    await wait_until(lambda: _actions(tg_server) == 2)
    await channel.send(OutboundMessage("telegram", CHAT, "the answer"))
    assert CHAT not in channel._typing
    await channel.send(OutboundMessage("telegram", CHAT, "a reminder"))  # none owed
    assert CHAT not in channel._typing and _actions(tg_server) == 2
