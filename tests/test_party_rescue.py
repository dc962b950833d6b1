"""A party record deleted while the daemon was stopped: what the index held of the party
is saved as a record file of its own before their rows go, and the owner is told once.
Before session 28 the rows were dropped with a log line only: every message the contact
sent was lost with them."""

from __future__ import annotations

import shutil
from pathlib import Path

from bot.daemon import start_serving
from bot.parties import INDEX_MESSAGE_CHARS
from bot.party_rescue import removed_party_path
from bot.services import open_services
from bot.transcript import parse_lines
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound, wait_until

STRANGER = "555"
LONG = "the invoice, line by line: " + "x" * (INDEX_MESSAGE_CHARS + 100)


async def _serve_once(services: object) -> list[str]:
    """Start serving with a recording Telegram channel; the owner's alerts at start (the
    notices are sent before start_serving returns)."""
    telegram = RecordingChannel("telegram")
    services.channels["telegram"] = telegram  # type: ignore[attr-defined]
    await start_serving(services, [telegram])  # type: ignore[arg-type]
    return [m.text for m in telegram.sent if m.text.startswith("Party records missing")]


async def test_a_deleted_party_record_is_saved_told_once_and_can_be_put_back(
    tmp_path: Path,
) -> None:
    config = telegram_config(tmp_path)
    services = await open_services(config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(
            inbound("my account number is 99", sender=STRANGER, sender_name="Vera")
        )
        await services.router.deliver(inbound(LONG, sender=STRANGER, sender_name="Vera"))
        await settle(services)
        party = await services.external.find(STRANGER)
        assert party is not None
        said = [m["content"] for m in await services.external.messages(party.id)]
        escalations = [e["text"] for e in await services.external.pending_escalations()]
        assert said and escalations
    finally:
        await shutdown_services(services)
    record = config.external_dir / f"{party.id}.jsonl"
    record.unlink()  # deleted while stopped

    services = await open_services(config, brain=ScriptedBrain())
    copy = removed_party_path(config.external_dir, party.id)
    try:
        assert services.recovery is not None and services.recovery.removed_parties == 1
        assert services.recovery.saved_parties == {record.name: (copy, len(said))}
        assert await services.external.get(party.id) is None  # out of the list
        lines = parse_lines(copy.read_bytes(), copy.name)
        assert lines[0]["type"] == "meta" and lines[0]["id"] == party.id
        assert lines[0]["party"] == STRANGER and lines[0]["channel"] == "telegram"
        kept = [x["content"] for x in lines if x["type"] == "message"]
        assert kept[:-1] == said[:-1] and LONG.startswith(kept[-1])
        (cut,) = [x for x in lines if x.get("cutChars")]
        assert cut["content"] == kept[-1] == LONG[:INDEX_MESSAGE_CHARS]
        assert cut["cutChars"] == len(LONG) - INDEX_MESSAGE_CHARS  # lost: said to the owner
        assert [x["text"] for x in lines if x.get("event") == "escalation"] == escalations
        assert copy.stat().st_mode & 0o777 == 0o600
        (alert,) = await _serve_once(services)
        assert f"{party.id}.jsonl (Vera, telegram) was missing" in alert
        assert str(copy) in alert and f"the {len(said)} messages" in alert
        assert "the end of 1 message(s) the index kept cut" in alert
    finally:
        await shutdown_services(services)

    services = await open_services(config, brain=ScriptedBrain())
    try:  # told once: the copy is still there at the next start
        assert await _serve_once(services) == []
    finally:
        await shutdown_services(services)

    shutil.move(copy, record)  # the owner puts it back
    services = await open_services(config, brain=ScriptedBrain())
    try:
        back = await services.external.get(party.id)
        assert back is not None and back.display_name == "Vera" and back.tier == party.tier
        assert [m["content"] for m in await services.external.messages(party.id)] == kept
        pending = [e["text"] for e in await services.external.pending_escalations()]
        assert pending == escalations
    finally:
        await shutdown_services(services)


async def test_a_party_copy_that_cannot_be_written_keeps_the_rows(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    services = await open_services(config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("hello", sender=STRANGER))
        await settle(services)
        party = await services.external.find(STRANGER)
        assert party is not None
    finally:
        await shutdown_services(services)
    (config.external_dir / f"{party.id}.jsonl").unlink()
    (config.external_dir / "removed").write_text("not a directory", encoding="utf-8")

    services = await open_services(config, brain=ScriptedBrain())
    try:
        assert services.recovery is not None and services.recovery.removed_parties == 0
        assert await services.external.get(party.id) is not None  # kept until it can be saved
    finally:
        await shutdown_services(services)


async def test_a_party_deleted_twice_keeps_both_copies(tmp_path: Path) -> None:
    # Regression: a party whose record was saved once writes again (a new record under
    # the same id); deleted again, the second copy overwrote the first one, and every
    # message of the first record was lost.
    config = telegram_config(tmp_path)
    copies = []
    for text in ("the first record", "the second record"):
        services = await open_services(config, brain=ScriptedBrain())
        try:
            await attach_channel(services, RecordingChannel("telegram"))
            await services.router.deliver(inbound(text, sender=STRANGER))
            await settle(services)
            party = await services.external.find(STRANGER)
            assert party is not None
        finally:
            await shutdown_services(services)
        (config.external_dir / f"{party.id}.jsonl").unlink()
        services = await open_services(config, brain=ScriptedBrain())
        try:
            assert services.recovery is not None
            ((copy, _),) = services.recovery.saved_parties.values()
            copies.append(copy)
            if len(copies) == 2:
                (alert,) = await _serve_once(services)
                assert f"{copy} (move it back into" in alert and f"as {party.id}.jsonl" in alert
        finally:
            await shutdown_services(services)
    assert copies == [
        removed_party_path(config.external_dir, party.id),
        config.external_dir / "removed" / f"{party.id}.2.jsonl",
    ]
    for copy, text in zip(copies, ("the first record", "the second record"), strict=True):
        said = parse_lines(copy.read_bytes(), copy.name)
        assert [m["content"] for m in said if m.get("direction") == "in"] == [text]


async def test_a_copy_keeps_what_the_models_answers_answer_and_their_withdrawal(
    tmp_path: Path,
) -> None:
    # Regression (session 42): the copy wrote the model's answers without `answers` (the
    # message of theirs each answers, which a restart reads) and a withdrawn one as a
    # line of kind "withdrawn" with no `withdrawn` event naming it.
    kim = "7001"
    config = telegram_config(tmp_path, trust={"contacts": {"telegram": {kim: "known"}}})
    services = await open_services(config, brain=ScriptedBrain())
    try:
        telegram = RecordingChannel("telegram")
        await attach_channel(services, telegram)
        await services.router.deliver(inbound("hello", sender=kim, message_id="k0"))
        await settle(services)
        telegram.unreachable = True  # the next answer waits in the outbox ...
        await services.router.deliver(inbound("are you there?", sender=kim, message_id="k1"))
        await wait_until(lambda: telegram.attempts >= 2, what="the answer's send tried")
        party = await services.external.find(kim)
        assert party is not None
        await services.external.set_tier(party.id, "blocked")  # ... and is withdrawn
        await settle(services)
        rows = [{**r, "id": None} for r in await services.external.messages(party.id)]
        assert [r["kind"] for r in rows] == ["message", "answer", "message", "withdrawn"]
    finally:
        await shutdown_services(services)
    record = config.external_dir / f"{party.id}.jsonl"
    record.unlink()  # deleted while stopped

    services = await open_services(config, brain=ScriptedBrain())
    copy = removed_party_path(config.external_dir, party.id)
    await shutdown_services(services)
    lines = parse_lines(copy.read_bytes(), copy.name)
    answers = [x for x in lines if x.get("direction") == "out"]
    assert [x.get("answers") for x in answers] == ["k0", "k1"]
    (withdrawn,) = [x for x in lines if x.get("event") == "withdrawn"]
    assert (withdrawn["answers"], withdrawn["at"]) == ("k1", answers[1]["timestamp"])

    copy.rename(record)  # put back: the party as it was
    services = await open_services(config, brain=ScriptedBrain())
    try:
        again = await services.external.messages(party.id)
        assert [{**r, "id": None} for r in again] == rows
    finally:
        await shutdown_services(services)
