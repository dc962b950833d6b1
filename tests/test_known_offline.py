"""Offline (no API key), a known contact's messages go to the owner as an escalation
(rate-limited per party, /reply answers them), and the contact is told so at most once
per escalation interval, not given a notice per message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.brain.offline import OFFLINE_LABEL
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
from tests.support import inbound

LENA = "2002"
PARTY = party_handle("telegram", LENA)


def _file(config: Any) -> list[dict[str, Any]]:
    path = config.external_dir / f"{PARTY}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_offline_a_known_contacts_messages_reach_the_owner(tmp_path: Path) -> None:
    # Regression (session 40): each of a known contact's messages got the offline
    # notice and the owner was never told (a stranger's were escalated at once).
    config = telegram_config(tmp_path, trust={"contacts": {"telegram": {LENA: "known"}}})
    services = await open_services(config)
    assert services.brain.name == "offline"
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    try:
        for n, text in enumerate(["what time is dinner?", "hello?", "call me, urgent"]):
            await services.router.deliver(
                inbound(text, sender=LENA, sender_name="Lena", message_id=f"m{n}")
            )
            await settle(services)
        to_lena = [m.text for m in telegram.sent if m.chat_id == LENA]
        (notice,) = to_lena  # once per escalation interval
        assert notice.startswith(OFFLINE_LABEL) and "owner has been told" in notice
        to_owner = [m.text for m in telegram.sent if m.chat_id == OWNER_TELEGRAM_ID]
        (escalation,) = [t for t in to_owner if "what time is dinner?" in t]
        assert "known contact" in escalation and f"/reply {PARTY}" in escalation
        lines = _file(config)
        refused = [(e["ref"], e["reason"]) for e in lines if e.get("event") == "refused"]
        assert refused == [(f"m{n}", "offline") for n in range(3)]
        # the owner can answer by hand
        await services.router.deliver(inbound(f"/reply {PARTY} at 7", sender=OWNER_TELEGRAM_ID))
        await settle(services)
        assert [m.text for m in telegram.sent if m.chat_id == LENA][-1] == "at 7"
    finally:
        await shutdown_services(services)
    # a restart answers none of them again
    services = await open_services(config)
    try:
        telegram = RecordingChannel("telegram")
        assert await resume_known_parties(services) == 0
        await attach_channel(services, telegram)
        await settle(services)
        assert [m for m in telegram.sent if m.chat_id == LENA] == []
    finally:
        await shutdown_services(services)
