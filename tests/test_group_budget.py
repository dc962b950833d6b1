"""What an allow-listed group's members can cost: the model's answers to them are
budgeted per hour and group (trust.group_replies_per_hour); past it their messages are
recorded, not answered, the owner's own still are, and the owner is told once."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.events import utcnow
from bot.resume import resume_pending_replies
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

FAMILY, CLUB = "-100", "-200"
KIM, LEE = "111", "222"


def _config(tmp_path: Path) -> Any:
    return make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
        trust={"group_replies_per_hour": 2},
    )


async def _open(config: Any, brain: ScriptedBrain) -> tuple[Any, RecordingChannel]:
    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    return services, telegram


async def _say(services: Any, sender: str, text: str, group: str = FAMILY) -> None:
    msg = inbound(text, sender=sender, sender_name=f"member {sender}", chat=group,
                  group_id=group, group_title=f"group {group}")  # fmt: skip
    await services.router.deliver(msg)
    await settle(services)


def _notices(telegram: RecordingChannel) -> list[str]:
    return [m.text for m in telegram.sent if m.chat_id == OWNER_TELEGRAM_ID]


def _profiles(brain: ScriptedBrain) -> list[str]:
    return [r.profile for r in brain.requests]


async def test_a_groups_members_answers_are_budgeted_per_hour(tmp_path: Path) -> None:
    # Regression: every member's message in an allowed group was a model call, with no
    # limit: a busy or hostile group ran up the owner's bill unbounded.
    brain = ScriptedBrain()
    services, telegram = await _open(_config(tmp_path), brain)
    try:
        await _say(services, OWNER_TELEGRAM_ID, "the owner's, not counted")
        for n in range(3):
            await _say(services, KIM, f"question {n}")
        assert _profiles(brain) == ["owner", "restricted", "restricted"]
        (notice,) = _notices(telegram)
        assert "group_replies_per_hour" in notice and "group -100" in notice
        # per group: another member (or a new account) does not get a budget of its own
        await _say(services, LEE, "a new account")
        assert len(brain.requests) == 3
        assert len(_notices(telegram)) == 1  # told once an hour, not per message
        # the owner's own messages there are still answered
        await _say(services, OWNER_TELEGRAM_ID, "still me")
        assert _profiles(brain)[-1] == "owner"
        # another group has its own budget
        await _say(services, KIM, "in the club", group=CLUB)
        assert brain.requests[-1].text == "in the club"
        conv = brain.requests[0].conversation_id
        assert conv is not None
        said = [t for t in await services.conversations.read_turns(conv) if t["role"] == "user"]
        assert len(said) == 6  # nothing received is lost
    finally:
        await shutdown_services(services)


async def test_a_refused_member_message_is_not_answered_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The refusal is recorded (a reply_refused event): recovery found the refused turn
    # unanswered and would answer it at the next start, the budget's bill after all. And
    # the count comes from the index and the transcript: a restart resets nothing.
    config = _config(tmp_path)
    brain = ScriptedBrain()
    services, _ = await _open(config, brain)
    try:
        await _say(services, KIM, "one")
        await _say(services, KIM, "two")
        await _say(services, KIM, "three, refused")
        assert len(brain.requests) == 2
    finally:
        await shutdown_services(services)
    services = await open_services(config, brain=brain)
    try:
        assert services.recovery is not None and services.recovery.pending_replies == []
        await resume_pending_replies(services)
        await attach_channel(services, RecordingChannel("telegram"))
        await _say(services, LEE, "still within the hour")
        assert len(brain.requests) == 2  # counted across the restart
        # an hour later the budget is free again, and only for new messages
        later = utcnow() + timedelta(hours=2)
        monkeypatch.setattr("bot.group_budget.utcnow", lambda: later)
        await _say(services, LEE, "later")
        assert [r.text for r in brain.requests][2:] == ["later"]
    finally:
        await shutdown_services(services)
