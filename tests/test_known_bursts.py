"""A known contact's burst (bot/known_answers.py): messages arriving within the channel's
debounce (``brain.debounce_seconds``) get one answer, as the owner's do, whose request
holds every message of it; every message stays in their file, and a restart mid-burst
answers the pending ones once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bot.channel import ChannelHost
from bot.daemon import start_serving
from bot.parties import party_handle
from bot.services import Services, open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

KIM = "7001"
PARTY = party_handle("telegram", KIM)
# As tests/test_debounce.py: the production default, with the burst's messages well
# inside it (a shorter one split bursts now and then on a busy machine).
DEBOUNCE = 1.5
GAP = 0.06


def _config(tmp_path: Path) -> Any:
    return telegram_config(
        tmp_path,
        trust={"contacts": {"telegram": {KIM: "known"}}},
        brain={"debounce_seconds": {"telegram": DEBOUNCE}},
    )


async def _open(tmp_path: Path, brain: ScriptedBrain) -> tuple[Services, RecordingChannel]:
    services = await open_services(_config(tmp_path), brain=brain)
    telegram = await attach_channel(services, RecordingChannel("telegram"))
    return services, telegram


def _file(services: Any) -> list[dict[str, Any]]:
    path = services.config.external_dir / f"{PARTY}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _answers(telegram: RecordingChannel) -> list[str]:
    return [m.text for m in telegram.sent if m.chat_id == KIM and m.kind == "reply"]


async def test_a_contacts_burst_gets_one_answer_to_all_of_it(tmp_path: Path) -> None:
    # Regression (session 41): each message of the burst was a paid call of its own, and
    # the contact got three answers, the first to "hi" alone.
    brain = ScriptedBrain()
    services, telegram = await _open(tmp_path, brain)
    try:
        lines = ("hi", "are you there?", "I need the address")
        for n, text in enumerate(lines):
            await services.router.deliver(inbound(text, sender=KIM, message_id=f"k{n}"))
            await asyncio.sleep(GAP)
        await settle(services)
        assert len(brain.requests) == 1
        assert brain.requests[0].text == "hi\nare you there?\nI need the address"
        assert not [h for h in brain.requests[0].history if h.content in lines]
        assert _answers(telegram) == ["re: hi\nare you there?\nI need the address"]
        file = _file(services)
        assert [m["content"] for m in file if m.get("direction") == "in"] == list(lines)
        (answer,) = [m for m in file if m.get("direction") == "out"]
        assert answer["answers"] == "k2"  # the burst's last: a restart owes none of it
    finally:
        await shutdown_services(services)


async def test_what_comes_while_an_answer_is_made_is_answered_once(tmp_path: Path) -> None:
    # Messages queued behind an answer being made are one burst: one answer after it.
    brain = ScriptedBrain()
    brain.gate = asyncio.Event()
    services, telegram = await _open(tmp_path, brain)
    try:
        await services.router.deliver(inbound("hello", sender=KIM, message_id="k0"))
        await asyncio.wait_for(brain.started.wait(), 10)
        for n in (1, 2, 3):
            await services.router.deliver(inbound(f"line {n}", sender=KIM, message_id=f"k{n}"))
        brain.gate.set()
        await settle(services)
        assert [r.text for r in brain.requests] == ["hello", "line 1\nline 2\nline 3"]
        assert _answers(telegram) == ["re: hello", "re: line 1\nline 2\nline 3"]
        # the second answer reads the first exchange as history, not its own messages
        history = [h.content for h in brain.requests[1].history]
        assert history == ["hello", "re: hello"]
    finally:
        await shutdown_services(services)


async def test_an_album_and_the_words_after_it_are_one_burst(tmp_path: Path) -> None:
    brain = ScriptedBrain()
    services, telegram = await _open(tmp_path, brain)
    try:
        for n, caption in enumerate(("my flat", "the kitchen")):
            metadata: dict[str, Any] = {"media_group": "a1"} | ({"album_part": True} if n else {})
            msg = inbound(caption, sender=KIM, message_id=f"k{n}", metadata=metadata)
            await services.router.deliver(msg)
        await services.router.deliver(inbound("nice?", sender=KIM, message_id="k2"))
        await settle(services)
        assert [r.text for r in brain.requests] == ["my flat\nthe kitchen\nnice?"]
        assert len(_answers(telegram)) == 1
    finally:
        await shutdown_services(services)


async def test_no_debounce_answers_each_message(tmp_path: Path) -> None:
    # A channel without a debounce (e-mail by default: each mail its own thread) keeps
    # one answer per message.
    config = telegram_config(tmp_path, trust={"contacts": {"telegram": {KIM: "known"}}})
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    telegram = await attach_channel(services, RecordingChannel("telegram"))
    try:
        for n in range(2):
            await services.router.deliver(inbound(f"line {n}", sender=KIM, message_id=f"k{n}"))
        await settle(services)
        assert [r.text for r in brain.requests] == ["line 0", "line 1"]
        assert len(_answers(telegram)) == 2
    finally:
        await shutdown_services(services)


class FirstPollChannel(RecordingChannel):
    """Telegram whose start hands over the contact's message that came while we were
    down (its first poll)."""

    def __init__(self, text: str) -> None:
        super().__init__("telegram")
        self.text = text

    async def start(self, host: ChannelHost) -> None:
        await super().start(host)
        await host.deliver(inbound(self.text, sender=KIM, message_id="k2"))


async def test_a_restart_mid_burst_answers_it_once(tmp_path: Path) -> None:
    # A run that recorded two messages of the burst and stopped before answering them.
    first = await open_services(_config(tmp_path), brain=ScriptedBrain())
    first.replies.queue.accepting = False  # stopping: the answer never starts
    for n, text in enumerate(("hi", "are you there?")):
        await first.router.deliver(inbound(text, sender=KIM, message_id=f"k{n}"))
    await shutdown_services(first)

    brain = ScriptedBrain()
    services = await open_services(_config(tmp_path), brain=brain)
    channel = FirstPollChannel("I need the address")
    services.channels[channel.name] = channel  # as bot.daemon.wire_channels does
    try:
        await start_serving(services, [channel])
        await settle(services)
        # the owed two and the first poll's one: one answer (before, the owed ones were
        # answered together, then the new one on its own)
        assert [r.text for r in brain.requests] == ["hi\nare you there?\nI need the address"]
        assert len(_answers(channel)) == 1
        said = [m["content"] for m in _file(services) if m.get("direction") == "in"]
        assert said == ["hi", "are you there?", "I need the address"]
    finally:
        await shutdown_services(services)
