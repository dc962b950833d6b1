"""What known contacts can cost: the model's answers to them are budgeted per hour, per
contact and all together (trust.known_replies_per_hour[_total]); past it their messages
are recorded, not answered, and the owner is told once, not per message."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.events import utcnow
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


async def _spend_the_budget(services: Any, brain: ScriptedBrain) -> None:
    """Kim's two answers of the hour, and a third message refused."""
    for text in ("one", "two", "three, refused"):
        await _say(services, KIM, text)
    assert len(brain.requests) == 2


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


async def _resumed(config: Any, brain: ScriptedBrain) -> tuple[Any, RecordingChannel]:
    """A start as bot/daemon.py makes it: the owed answers queued before the channels."""
    from bot.party_resume import resume_known_parties

    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    services.channels["telegram"] = telegram  # wired, not started yet
    await resume_known_parties(services)
    await attach_channel(services, telegram)
    await settle(services)
    return services, telegram


async def test_a_message_refused_over_the_budget_is_not_answered_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the refusal was not recorded anywhere: a restart (within the 24 h of
    # bot/party_resume.py, once the hour was over) found the refused message unanswered
    # and answered it, running up the bill the budget exists to bound.
    config = _config(tmp_path)
    brain = ScriptedBrain()
    services, telegram = await _open(config, brain)
    try:
        await _spend_the_budget(services, brain)
    finally:
        await shutdown_services(services)
    later = utcnow() + timedelta(hours=2)  # the hour's budget is free again
    monkeypatch.setattr("bot.party_budget.utcnow", lambda: later)
    services, telegram = await _resumed(config, brain)
    try:
        assert len(brain.requests) == 2  # the refused message stays unanswered
        assert not telegram.texts("reply")
        # what comes next is answered as usual (within the budget)
        await _say(services, KIM, "four")
        assert len(brain.requests) == 3
        # and the owner still answers the refused one by hand
        kim = await services.external.find(KIM)
        assert kim is not None
        await _say(services, OWNER_TELEGRAM_ID, f"/reply {kim.id} by hand")
        assert [m.text for m in telegram.sent if m.chat_id == KIM][-1] == "by hand"
    finally:
        await shutdown_services(services)


async def test_the_owner_is_told_once_an_hour_across_restarts(tmp_path: Path) -> None:
    # Regression: "told" was kept in memory: a daemon restarted in a crash loop told
    # the owner again at every start.
    config = _config(tmp_path)
    brain = ScriptedBrain()
    told = 0
    for run in range(3):
        services, telegram = await _open(config, brain)
        try:
            for n in range(3):
                await _say(services, KIM, f"run {run} message {n}")
            told += len(_notices(telegram))
        finally:
            await shutdown_services(services)
    assert len(brain.requests) == 2
    assert told == 1


async def test_answers_stamped_before_a_clock_set_back_do_not_spend_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 40): the hour's count took every answer stamped after "an
    # hour ago", those stamped in the future too: a clock set back by a day (an RTC
    # ahead at boot, then NTP) kept the contact's budget spent for the whole day.
    config = _config(tmp_path)
    brain = ScriptedBrain()
    services, _ = await _open(config, brain)
    try:
        await _spend_the_budget(services, brain)
        earlier = utcnow() - timedelta(days=1)
        monkeypatch.setattr("bot.party_budget.utcnow", lambda: earlier)
        monkeypatch.setattr("bot.events.utcnow", lambda: earlier)
        await _say(services, KIM, "after the set-back")
        assert [r.text for r in brain.requests][2:] == ["after the set-back"]
    finally:
        await shutdown_services(services)
