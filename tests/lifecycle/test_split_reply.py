"""suggestSplit end to end: the model's naming says the conversation mixes subjects, and
the owner's next reply (not the one after) is asked with the offer in its notes."""

from __future__ import annotations

from pathlib import Path

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


async def test_a_suggested_split_is_offered_in_the_next_reply_once(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    brain = NamingBrain()
    services = await open_services(config, brain=brain)
    await attach_channel(services, RecordingChannel("telegram"))
    lifecycle = Lifecycle(config, services, clock=ManualClock())
    await lifecycle.start()
    try:
        for n in range(1, 6):  # the 5th user message names the conversation
            await services.router.deliver(inbound(f"message {n}: the server, and a gift"))
            await settle(services)
        await lifecycle.settle()
        for text in ("and the backups?", "thanks"):
            await services.router.deliver(inbound(text))
            await settle(services)
        # The reply built first after the naming (the 5th's, when the naming was quicker,
        # else the 6th's) carries the offer; none after it does.
        offers = [(i, r.notes) for i, r in enumerate(brain.requests) if r.notes]
        assert len(offers) == 1, offers
        [(index, (offer,))] = offers
        assert index in (4, 5) and len(brain.requests) == 7
        assert "the birthday gift" in offer and "/new" in offer
    finally:
        await lifecycle.stop(timeout=1)
        await shutdown_services(services)
