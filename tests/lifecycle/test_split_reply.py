"""suggestSplit end to end: the model's naming says the conversation mixes subjects, and
the owner's next reply (not the one after) is asked with the offer in its notes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bot.brain.base import BrainReply, BrainRequest, DeltaSink
from bot.lifecycle import Lifecycle, ManualClock
from bot.services import open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

NAMING = (
    '{"title": "Server Check and Birthday Gift", "topics": ["server-check", '
    '"birthday-gift"], "suggestSplit": true, "splitTopic": "the birthday gift"}'
)


class NamingBrain(ScriptedBrain):
    """Replies as ScriptedBrain; its utility calls (notes, titles) answer the naming."""

    async def complete(
        self, *, system: str, prompt: str, model_alias: str = "haiku", max_tokens: int = 400
    ) -> str:
        return NAMING if "JSON" in system else "Notes on the server and a gift."


@asynccontextmanager
async def named_with_a_split(tmp_path: Path, brain: NamingBrain) -> AsyncIterator[Any]:
    """The core and the lifecycle on Telegram, five owner messages sent: the 5th names
    the conversation, and the naming suggests a split."""
    config = telegram_config(tmp_path)
    services = await open_services(config, brain=brain)
    await attach_channel(services, RecordingChannel("telegram"))
    lifecycle = Lifecycle(config, services, clock=ManualClock())
    await lifecycle.start()
    try:
        for n in range(1, 6):
            await services.router.deliver(inbound(f"message {n}: the server, and a gift"))
            await settle(services)
        await lifecycle.settle()
        yield services
    finally:
        await lifecycle.stop(timeout=1)
        await shutdown_services(services)


async def say(services: Any, *texts: str) -> None:
    for text in texts:
        await services.router.deliver(inbound(text))
        await settle(services)


async def test_a_suggested_split_is_offered_in_the_next_reply_once(tmp_path: Path) -> None:
    brain = NamingBrain()
    async with named_with_a_split(tmp_path, brain) as services:
        await say(services, "and the backups?", "thanks")
        # The reply built first after the naming (the 5th's, when the naming was quicker,
        # else the 6th's) carries the offer; none after it does.
        offers = [(i, r.notes) for i, r in enumerate(brain.requests) if r.notes]
        assert len(offers) == 1, offers
        [(index, (offer,))] = offers
        assert index in (4, 5) and len(brain.requests) == 7
        assert "the birthday gift" in offer and "/new" in offer


class FailingOnceBrain(NamingBrain):
    """Fails the first reply that carries notes (the API rejected it), as a reply the
    generation turns into a notice (``extra["error"]``)."""

    failed = False

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        if request.notes and not self.failed:
            self.failed = True
            self.requests.append(request)
            return BrainReply(
                text="I could not answer this: the model service rejected the request (400).",
                model="scripted-model",
                extra={"error": "rejected", "status": 400},
            )
        return await super().reply(request, on_delta)


async def test_an_offer_whose_reply_failed_goes_with_the_next_reply(tmp_path: Path) -> None:
    # Regression: the notes were taken when the reply was asked for: a reply that
    # failed (a 400, a stop, an outage given up on) never said the offer, the next one
    # did not carry it, and the transcript already said "offered".
    brain = FailingOnceBrain()
    async with named_with_a_split(tmp_path, brain) as services:
        await say(services, "and the backups?", "thanks", "bye")
        offers = [i for i, r in enumerate(brain.requests) if r.notes]
        assert len(offers) == 2 and offers[1] == offers[0] + 1, offers  # failed, then said
        conv = (await services.conversations.list())[0].id
        events = [
            line for line in services.conversations.read_lines(conv) if line.get("type") == "event"
        ]
        # "offered" once, after the reply that said it
        assert sum(1 for e in events if e.get("splitOffered")) == 1
