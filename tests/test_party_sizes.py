"""What a third party can make us store: one message keeps at most
trust.party_message_max_chars in their file (cut with a label saying so), and the index
(dashboard, the restricted brain's history) and the escalation quote far less."""

from __future__ import annotations

from pathlib import Path

from bot.parties import INDEX_MESSAGE_CHARS, party_handle
from bot.services import open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    settle,
    shutdown_services,
)
from tests.support import ScriptedBrain, inbound

STRANGER, FRIEND = "666", "777"


async def test_a_huge_message_from_a_third_party_is_stored_cut_and_labelled(
    tmp_path: Path,
) -> None:
    # Regression: a stranger's 5 MB mail was stored whole, twice (their file and the
    # index row), and a flood of them filled the disk; a known contact's went whole to
    # the model as well. A known contact's is kept whole in their file (nothing a
    # contact sent is lost), the index and the model get a bounded part of it.
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
        trust={"contacts": {"telegram": {FRIEND: "known"}}, "party_message_max_chars": 20_000},
    )
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    huge = "spam " * 1_000_000  # 5,000,000 characters
    try:
        for sender in (STRANGER, FRIEND):
            await services.router.deliver(inbound(huge, sender=sender))
        await settle(services)
        for sender in (STRANGER, FRIEND):
            pid = party_handle("telegram", sender)
            path = config.data_dir / "external" / f"{pid}.jsonl"
            kept = [x for x in path.read_text().splitlines() if '"direction":"in"' in x]
            if sender == STRANGER:
                assert len(kept) == 1 and len(kept[0]) < 21_000, len(kept[0])
            else:
                assert len(kept) == 1 and len(kept[0]) > len(huge), len(kept[0])
            (said,) = [m for m in await services.external.messages(pid) if m["direction"] == "in"]
            assert len(said["content"]) < INDEX_MESSAGE_CHARS + 200
            assert "characters not kept" in said["content"] or "party's file" in said["content"]
        lines = config.data_dir / "external" / f"{party_handle('telegram', STRANGER)}.jsonl"
        assert "more characters not kept" in lines.read_text()
        (request,) = brain.requests  # the known contact's answer
        assert len(request.text) < 21_000 and "not shown to the model" in request.text
        (escalation,) = [m for m in telegram.sent if m.kind == "escalation"]
        assert len(escalation.text) < 1_000
        # a message within the limit is kept whole
        await services.router.deliver(inbound("a normal message", sender=STRANGER))
        await settle(services)
        pid = party_handle("telegram", STRANGER)
        said = [m for m in await services.external.messages(pid) if m["direction"] == "in"]
        assert said[-1]["content"] == "a normal message"
    finally:
        await shutdown_services(services)


async def test_a_flood_of_untrusted_messages_keeps_little_of_each(tmp_path: Path) -> None:
    # Regression: a stranger (or one with a new address per message) could send message
    # after message of the full size, each stored whole: a flood filled the disk.
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
        trust={
            "contacts": {"telegram": {FRIEND: "known"}},
            "untrusted_messages_per_hour": 3,
            "untrusted_messages_per_hour_total": 5,
        },
    )
    services = await open_services(config, brain=ScriptedBrain())
    await attach_channel(services, RecordingChannel("telegram"))
    long = "word " * 1200  # 6,000 characters
    try:
        for _ in range(4):
            await services.router.deliver(inbound(long, sender=STRANGER))
        for sender in ("601", "602", "603"):  # a new identity each time
            await services.router.deliver(inbound(long, sender=sender))
        await services.router.deliver(inbound(long, sender=FRIEND))  # known: not limited
        await settle(services)

        async def kept(sender: str) -> list[int]:
            pid = party_handle("telegram", sender)
            said = await services.external.messages(pid)
            return [len(m["content"]) for m in said if m["direction"] == "in"]

        assert [n < 1000 for n in await kept(STRANGER)] == [False, False, False, True]
        # five untrusted messages in the hour: the sixth and seventh keep little
        assert [n < 1000 for s in ("601", "602", "603") for n in await kept(s)] == [
            False,
            True,
            True,
        ]
        assert await kept(FRIEND) == [len(long)]
        pid = party_handle("telegram", "603")
        (cut,) = [m for m in await services.external.messages(pid) if m["direction"] == "in"]
        assert "not kept (untrusted_messages_per_hour)" in cut["content"]
    finally:
        await shutdown_services(services)


async def test_a_blocked_party_keeps_little_of_each_message(tmp_path: Path) -> None:
    # Regression: a blocked party (the one the owner wants least, and the likeliest to
    # flood) kept trust.party_message_max_chars of every message, without end, while an
    # untrusted one past its hourly budget keeps 500.
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
        trust={"contacts": {"telegram": {STRANGER: "blocked"}}},
    )
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    try:
        await services.router.deliver(inbound("abuse " * 5_000, sender=STRANGER))
        await services.router.deliver(inbound("sorry, just this", sender=STRANGER))
        await settle(services)
        pid = party_handle("telegram", STRANGER)
        said = [m["content"] for m in await services.external.messages(pid)]
        assert len(said) == 2
        assert len(said[0]) < 700 and "characters not kept (blocked)" in said[0], said[0][-120:]
        assert said[1] == "sorry, just this"  # a short one whole
        assert telegram.sent == [] and brain.requests == []
    finally:
        await shutdown_services(services)
