"""Transcripts (seed 000 "Transcript (JSONL)"): format round-trip against the seed's own
example lines, our lines' field names, and tolerance of torn and corrupt lines."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bot import healthcheck
from bot.config import AppConfig
from bot.services import open_services
from bot.transcript import TranscriptStore
from bot.transcript_lines import event_line, meta_line, turn_line
from tests.conftest import RecordingChannel, attach_channel, make_config, settle, shutdown_services
from tests.support import (
    ScriptedBrain,
    fill_disk,
    inbound,
    mount_tmpfs,
    seed_jsonl_blocks,
    seed_transcript_example,
)

SEED_TURN_FIELDS = {
    "role",
    "content",
    "timestamp",
    "turnNumber",
    "thinkingText",
    "usage",
    "cost",
    "channel",
    "sender",
}


def test_seed_example_is_what_we_think() -> None:
    lines = seed_transcript_example()
    assert [line["type"] for line in lines] == ["meta"] + ["turn"] * 4 + ["event"] * 3
    assert lines[0]["id"].startswith("conv-")
    assert {line["event"] for line in lines[5:]} == {
        "title_assigned",
        "compression",
        "abbreviation",
    }


async def test_seed_lines_round_trip_through_the_store(tmp_path: Path) -> None:
    lines = seed_transcript_example()
    store = TranscriptStore(tmp_path / "conversations")
    await store.create(lines[0])
    await store.append(lines[0]["id"], lines[1:4])
    await store.append(lines[0]["id"], lines[4:])
    assert store.read_lines(lines[0]["id"]) == lines
    # One compact JSON object per line, nothing else in the file.
    raw = store.path(lines[0]["id"]).read_bytes()
    assert raw.endswith(b"\n")
    assert [json.loads(r) for r in raw.splitlines()] == lines
    assert store.path(lines[0]["id"]).name == f"{lines[0]['id']}.jsonl"


async def test_seed_channel_metadata_lines_round_trip(tmp_path: Path) -> None:
    """The "Channel Metadata in Transcripts" example (turns with channel and sender)."""
    channel_block = next(b for b in seed_jsonl_blocks() if '"sender"' in b[0])
    lines = [json.loads(line) for line in channel_block]
    store = TranscriptStore(tmp_path)
    meta = meta_line("conv-01HQXK5J7G8M3N4P5R6S7T8V9W", "whatsapp", ["+1555000000"])
    await store.create(meta)
    await store.append(meta["id"], lines)
    assert store.read_lines(meta["id"]) == [meta, *lines]


async def test_seed_transcript_indexes_like_the_seed_says(tmp_path: Path) -> None:
    """Drop the seed's transcript into a data directory: recovery registers it."""
    lines = seed_transcript_example()
    config = make_config(tmp_path)
    config.conversations_dir.mkdir(parents=True)
    path = config.conversations_dir / f"{lines[0]['id']}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    services = await open_services(config)
    try:
        rec = await services.conversations.get(lines[0]["id"])
        assert rec is not None
        assert rec.channel == "web"
        assert rec.created == "2026-02-14T09:00:00Z"
        assert rec.updated == "2026-02-14T09:02:08Z"  # last turn, not the later events
        assert rec.turn_count == 2
        assert rec.title == "autumn-wind-drifts"
        assert rec.topics == ["server-monitoring", "login-bug"]
        assert rec.abbreviation is not None and rec.abbreviation.startswith("Checked production")
        assert rec.tokens_in == 3000 and rec.tokens_out == 850
        assert rec.cost_total == pytest.approx(0.01)
        page = await services.search.search("login bug")
        assert [r.conversation_id for r in page.results] == [lines[0]["id"]]
    finally:
        await shutdown_services(services)


def _check_turn(line: dict[str, Any]) -> None:
    assert line["type"] == "turn"
    assert line["role"] in ("user", "assistant")
    assert isinstance(line["content"], str)
    assert isinstance(line["turnNumber"], int) and line["turnNumber"] >= 1
    ts = line["timestamp"]
    assert isinstance(ts, str) and ts.endswith("Z") and "T" in ts


async def test_our_lines_use_the_seed_field_names(tmp_path: Path) -> None:
    """A real exchange through router, replies and manager writes the seed's fields."""
    config = make_config(tmp_path, owner={"identities": {"telegram": ["424242"]}})
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    try:
        channel = await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("How is the boiler?", sender="424242"))
        await settle(services)
        rec = (await services.conversations.list())[0]
        manager = services.conversations
        await manager.set_title_topics(rec.id, "boiler-check", ["boiler", "heating"], 1)
        await manager.append_event(
            rec.id, "compression", compressedThrough=1, summary="Asked about the boiler."
        )
        await manager.set_abbreviation(rec.id, "The owner asked about the boiler.")
        await manager.rename(rec.id, "Boiler")
        lines = services.store.read_lines(rec.id)
    finally:
        await shutdown_services(services)
    assert channel.texts("reply") == ["re: How is the boiler?"]

    meta = lines[0]
    assert meta["type"] == "meta" and meta["id"] == rec.id
    assert meta["channel"] == "telegram" and isinstance(meta["participants"], list)
    assert set(meta) >= {"id", "channel", "created", "participants"}

    user, assistant = lines[1], lines[2]
    for line in (user, assistant):
        _check_turn(line)
        assert line["turnNumber"] == 1  # shared by the message and its reply
        assert line["channel"] == "telegram"
    assert user["role"] == "user" and user["sender"] == "424242"
    assert user["content"] == "How is the boiler?"
    assert assistant["role"] == "assistant"
    assert assistant["usage"] == {"input": 100 + len("How is the boiler?"), "output": 20}
    assert assistant["cost"] == pytest.approx(0.0015)
    assert assistant["thinkingText"] == "thinking about How is the boiler?"
    assert set(assistant) >= SEED_TURN_FIELDS - {"sender"}
    assert set(user) >= SEED_TURN_FIELDS - {"thinkingText", "usage", "cost"}

    events = {line["event"]: line for line in lines if line["type"] == "event"}
    assert events["title_assigned"]["title"] == "boiler-check"
    assert events["title_assigned"]["topics"] == ["boiler", "heating"]
    assert events["compression"]["compressedThrough"] == 1
    assert events["compression"]["summary"] == "Asked about the boiler."
    assert events["abbreviation"]["text"] == "The owner asked about the boiler."
    assert events["meta_update"]["title"] == "Boiler"
    for event in events.values():
        assert isinstance(event["timestamp"], str) and event["timestamp"].endswith("Z")


def test_line_builders() -> None:
    line = turn_line("user", "hi", 3, channel="email", sender="a@b.c", cost=None, usage=None)
    assert line == {
        "type": "turn",
        "role": "user",
        "content": "hi",
        "timestamp": line["timestamp"],
        "turnNumber": 3,
        "channel": "email",
        "sender": "a@b.c",
    }
    event = event_line("title_assigned", title="t", topics=["a"], timestamp="2026-01-01T00:00:00Z")
    assert event == {
        "type": "event",
        "event": "title_assigned",
        "title": "t",
        "topics": ["a"],
        "timestamp": "2026-01-01T00:00:00Z",
    }


def test_store_refuses_paths_that_are_not_conversation_ids(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path)
    for bad in ("../etc/passwd", "conv-../../x", "notes", "conv-a/b"):
        with pytest.raises(ValueError):
            store.path(bad)


# -- torn and corrupt lines -------------------------------------------------------------
async def _conversation_with_turns(services: Any, count: int) -> str:
    rec = await services.conversations.create("web")
    for i in range(1, count + 1):
        await services.conversations.append_turn(rec.id, "user", f"good line number{i} alpha")
        await services.conversations.append_turn(rec.id, "assistant", f"answer{i} beta")
    return str(rec.id)


async def test_torn_last_line_is_skipped_and_appends_continue(
    services: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conv_id = await _conversation_with_turns(services, 2)
    path = services.store.path(conv_id)
    with open(path, "ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"type":"turn","role":"user","content":"half a mess')
    caplog.set_level(logging.WARNING, "my_agent.transcript")
    lines = services.store.read_lines(conv_id)
    assert len(lines) == 5 and lines[-1]["content"] == "answer2 beta"
    assert any("torn last line" in r.getMessage() for r in caplog.records)

    await services.conversations.append_turn(conv_id, "user", "after the tear gamma")
    lines = services.store.read_lines(conv_id)
    assert [line.get("content") for line in lines[-2:]] == ["answer2 beta", "after the tear gamma"]
    assert lines[-1]["turnNumber"] == 3
    assert any("corrupt transcript line" in r.getMessage() for r in caplog.records)
    page = await services.search.search("gamma")
    assert [r.conversation_id for r in page.results] == [conv_id]
    assert (await services.search.search("mess")).results == []


async def test_corrupt_middle_line_is_skipped(
    services: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conv_id = await _conversation_with_turns(services, 2)
    path = services.store.path(conv_id)
    raw = path.read_bytes().splitlines(keepends=True)
    raw.insert(2, b'{"type":"turn","role":"user",,, not json\n')
    raw.insert(4, b"[1, 2, 3]\n")  # valid JSON, not a line object
    raw.insert(5, b"\xff\xfe garbage bytes\n")
    path.write_bytes(b"".join(raw))
    caplog.set_level(logging.WARNING, "my_agent.transcript")
    lines = services.store.read_lines(conv_id)
    assert [line["type"] for line in lines] == ["meta", "turn", "turn", "turn", "turn"]
    assert len([r for r in caplog.records if r.name == "my_agent.transcript"]) >= 3
    await services.conversations.append_turn(conv_id, "user", "still writable delta")
    assert services.store.read_lines(conv_id)[-1]["content"] == "still writable delta"


MALFORMED = [
    b"[1, 2]",
    b'"x"',
    b'{"type":"turn"}',
    b'{"type":"turn","role":"user","turnNumber":3}',
    b'{"type":"turn","role":"user","content":"odd number epsilon","turnNumber":"3"}',
    b'{"type":"turn","role":"robot","content":"no role epsilon","turnNumber":3}',
    b'{"type":"event"}',
    b'{"type":null}',
]


async def test_valid_json_of_the_wrong_shape_is_skipped_like_a_corrupt_line(
    services: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: a turn line without its content or role was read back as a turn:
    # `conversations show` printed "[None] ... None", or ended in a KeyError (exit 1).
    conv_id = await _conversation_with_turns(services, 1)
    path = services.store.path(conv_id)
    with open(path, "ab") as fh:
        fh.write(b"".join(raw + b"\n" for raw in MALFORMED))
    caplog.set_level(logging.WARNING, "my_agent.transcript")
    lines = services.store.read_lines(conv_id)
    assert [line["type"] for line in lines] == ["meta", "turn", "turn"]
    skipped = [r.getMessage() for r in caplog.records if r.name == "my_agent.transcript"]
    assert len(skipped) == len(MALFORMED), skipped
    await services.conversations.append_turn(conv_id, "user", "still writable zeta")
    lines = services.store.read_lines(conv_id)
    assert (lines[-1]["content"], lines[-1]["turnNumber"]) == ("still writable zeta", 2)
    assert (await services.search.search("zeta")).results[0].conversation_id == conv_id
    assert (await services.search.search("epsilon")).results == []


async def _stored_conversation(tmp_path: Path, count: int) -> tuple[AppConfig, str, Path]:
    """A conversation of ``count`` exchanges stored by services since closed: the
    config, its id and its transcript."""
    config: AppConfig = make_config(tmp_path)
    services = await open_services(config)
    try:
        conv_id = await _conversation_with_turns(services, count)
    finally:
        await shutdown_services(services)
    return config, conv_id, config.conversations_dir / f"{conv_id}.jsonl"


@pytest.mark.parametrize("damage", ["torn_tail", "corrupt_middle"])
async def test_recovery_indexes_the_good_lines(tmp_path: Path, damage: str) -> None:
    config, conv_id, path = await _stored_conversation(tmp_path, 3)
    raw = path.read_bytes().splitlines(keepends=True)
    if damage == "torn_tail":
        raw.append(b'{"type":"turn","role":"user","content":"torn zeta","turnNu')
    else:
        raw[3] = b'{"type":"turn","role":"user","content":"corrupt zeta", BROKEN\n'
    path.write_bytes(b"".join(raw))
    config.index_path.unlink()  # rebuilt from the transcripts on start

    services = await open_services(config)
    try:
        rec = await services.conversations.get(conv_id)
        assert rec is not None and rec.turn_count == 3
        rows = await services.index_db.fetchall(
            "SELECT turn_number, role, content FROM turns WHERE conversation_id = ? ORDER BY id",
            (conv_id,),
        )
        good = [
            (line["turnNumber"], line["role"], line["content"])
            for line in services.store.read_lines(conv_id)
            if line["type"] == "turn"
        ]
        assert rows == good
        assert len(rows) == (6 if damage == "torn_tail" else 5)
        assert (await services.search.search("zeta")).results == []
        assert (await services.search.search("number3")).results[0].conversation_id == conv_id
        # Later appends after recovery are read and indexed.
        await services.conversations.append_turn(conv_id, "user", "epsilon after recovery")
        assert (await services.search.search("epsilon")).results[0].conversation_id == conv_id
    finally:
        await shutdown_services(services)


async def test_a_line_with_bytes_that_are_not_utf8_keeps_its_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression (session 27): a byte that is not UTF-8 inside an otherwise whole line (a
    # flipped bit on disk) made the whole line, an owner's message, a corrupt line: left
    # out of the index rebuilt from the transcripts, of the history and of search.
    config, conv_id, path = await _stored_conversation(tmp_path, 3)
    data = path.read_bytes()
    assert data.count(b"number2 alpha") == 1
    path.write_bytes(data.replace(b"number2 alpha", b"number2 al\xffpha"))
    config.index_path.unlink()  # rebuilt from the transcripts on start
    caplog.set_level(logging.WARNING, "my_agent.transcript")

    services = await open_services(config)
    try:
        rec = await services.conversations.get(conv_id)
        assert rec is not None and rec.turn_count == 3
        contents = [
            row[0]
            for row in await services.index_db.fetchall(
                "SELECT content FROM turns WHERE conversation_id = ? AND role = 'user' ORDER BY id",
                (conv_id,),
            )
        ]
        assert contents[1] == "good line number2 al\ufffdpha"
        assert (await services.search.search("number2")).results[0].conversation_id == conv_id
    finally:
        await shutdown_services(services)
    warned = [r.getMessage() for r in caplog.records if r.name == "my_agent.transcript"]
    assert any(f"{path.name}:4: bytes that are not UTF-8" in m for m in warned), warned
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["index"]["ok"], report["index"]


async def test_fsync_policy_never_still_writes(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path, fsync=False)
    meta = meta_line("conv-01HQXK5J7G8M3N4P5R6S7T8V9W", "web", ["user"])
    await store.create(meta)
    size = await store.append(meta["id"], [turn_line("user", "x", 1)])
    assert size == store.path(meta["id"]).stat().st_size
    assert len(store.read_lines(meta["id"])) == 2


async def test_an_append_the_full_disk_cuts_short_leaves_nothing_behind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: on a full disk a write went in part (the file's last page had room),
    # then failed; the message was refused (and stored later from memory), but its
    # first bytes stayed in the transcript as a corrupt line for good, warned about at
    # every read. Had the cut fallen just before the newline, the line would have read
    # as a whole turn and the message would have been in the transcript twice.
    data = tmp_path / "data"
    mount_tmpfs(data, "4m")
    try:
        services = await open_services(make_config(tmp_path), brain=ScriptedBrain())
        try:
            rec = await services.conversations.create("web")
            await services.conversations.append_turn(rec.id, "user", "before the disk fills")
            path = services.store.path(rec.id)
            before = path.read_bytes()
            fill_disk(data)
            with pytest.raises(OSError):  # larger than the slack of the file's last page
                await services.conversations.append_turn(rec.id, "user", "big " * 5000)
            assert path.read_bytes() == before
            os.unlink(data / "filler.bin")
            caplog.set_level(logging.WARNING, "my_agent.transcript")
            await services.conversations.append_turn(rec.id, "user", "after the space came back")
            lines = services.store.read_lines(rec.id)
            assert [x.get("content") for x in lines if x["type"] == "turn"] == [
                "before the disk fills",
                "after the space came back",
            ]
            assert not [r for r in caplog.records if "line" in r.getMessage()]
        finally:
            await shutdown_services(services)
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)
