"""A party the owner blocked is never answered, in the owner's groups either: what they
say there is kept as the group's context, their mentions and commands get nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import settle, shutdown_services, start_telegram_core, telegram_config
from tests.support import ScriptedBrain, inbound

OWNER, EVE, ANN = "424242", "31337", "5150"
GROUP = {"group_id": "-100", "chat": "-100"}


async def test_a_blocked_party_gets_no_answer_in_a_group(tmp_path: Path) -> None:
    # Regression: /block said "never answered", and the group answered them all the
    # same: a paid model call a mention, from the one the owner wanted least.
    config = telegram_config(tmp_path, trust={"contacts": {"telegram": {EVE: "blocked"}}})
    brain = ScriptedBrain()
    services, telegram = await start_telegram_core(config, brain=brain)
    try:
        for text, sender in (
            ("hello group", OWNER),
            ("@bot tell me everything", EVE),
            ("/help", EVE),
            ("@bot what time is it?", ANN),
        ):
            await services.router.deliver(inbound(text, sender=sender, **GROUP))
            await settle(services)
        assert [r.text for r in brain.requests] == ["hello group", "@bot what time is it?"]
        assert all(m.chat_id == "-100" for m in telegram.sent)
        assert len(telegram.sent) == 2  # nothing for Eve, not even /help's answer
        # what Eve said is the group's context: kept, marked as needing no answer
        rec = await services.conversations.pinned_for("telegram:group:-100")
        said = [
            (ln["sender"], ln["content"], ln.get("awaitReply", True))
            for ln in services.store.read_lines(rec.id)
            if ln.get("type") == "turn" and ln.get("sender") == EVE
        ]
        assert said == [(EVE, "@bot tell me everything", False), (EVE, "/help", False)]
        # the owner's /block, later, of a member who wrote to the bot directly
        await services.router.deliver(inbound("hi, Ann here", sender=ANN))
        await settle(services)
        party = await services.external.find(ANN)
        await services.router.deliver(inbound(f"/block {party.id}", sender=OWNER))
        await settle(services)
        before = len(brain.requests)
        await services.router.deliver(inbound("@bot and now?", sender=ANN, **GROUP))
        await settle(services)
        assert len(brain.requests) == before
    finally:
        await shutdown_services(services)


async def test_the_default_tier_blocked_still_lets_the_group_be_answered(tmp_path: Path) -> None:
    # trust.default_tier is what strangers who write to us get; the owner allowed the
    # group, everyone in it.
    config = telegram_config(tmp_path, trust={"default_tier": "blocked"})
    brain = ScriptedBrain()
    services, _ = await start_telegram_core(config, brain=brain)
    try:
        await services.router.deliver(inbound("hi", sender=ANN))  # recorded: blocked
        await services.router.deliver(inbound("@bot what time is it?", sender=ANN, **GROUP))
        await settle(services)
        assert [r.text for r in brain.requests] == ["@bot what time is it?"]
    finally:
        await shutdown_services(services)


async def test_a_stranger_the_config_blocks_since_gets_no_answer_in_a_group(
    tmp_path: Path,
) -> None:
    # Regression (session 30): a party whose record held the default tier (they had
    # written to the bot) was answered in the group after the owner listed them as
    # blocked in trust.contacts and reloaded, until they wrote to the bot again.
    config = telegram_config(tmp_path)
    brain = ScriptedBrain()
    services, _ = await start_telegram_core(config, brain=brain)
    try:
        await services.router.deliver(inbound("hi, Ann here", sender=ANN))  # the default tier
        await settle(services)
        blocked = telegram_config(tmp_path, trust={"contacts": {"telegram": {ANN: "blocked"}}})
        services.config.trust = blocked.trust  # what a SIGHUP does
        before = len(brain.requests)
        await services.router.deliver(inbound("@bot what time is it?", sender=ANN, **GROUP))
        await settle(services)
        assert len(brain.requests) == before
    finally:
        await shutdown_services(services)


async def test_a_block_takes_effect_at_once_though_members_tiers_are_kept_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The router's check of a member's tier read their record from the index at every
    # message (a reader-thread hop each, the open-loop tail of `bench ingest`): it is
    # kept in memory now, until any party's record is written, so the owner's /block
    # of someone whose record was just read still holds for their next message.
    config = telegram_config(tmp_path)
    brain = ScriptedBrain()
    services, _ = await start_telegram_core(config, brain=brain)
    reads: list[str] = []
    get = services.external.get

    async def counted(party_id: str) -> Any:
        reads.append(party_id)
        return await get(party_id)

    monkeypatch.setattr(services.external, "get", counted)
    try:
        await services.router.deliver(inbound("hi, Ann here", sender=ANN))
        await settle(services)
        reads.clear()
        for n in range(3):
            await services.router.deliver(inbound(f"@bot question {n}", sender=ANN, **GROUP))
            await settle(services)
        assert [r.text for r in brain.requests] == [f"@bot question {n}" for n in range(3)]
        assert len(reads) == 1  # read once, then from memory
        party = await services.external.find(ANN)
        await services.router.deliver(inbound(f"/block {party.id}", sender=OWNER))
        await settle(services)
        await services.router.deliver(inbound("@bot and now?", sender=ANN, **GROUP))
        await settle(services)
        assert len(brain.requests) == 3  # blocked at once
        await services.router.deliver(inbound(f"/trust {party.id}", sender=OWNER))
        await settle(services)
        await services.router.deliver(inbound("@bot again?", sender=ANN, **GROUP))
        await settle(services)
        assert brain.requests[-1].text == "@bot again?"
    finally:
        await shutdown_services(services)
