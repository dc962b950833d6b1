"""Offline (no API key), a known contact's messages go to the owner as an escalation
(rate-limited per party, /reply answers them), and the contact is told so at most once
per escalation interval, not given a notice per message. Nothing answers them later:
no restart, nor a model once a key is set."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.brain.offline import OFFLINE_LABEL
from bot.config import AppConfig
from bot.parties import party_handle
from bot.party_resume import resume_known_parties
from bot.services import open_services
from tests.conftest import (
    OWNER_TELEGRAM_ID,
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

LENA = "2002"
PARTY = party_handle("telegram", LENA)


class Clock:
    """``bot.external.utcnow``, which the escalation interval is measured by."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def _config(tmp_path: Path) -> AppConfig:
    return telegram_config(tmp_path, trust={"contacts": {"telegram": {LENA: "known"}}})


def _file(config: AppConfig) -> list[dict[str, Any]]:
    path = config.external_dir / f"{PARTY}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _refused(config: AppConfig) -> list[tuple[str, str]]:
    return [(e["ref"], e["reason"]) for e in _file(config) if e.get("event") == "refused"]


def _to(telegram: RecordingChannel, chat: str) -> list[str]:
    return [m.text for m in telegram.sent if m.chat_id == chat]


async def _say(services: Any, text: str, n: int) -> None:
    await services.router.deliver(
        inbound(text, sender=LENA, sender_name="Lena", message_id=f"m{n}")
    )
    await settle(services)


async def test_offline_a_known_contacts_messages_reach_the_owner(tmp_path: Path) -> None:
    # Regression (session 41): each of a known contact's messages got the offline
    # notice and the owner was never told (a stranger's were escalated at once).
    config = _config(tmp_path)
    services = await open_services(config)
    assert services.brain.name == "offline"
    telegram = await attach_channel(services, RecordingChannel("telegram"))
    try:
        for n, text in enumerate(["what time is dinner?", "hello?", "call me, urgent"]):
            await _say(services, text, n)
        (notice,) = _to(telegram, LENA)  # once per escalation interval
        assert notice.startswith(OFFLINE_LABEL) and "owner has been told" in notice
        assert "No automatic answer is available" not in notice
        (escalation,) = [m for m in telegram.of_kind("escalation") if m.party_id == PARTY]
        assert escalation.chat_id == OWNER_TELEGRAM_ID
        assert "what time is dinner?" in escalation.text and "known contact" in escalation.text
        assert f"/reply {PARTY}" in escalation.text
        # they are trusted already: no "/trust to let me answer them", no Trust button
        assert "/trust" not in escalation.text
        assert [label for label, _ in escalation.actions] == ["Block", "Reply"]
        # every message recorded, each marked as not to be answered automatically
        assert _refused(config) == [(f"m{n}", "offline") for n in range(3)]
        said = [e["content"] for e in _file(config) if e.get("direction") == "in"]
        assert said == ["what time is dinner?", "hello?", "call me, urgent"]
        # the owner can answer by hand
        await services.router.deliver(inbound(f"/reply {PARTY} at 7", sender=OWNER_TELEGRAM_ID))
        await settle(services)
        assert _to(telegram, LENA)[-1] == "at 7"
    finally:
        await shutdown_services(services)
    # a restart answers none of them again
    services = await open_services(config)
    try:
        telegram = RecordingChannel("telegram")
        assert await resume_known_parties(services) == 0
        await attach_channel(services, telegram)
        await settle(services)
        assert telegram.sent == []
    finally:
        await shutdown_services(services)
    # nor the model, once an API key is set: the owner was told, and may have answered
    model = ScriptedBrain()
    services = await open_services(config, brain=model)
    try:
        telegram = RecordingChannel("telegram")
        assert await resume_known_parties(services) == 0
        await attach_channel(services, telegram)
        await settle(services)
        assert telegram.sent == [] and model.requests == []
    finally:
        await shutdown_services(services)


async def test_offline_the_owner_hears_again_once_the_interval_is_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr("bot.external.utcnow", clock)
    config = _config(tmp_path)
    interval = config.trust.escalation_interval_seconds
    services = await open_services(config)
    telegram = await attach_channel(services, RecordingChannel("telegram"))
    try:
        await _say(services, "dinner at 7?", 0)
        clock.now += timedelta(seconds=interval - 1)
        await _say(services, "or 8?", 1)
        assert len(telegram.of_kind("escalation")) == 1
        assert len(_to(telegram, LENA)) == 1
        clock.now += timedelta(seconds=2)
        await _say(services, "answer please", 2)
        escalations = telegram.of_kind("escalation")
        assert len(escalations) == 2 and "answer please" in escalations[1].text
        assert len(_to(telegram, LENA)) == 2
        assert _refused(config) == [(f"m{n}", "offline") for n in range(3)]
    finally:
        await shutdown_services(services)


async def test_offline_a_message_a_crash_left_unhandled_reaches_the_owner_after_it(
    tmp_path: Path,
) -> None:
    # Recorded, then the daemon stopped before its turn came: the restart's owed answer
    # is the escalation, nothing is lost.
    config = _config(tmp_path)
    services = await open_services(config)
    await attach_channel(services, RecordingChannel("telegram"))
    try:
        services.replies.queue.accepting = False  # stopping: its turn does not come
        await services.router.deliver(
            inbound("are you there?", sender=LENA, sender_name="Lena", message_id="m0")
        )
    finally:
        await shutdown_services(services)
    assert _refused(config) == []
    services = await open_services(config)
    try:
        telegram = await attach_channel(services, RecordingChannel("telegram"))
        assert await resume_known_parties(services) == 1
        await settle(services)
        (escalation,) = telegram.of_kind("escalation")
        assert "are you there?" in escalation.text
        (notice,) = _to(telegram, LENA)
        assert notice.startswith(OFFLINE_LABEL)
        assert _refused(config) == [("m0", "offline")]
    finally:
        await shutdown_services(services)


async def test_offline_a_crash_before_the_owner_was_told_leaves_the_message_owed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The escalation fails (a crash at that point: nothing after it is done): the
    # message is not yet marked as refused, so the next start brings it to the owner.
    # Marked first, the restart found it handled and the owner never heard of it.
    config = _config(tmp_path)
    services = await open_services(config)
    await attach_channel(services, RecordingChannel("telegram"))

    async def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the daemon died here")

    try:
        with monkeypatch.context() as patch:
            patch.setattr(type(services.router.strangers), "escalate", crash)
            await _say(services, "are you there?", 0)
    finally:
        await shutdown_services(services)
    assert _refused(config) == []
    services = await open_services(config)
    try:
        telegram = await attach_channel(services, RecordingChannel("telegram"))
        assert await resume_known_parties(services) == 1
        await settle(services)
        (escalation,) = telegram.of_kind("escalation")
        assert "are you there?" in escalation.text
        assert _refused(config) == [("m0", "offline")]
    finally:
        await shutdown_services(services)
