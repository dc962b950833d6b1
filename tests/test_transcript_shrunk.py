"""A transcript that shrank while the daemon was stopped (an older copy put back, a cut
by a file-system repair, a 0-byte file): the turns the index held and the file lost are
saved before its rows go, the owner is told, and a file without its meta line keeps the
index's channel, identity and pin. Before session 39 the rows were deleted with a log
line only (the index held the last copy of those turns), and a 0-byte file became a web
conversation of 1970, the owner's pinned conversation lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.daemon import start_serving
from bot.index import ConversationRecord
from bot.services import open_services
from bot.transcript import UnreadableTranscript, parse_lines
from bot.transcript_rescue import REMOVED_DIR
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import inbound
from tests.test_cli import Store, filled_store

OWNER = "424242"


async def _owner_conversation(config: object) -> ConversationRecord:
    """The owner's pinned Telegram conversation, two messages and their replies."""
    services = await open_services(config)  # type: ignore[arg-type]
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        for text in ("the quince jam recipe", "call the plumber about the leak"):
            await services.router.deliver(inbound(text, sender=OWNER))
            await settle(services)
        (conv_id,) = [r.id for r in await services.index.list(limit=10)]
        rec = await services.conversations.get(conv_id)
        assert rec is not None and rec.turn_count == 2 and rec.pinned
        return rec
    finally:
        await shutdown_services(services)


def _turns(path: Path) -> list[tuple[int, str, str]]:
    lines = parse_lines(path.read_bytes(), path.name)
    return [(x["turnNumber"], x["role"], x["content"]) for x in lines if x["type"] == "turn"]


async def test_the_turns_a_shrunk_transcript_lost_are_saved_and_told(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    rec = await _owner_conversation(config)
    transcript = config.conversations_dir / f"{rec.id}.jsonl"
    before = _turns(transcript)
    assert [(n, role) for n, role, _ in before] == [
        (1, "user"),
        (1, "assistant"),
        (2, "user"),
        (2, "assistant"),
    ]
    raw = transcript.read_bytes().splitlines(keepends=True)
    # an older copy put back: the meta line and the first message only
    transcript.write_bytes(raw[0] + next(x for x in raw if b'"role":"user"' in x))

    services = await open_services(config)
    copy = config.conversations_dir / REMOVED_DIR / f"{rec.id}.shrunk.jsonl"
    try:
        assert services.recovery is not None
        assert services.recovery.shrunk == {transcript.name: (copy, 3)}
        assert _turns(copy) == before[1:]  # the reply to 1, the message 2 and its reply
        meta = parse_lines(copy.read_bytes(), copy.name)[0]
        assert meta["id"] == rec.id and meta["identityKey"] == rec.identity_key
        assert copy.stat().st_mode & 0o777 == 0o600
        fresh = await services.conversations.get(rec.id)
        # the file is the truth, with the line that keeps the lost turn 2's number taken
        assert fresh is not None and fresh.turn_count == 2
        assert (await services.search.search("plumber")).results == []
        telegram = RecordingChannel("telegram")
        services.channels["telegram"] = telegram
        await start_serving(services, [telegram])
        sent = await telegram.wait_for(lambda sent: any(str(copy) in m.text for m in sent))
        alert = next(m for m in sent if str(copy) in m.text)
        assert alert.chat_id == OWNER
        assert alert.text.startswith("Transcripts that lost turns at start: ")
        assert f"{transcript.name} shrank" in alert.text and "the 3 turns" in alert.text
        assert "missing at start" not in " ".join(m.text for m in sent)
    finally:
        await shutdown_services(services)


async def test_a_zero_byte_transcript_keeps_the_indexed_meta_and_pin(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    rec = await _owner_conversation(config)
    transcript = config.conversations_dir / f"{rec.id}.jsonl"
    before = _turns(transcript)
    transcript.write_bytes(b"")

    services = await open_services(config)
    try:
        copy = config.conversations_dir / REMOVED_DIR / f"{rec.id}.shrunk.jsonl"
        assert _turns(copy) == before
        kept = await services.conversations.get(rec.id)
        assert kept is not None
        assert (kept.channel, kept.identity_key, kept.pinned, kept.created) == (
            rec.channel,
            rec.identity_key,
            True,
            rec.created,
        )
        assert rec.identity_key is not None
        pinned = await services.conversations.pinned_for(rec.identity_key)
        assert pinned is not None and pinned.id == rec.id
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("the quince jam again", sender=OWNER))
        await settle(services)
        # the owner's next message goes on in it, and the file has its meta line again
        lines = services.store.read_lines(rec.id)
        assert lines[0]["type"] == "meta" and lines[0]["channel"] == "telegram"
        assert [r.id for r in await services.index.list(limit=10)] == [rec.id]
    finally:
        await shutdown_services(services)


async def test_lost_turns_that_cannot_be_saved_keep_the_rows(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    rec = await _owner_conversation(config)
    transcript = config.conversations_dir / f"{rec.id}.jsonl"
    transcript.write_bytes(transcript.read_bytes().splitlines(keepends=True)[0])
    cut = transcript.read_bytes()
    (config.conversations_dir / REMOVED_DIR).write_text("not a directory", encoding="utf-8")

    services = await open_services(config)
    try:
        assert services.recovery is not None and transcript.name in services.recovery.unreadable
        kept = await services.conversations.get(rec.id)
        assert kept is not None and kept.turn_count == 2  # the rows stay until saved
        assert (await services.search.search("plumber")).results != []
        with pytest.raises(UnreadableTranscript):  # not written to this run
            await services.store.append(rec.id, [{"type": "event", "event": "x"}])
        assert transcript.read_bytes() == cut
    finally:
        await shutdown_services(services)

    (config.conversations_dir / REMOVED_DIR).unlink()
    services = await open_services(config)  # the next start saves them
    try:
        copy = config.conversations_dir / REMOVED_DIR / f"{rec.id}.shrunk.jsonl"
        assert services.recovery is not None and services.recovery.shrunk[transcript.name][1] == 4
        assert copy.is_file()
    finally:
        await shutdown_services(services)


def test_reindex_saves_the_turns_a_shrunk_transcript_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    filled: Store = filled_store(tmp_path, monkeypatch)
    conv_id = filled.ids["telegram"]
    transcript = filled.config.conversations_dir / f"{conv_id}.jsonl"
    raw = transcript.read_bytes().splitlines(keepends=True)
    transcript.write_bytes(b"".join(x for x in raw if b'"role":"assistant"' not in x))
    status, out = filled.run("reindex", "--json", capsys=capsys)
    assert status == 0
    copy = filled.config.conversations_dir / REMOVED_DIR / f"{conv_id}.shrunk.jsonl"
    assert [(n, role) for n, role, _ in _turns(copy)] == [(1, "assistant")]
    warnings = json.loads(out)["warnings"]
    assert any(f"{conv_id}.jsonl shrank" in w and str(copy) in w for w in warnings), warnings


async def test_the_next_message_is_numbered_past_the_lost_turns_and_answered(
    tmp_path: Path,
) -> None:
    """The lost reply's outbox row keeps its key (<conv>:2:reply): before session 40 the
    owner's next message took turn 2 again, and its reply, written to the transcript,
    was dropped as queued before and never sent. The shrunk file is given a line that
    keeps the lost numbers taken, so an index rebuilt from the files keeps them too."""
    config = telegram_config(tmp_path)
    rec = await _owner_conversation(config)
    transcript = config.conversations_dir / f"{rec.id}.jsonl"
    raw = transcript.read_bytes().splitlines(keepends=True)
    # an older copy put back: the first exchange only
    transcript.write_bytes(b"".join(raw[:1] + [x for x in raw if b'"turnNumber":1' in x]))

    services = await open_services(config)
    try:
        fresh = await services.conversations.get(rec.id)
        assert fresh is not None and fresh.turn_count == 2
    finally:
        await shutdown_services(services)
    (kept,) = [x for x in services.store.read_lines(rec.id) if x.get("event") == "turns_lost"]
    assert kept["throughTurn"] == 2
    for path in config.data_dir.glob("conversations.db*"):
        path.unlink()  # rebuilt from the files, as by a reindex

    services = await open_services(config)
    try:
        telegram = RecordingChannel("telegram")
        await attach_channel(services, telegram)
        message = inbound("the roof tiles came loose", sender=OWNER)
        await services.router.deliver(message)
        await settle(services)
        assert _turns(transcript)[-2:][0][:2] == (3, "user")
        assert await services.outbox.has_key(f"{rec.id}:3:reply")
        sent = await telegram.wait_for(
            lambda sent: any(m.in_reply_to == message.message_id for m in sent)
        )
        assert [m.in_reply_to for m in sent].count(message.message_id) == 1
    finally:
        await shutdown_services(services)


def test_reindex_keeps_the_numbers_of_the_turns_a_shrunk_transcript_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    filled: Store = filled_store(tmp_path, monkeypatch)
    conv_id = filled.ids["telegram"]
    transcript = filled.config.conversations_dir / f"{conv_id}.jsonl"
    top = max(number for number, _, _ in _turns(transcript))
    raw = transcript.read_bytes().splitlines(keepends=True)
    transcript.write_bytes(b"".join(x for x in raw if f'"turnNumber":{top}'.encode() not in x))
    status, _ = filled.run("reindex", "--json", capsys=capsys)
    assert status == 0
    lines = parse_lines(transcript.read_bytes(), transcript.name)
    assert [x["throughTurn"] for x in lines if x.get("event") == "turns_lost"] == [top]
