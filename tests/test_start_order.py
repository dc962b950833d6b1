"""The daemon's start (bot.daemon.start_serving): the replies a stop left owed are queued
before the channels start, so what a channel delivers first (Telegram's first poll
hands over what came while the daemon was down) is answered after them, or with them
when the debounce merges the two, never before them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.channel import ChannelHost
from bot.daemon import start_serving
from bot.services import Services, open_services
from tests.conftest import RecordingChannel, make_config, owner_identities, settle
from tests.conftest import shutdown_services as close_core
from tests.support import ScriptedBrain, inbound

DEBOUNCE = 0.3


class FirstPollChannel(RecordingChannel):
    """A Telegram-like channel whose start hands over a message that came while the
    daemon was down: during the start itself, or from its polling task just after a
    slow start (``setup`` seconds)."""

    def __init__(self, text: str, setup: float = 0.0) -> None:
        super().__init__("telegram")
        self.text = text
        self.setup = setup
        self.polled: asyncio.Task[None] | None = None

    async def start(self, host: ChannelHost) -> None:
        await super().start(host)
        if not self.setup:
            await host.deliver(inbound(self.text, message_id="new-1"))
            return
        await asyncio.sleep(self.setup)  # getMe, deleteWebhook, setMyCommands

        async def first_poll() -> None:
            await asyncio.sleep(0.02)
            await host.deliver(inbound(self.text, message_id="new-1"))

        self.polled = asyncio.create_task(first_poll())


def _config(tmp_path: Path) -> Any:
    return make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        brain={"debounce_seconds": {"telegram": DEBOUNCE}},
    )


async def _left_unanswered(tmp_path: Path, text: str) -> None:
    """A run that stored the owner's message and stopped before answering it."""
    services = await open_services(_config(tmp_path), brain=ScriptedBrain())
    services.replies.queue.accepting = False  # stopping: the reply never starts
    await services.router.deliver(inbound(text, message_id="old-1"))
    await close_core(services)


async def _restart(tmp_path: Path, channel: FirstPollChannel) -> tuple[Services, ScriptedBrain]:
    brain = ScriptedBrain()
    services = await open_services(_config(tmp_path), brain=brain)
    services.channels[channel.name] = channel  # as bot.daemon.wire_channels does
    assert await start_serving(services, [channel]) == 1
    if channel.polled is not None:
        await channel.polled
    await settle(services)
    return services, brain


def _replies(channel: RecordingChannel) -> list[str]:
    return [m.text for m in channel.sent if m.kind == "reply"]


async def test_the_first_polls_message_is_answered_with_the_resumed_one(
    tmp_path: Path,
) -> None:
    await _left_unanswered(tmp_path, "the plumber quoted 300")
    channel = FirstPollChannel("is that a fair price?")
    services, brain = await _restart(tmp_path, channel)
    try:
        # One reply, to the later message, with the earlier in its context. Before, the
        # channels started first: the new message was answered, then the old one on its
        # own, after it ("re: is that a fair price?", "re: the plumber quoted 300").
        assert _replies(channel) == ["re: is that a fair price?"]
        assert [r.turn_number for r in brain.requests] == [2]
    finally:
        await close_core(services)


async def test_a_slow_channel_start_does_not_cut_the_resumed_debounce(tmp_path: Path) -> None:
    await _left_unanswered(tmp_path, "the plumber quoted 300")
    # The channel's setup outlasts the debounce; its first poll comes right after.
    channel = FirstPollChannel("is that a fair price?", setup=DEBOUNCE * 2)
    services, brain = await _restart(tmp_path, channel)
    try:
        # Before, the resumed reply's debounce ran out during the start: two replies.
        assert _replies(channel) == ["re: is that a fair price?"]
        assert [r.turn_number for r in brain.requests] == [2]
    finally:
        await close_core(services)
