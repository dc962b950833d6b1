"""What known contacts can cost: the model's answers to them are budgeted per hour, per
contact and all together (trust.known_replies_per_hour[_total]); past it their messages
are recorded, not answered, and the owner is told once, not per message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.services import open_services
from tests.conftest import (
    OWNER_TELEGRAM_ID,
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    settle,
    shutdown_services,
)
from tests.support import ScriptedBrain, inbound

KIM, LEE = "111", "222"


def _config(tmp_path: Path) -> Any:
    return make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
        trust={
            "contacts": {"telegram": {KIM: "known", LEE: "known"}},
            "known_replies_per_hour": 2,
            "known_replies_per_hour_total": 3,
        },
    )


async def _open(config: Any, brain: ScriptedBrain) -> tuple[Any, RecordingChannel]:
    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    return services, telegram


async def _say(services: Any, sender: str, text: str) -> None:
    await services.router.deliver(inbound(text, sender=sender))
    await settle(services)


def _notices(telegram: RecordingChannel) -> list[str]:
    return [m.text for m in telegram.sent if m.chat_id == OWNER_TELEGRAM_ID]


async def test_a_known_contacts_answers_are_budgeted_per_hour(tmp_path: Path) -> None:
    # Regression: every message of a known contact was a model call: a chatty or
    # compromised contact (or all of them together) ran up the owner's bill unbounded.
    config = _config(tmp_path)
    brain = ScriptedBrain()
    services, telegram = await _open(config, brain)
    try:
        for n in range(5):
            await _say(services, KIM, f"question {n}")
        assert len(brain.requests) == 2
        (notice,) = _notices(telegram)  # told once, not per message
        assert "known_replies_per_hour" in notice and KIM in notice
        kim = await services.external.find(KIM)
        assert kim is not None
        said = [m for m in await services.external.messages(kim.id) if m["direction"] == "in"]
        assert len(said) == 5  # nothing received is lost
        # all of them together: Lee gets the third answer of the hour, then no more
        await _say(services, LEE, "hello")
        await _say(services, LEE, "again")
        await _say(services, LEE, "and again")
        assert len(brain.requests) == 3
        assert len(_notices(telegram)) == 2
        assert "known_replies_per_hour_total" in _notices(telegram)[-1]
    finally:
        await shutdown_services(services)
    # a restart resets nothing: the answers are counted in the parties' files
    services, telegram = await _open(config, brain)
    try:
        await _say(services, KIM, "after the restart")
        assert len(brain.requests) == 3
    finally:
        await shutdown_services(services)
