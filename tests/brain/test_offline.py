"""The offline brain's labelled recall replies (over the real index and search)."""

from __future__ import annotations

from types import SimpleNamespace

from bot.brain.base import BrainRequest
from bot.brain.offline import OFFLINE_LABEL, OfflineBrain


async def test_recalled_conversations_are_dated_by_the_owners_calendar(
    core: SimpleNamespace,
) -> None:
    # Regression: the date shown was the UTC day of the conversation's last update; for
    # an owner in New York an evening conversation showed as the day after.
    core.search.config.owner.timezone = "America/New_York"
    manager = core.conversations
    evening = await manager.create("web")  # 1 March 2999, 20:30 in New York
    await manager.append_turn(
        evening.id,
        "user",
        "we parked the kayak at the boathouse",
        timestamp="2999-03-02T01:30:00.000Z",
    )
    brain = OfflineBrain(core.search)
    reply = await brain.reply(
        BrainRequest(profile="owner", channel="web", text="where is the kayak?", model_alias="")
    )
    assert reply.text.startswith(OFFLINE_LABEL)
    assert "(web, 2999-03-01, " in reply.text
