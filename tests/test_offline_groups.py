"""Offline (no API key) in an allow-listed group: the members' messages are recorded,
not answered (no notice per message posted where every member reads it), and the
owner's own replies there carry no "Set ANTHROPIC_API_KEY" hint (the hint is for the
owner's private chats)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.brain.offline import OFFLINE_LABEL
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
from tests.support import inbound

FAMILY = "-100"
MIA, BO = "4004", "5005"


def _config(tmp_path: Path) -> Any:
    return make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
    )


async def _say(services: Any, sender: str, text: str) -> None:
    msg = inbound(text, sender=sender, sender_name=f"member {sender}", chat=FAMILY,
                  group_id=FAMILY, group_title="Family")  # fmt: skip
    await services.router.deliver(msg)
    await settle(services)


def _in_group(telegram: RecordingChannel) -> list[str]:
    return [m.text for m in telegram.sent if m.chat_id == FAMILY]


async def test_offline_a_groups_members_get_no_notice_per_message(tmp_path: Path) -> None:
    # Regression (session 40): each member's message got the offline notice ("Your
    # message has been recorded...") in the group: 4 messages, 4 identical notices.
    config = _config(tmp_path)
    services = await open_services(config)
    assert services.brain.name == "offline"
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    try:
        for sender, text in [(MIA, "I can bring the cake!"), (BO, "see you Sunday"),
                             (MIA, "I'll come at 3pm then")]:  # fmt: skip
            await _say(services, sender, text)
        assert _in_group(telegram) == []
        rec = await services.conversations.pinned_for(f"telegram:group:{FAMILY}")
        assert rec is not None
        said = [t for t in await services.conversations.read_turns(rec.id) if t["role"] == "user"]
        assert len(said) == 3  # recorded all the same
        # the owner's own message there is answered, without the key hint
        await _say(services, OWNER_TELEGRAM_ID, "who brings the cake?")
        (reply,) = _in_group(telegram)
        assert reply.startswith(OFFLINE_LABEL)
        assert "ANTHROPIC_API_KEY" not in reply
    finally:
        await shutdown_services(services)
    # nothing is owed to the members after a restart either
    services = await open_services(config)
    try:
        assert services.recovery is not None and services.recovery.pending_replies == []
        telegram = RecordingChannel("telegram")
        await resume_pending_replies(services)
        await attach_channel(services, telegram)
        await settle(services)
        assert _in_group(telegram) == []
    finally:
        await shutdown_services(services)


async def test_offline_the_owners_private_chat_still_gets_the_key_hint(tmp_path: Path) -> None:
    services = await open_services(_config(tmp_path))
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    try:
        await services.router.deliver(inbound("hello", sender=OWNER_TELEGRAM_ID))
        await settle(services)
        (reply,) = [m.text for m in telegram.sent if m.chat_id == OWNER_TELEGRAM_ID]
        assert "Set ANTHROPIC_API_KEY" in reply
    finally:
        await shutdown_services(services)
