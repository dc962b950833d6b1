"""Start-up recovery and reindex (seed 000 "Flow 6"): the index is rebuilt from the
transcripts to the same records and the same search answers."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot import cli, healthcheck
from bot.brain.base import BrainReply, BrainRequest, BrainUnavailable
from bot.config import AppConfig
from bot.reply_generation import OUTAGE
from bot.resume import resume_pending_replies
from bot.services import DatabaseOpenError, open_services
from bot.transcript import turn_line
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    raw_config,
    settle,
    shutdown_services,
)
from tests.support import ScriptedBrain, inbound

QUERIES = [
    "boiler pressure",
    "dentist appointment",
    "invoice",
    "running",  # porter stemming: also finds "runs"
    "train tickets Berlin",
    "ERR-4521",
    'quote " and * NEAR(',
]

MESSAGES = [
    ("telegram", "424242", "The boiler pressure dropped to 0.8 bar again"),
    ("telegram", "424242", "Remind me about the dentist appointment on Friday"),
    ("email", "robin.owner@example.org", "Invoice 2231 from the plumber is attached"),
    ("web", "owner", "I keep running out of printer ink"),
    ("web", "owner", "Book train tickets to Berlin for the conference"),
    ("telegram", "424242", "The NAS runs hot; error ERR-4521 appears in the log"),
    ("email", "robin.owner@example.org", "Plumber says the boiler pressure valve is worn"),
    ("web", "owner", "Was the invoice for the dentist paid?"),
]


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(raw_config(tmp_path, owner={"identities": owner_identities()})),
        encoding="utf-8",
    )
    return path


async def _build_store(config: AppConfig) -> None:
    services = await open_services(config, brain=ScriptedBrain())
    try:
        for name in ("telegram", "email"):
            await attach_channel(services, RecordingChannel(name))
        for i, (channel, sender, text) in enumerate(MESSAGES):
            msg = inbound(
                text,
                channel=channel,
                sender=sender,
                chat="dashboard" if channel == "web" else sender,
                message_id=f"{channel}-{i}",
                subject="Plumbing" if channel == "email" else None,
                identity_verified=True if channel == "email" else None,
            )
            await services.router.deliver(msg)
        await settle(services)
        web = await services.conversations.most_recent("web")
        await services.router.deliver(
            inbound("/rename Household chores", channel="web", sender="owner", chat="dashboard")
        )
        await services.conversations.set_title_topics(web.id, "ignored", ["chores"], 2)
        await services.conversations.set_abbreviation(web.id, "Printer ink and train tickets.")
        await services.router.deliver(inbound("/model opus", sender="424242"))
        await services.router.deliver(inbound("/new", sender="424242"))
        await services.router.deliver(inbound("Fresh start about the garden", sender="424242"))
        await settle(services)
    finally:
        await shutdown_services(services)


async def _snapshot(config: AppConfig) -> tuple[dict[str, Any], dict[str, Any], int]:
    services = await open_services(config)
    try:
        records = {r.id: dataclasses.asdict(r) for r in await services.index.all_records()}
        results = {}
        for query in QUERIES:
            page = await services.search.search(query, limit=10)
            results[query] = page.to_dict()
        fts = await services.index_db.fetchone("SELECT count(*) FROM turns_fts")
        assert fts is not None
        return records, results, int(fts[0])
    finally:
        await shutdown_services(services)


@pytest.mark.parametrize("how", ["cli_reindex", "delete_db"])
async def test_rebuilt_index_answers_identically(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("ANTHROPIC_API_KEY", "MY_AGENT_DATA_DIR", "MY_AGENT_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    config_path = _config_file(tmp_path)
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    await _build_store(config)
    before = await _snapshot(config)
    records, results, fts_rows = before
    assert len(records) == 5  # telegram (old + new pin), email thread, web, ...
    assert any(r["pinned"] is False and r["channel"] == "telegram" for r in records.values())
    assert all(results[q]["results"] for q in QUERIES[:6]), results
    assert fts_rows == sum(r["turn_count"] * 2 for r in records.values())

    if how == "cli_reindex":
        status = await asyncio.to_thread(cli.main, ["--config", str(config_path), "reindex"])
        assert status == 0
    else:
        config.index_path.unlink()
        for suffix in ("-wal", "-shm"):
            Path(f"{config.index_path}{suffix}").unlink(missing_ok=True)
    after = await _snapshot(config)
    assert after[0].keys() == before[0].keys()
    for conv_id in before[0]:
        assert after[0][conv_id] == before[0][conv_id], conv_id
    for query in QUERIES:
        assert after[1][query] == before[1][query], query
    assert after[2] == before[2]


async def test_lines_written_but_not_indexed_are_caught_up(tmp_path: Path) -> None:
    """A crash between the transcript append and the index update: FTS catches up."""
    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        rec = await services.conversations.create("web")
        await services.conversations.append_turn(rec.id, "user", "indexed normally")
        from bot.transcript import turn_line

        # Written durably straight to the transcript, as if the process died right after.
        await services.store.append(
            rec.id,
            [
                turn_line("assistant", "reply about kumquats", 1),
                turn_line("user", "kumquat jam recipe?", 2),
            ],
        )
        assert (await services.search.search("kumquat")).results == []
    finally:
        await shutdown_services(services)

    services = await open_services(config, brain=ScriptedBrain())
    try:
        assert services.recovery is not None
        assert services.recovery.caught_up_lines == 2
        assert services.recovery.registered == 0
        page = await services.search.search("kumquat")
        assert [r.conversation_id for r in page.results] == [rec.id]
        assert sorted(page.results[0].matched_turns) == [1, 2]
        # The unanswered user turn is a pending reply.
        assert services.recovery.pending_replies == [(rec.id, 2)]
        fresh = await services.conversations.get(rec.id)
        assert fresh is not None and fresh.turn_count == 2
    finally:
        await shutdown_services(services)


async def test_a_restart_reads_no_transcript_and_no_record_already_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A year's store restarts in seconds only if start costs a stat per transcript: no
    # read of one the index has to its last byte, and no record built for it.
    import bot.recovery
    from bot.transcript import TranscriptStore

    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        ids = [(await services.conversations.create("web")).id for _ in range(6)]
        for conv_id in ids:
            await services.conversations.append_turn(conv_id, "user", f"note {conv_id}")
        await services.store.append(ids[2], [turn_line("user", "written, not indexed", 2)])
    finally:
        await shutdown_services(services)
    reads: list[str] = []
    records: list[str] = []
    real_read, real_record = TranscriptStore.read_from, bot.recovery.row_to_record

    def read_from(self: TranscriptStore, conv_id: str, offset: int) -> Any:
        reads.append(conv_id)
        return real_read(self, conv_id, offset)

    def row_to_record(row: Any) -> Any:
        records.append(row[0])
        return real_record(row)

    monkeypatch.setattr(TranscriptStore, "read_from", read_from)
    monkeypatch.setattr(bot.recovery, "row_to_record", row_to_record)
    services = await open_services(config, brain=ScriptedBrain())
    try:
        assert services.recovery is not None and services.recovery.caught_up_lines == 1
        assert reads == [ids[2]] and records == [ids[2]]
        fresh = await services.conversations.get(ids[2])
        assert fresh is not None and fresh.turn_count == 2
    finally:
        await shutdown_services(services)


async def test_pending_reply_is_answered_once_after_restart(tmp_path: Path) -> None:
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    brain = ScriptedBrain()
    brain.gate = asyncio.Event()  # the reply never finishes: the process "dies"
    services = await open_services(config, brain=brain)
    channel = await attach_channel(services, RecordingChannel("telegram"))
    await services.router.deliver(inbound("what about the roof?", sender="424242", chat="77"))
    await asyncio.wait_for(brain.started.wait(), 5)
    await services.replies.queue.drain(timeout=0.1)  # cancels the job mid-reply
    await shutdown_services(services)
    assert channel.sent == []

    for attempt in range(2):  # a second restart must not answer again
        brain2 = ScriptedBrain()
        services = await open_services(config, brain=brain2)
        try:
            channel = await attach_channel(services, RecordingChannel("telegram"))
            resumed = await resume_pending_replies(services)
            await settle(services)
            if attempt == 0:
                assert resumed == 1
                assert channel.texts("reply") == ["re: what about the roof?"]
                assert channel.sent[0].chat_id == "77"
            else:
                assert resumed == 0 and channel.sent == []
            rec = (await services.conversations.list(channel="telegram"))[0]
            turns = [line for line in services.store.read_lines(rec.id) if line["type"] == "turn"]
            assert [(t["role"], t["turnNumber"]) for t in turns] == [
                ("user", 1),
                ("assistant", 1),
            ]
        finally:
            await shutdown_services(services)


class DownBrain:
    """The model is unreachable: every call fails as an outage."""

    name = "down"

    def __init__(self) -> None:
        self.calls = 0

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        self.calls += 1
        raise BrainUnavailable("connection refused")

    async def close(self) -> None:
        return None


async def _wait_until(predicate: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _outage_run(
    config: AppConfig, *, failing: bool, first: bool, sent_first: bool = False
) -> RecordingChannel:
    """One process's life during an outage: its reply tried several times, then a stop."""
    brain = DownBrain()
    services = await open_services(config, brain=brain)
    services.replies.retry_interval = 0.01
    services.outbox.base_delay = 0.01
    try:
        channel = RecordingChannel("telegram")
        channel.failing = failing
        # the backoff a failing channel's notice earned: retried at once here
        await services.state.run(lambda conn: conn.execute("UPDATE outbox SET next_attempt = 0"))
        await attach_channel(services, channel)
        if first:
            await services.router.deliver(inbound("is the roof fixed?", sender="424242", chat="77"))
        else:
            if sent_first:  # what the last process left unsent goes first
                await _wait_until(lambda: bool(channel.texts("notice")))
            assert await resume_pending_replies(services) == 1
        await _wait_until(lambda: brain.calls >= 4)  # a notice per retry would show now
        if not failing:
            await _wait_until(lambda: bool(channel.texts("notice")))
            await asyncio.sleep(0.05)
    finally:
        await services.replies.queue.drain(timeout=0.1)  # the reply still waits: stopped
        await shutdown_services(services)
    return channel


async def test_a_reply_resumed_into_a_continuing_outage_tells_the_owner_again(
    tmp_path: Path,
) -> None:
    # Regression: the notice's dedup key was the reply's, so after a restart the reply
    # still waiting found it "already queued" and the owner was never told again (nor
    # a dashboard opened since). Told once per process, not once per retry.
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    before = await _outage_run(config, failing=False, first=True)
    assert before.texts("notice") == [OUTAGE]
    after = await _outage_run(config, failing=False, first=False)
    assert after.texts("notice") == [OUTAGE]
    assert after.sent[0].chat_id == "77"


async def test_an_unsent_outage_notice_is_not_doubled_by_a_restart(tmp_path: Path) -> None:
    # The channel is down too (no network): the notice queued before the restart is
    # still unsent after it, and says all a second one would.
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    await _outage_run(config, failing=True, first=True)
    await _outage_run(config, failing=True, first=False)
    last = await _outage_run(config, failing=False, first=False)
    assert last.texts("notice") == [OUTAGE]


async def test_an_outage_notice_sent_late_after_a_restart_is_not_followed_by_another(
    tmp_path: Path,
) -> None:
    # The channel came back with the restart: the notice left unsent goes out first, and
    # the resumed reply, meeting the outage, must not repeat it a minute later.
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    await _outage_run(config, failing=True, first=True)
    last = await _outage_run(config, failing=False, first=False, sent_first=True)
    assert last.texts("notice") == [OUTAGE]


async def test_parties_are_rebuilt_from_their_records(tmp_path: Path) -> None:
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    services = await open_services(config)
    try:
        await services.router.deliver(inbound("hello?", sender="999", chat="999"))
        party = (await services.external.list_parties())[0]
        await services.external.set_tier(party.id, "blocked")
        before = [p.to_dict() for p in await services.external.list_parties()]
        msgs = await services.external.messages(party.id)
    finally:
        await shutdown_services(services)
    config.index_path.unlink()
    services = await open_services(config)
    try:
        assert [p.to_dict() for p in await services.external.list_parties()] == before
        assert await services.external.messages(party.id) == msgs
        assert await services.index.count() == 0  # parties are never conversations
    finally:
        await shutdown_services(services)


async def test_failed_recovery_closes_the_databases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: an exception during recovery left aiosqlite threads running, so the
    process (``my-agent reindex``, the daemon) hung instead of exiting."""
    config = make_config(tmp_path)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("simulated recovery failure")

    monkeypatch.setattr("bot.services.recover", broken)
    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(DatabaseOpenError, match="simulated recovery failure"):
        await open_services(config)
    for _ in range(100):
        extra = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        if not [t for t in extra if not t.daemon]:
            break
        await asyncio.sleep(0.02)
    assert not [t for t in extra if not t.daemon], extra


async def test_needs_abbreviation_is_queued_for_idle_conversations(tmp_path: Path) -> None:
    """Recovery queues idle conversations whose turns were never abbreviated."""
    from bot.transcript import TranscriptStore, event_line, meta_line, turn_line

    config = make_config(tmp_path, conversations={"idle_timeout_seconds": 60})
    store = TranscriptStore(config.conversations_dir)
    old = "2020-01-01T00:00:00.000Z"
    ids = {}
    for name in ("idle", "abbreviated", "active"):
        created = old if name != "active" else None
        meta = meta_line(f"conv-01HQXK5J7G8M3N4P5R6S7T8V{len(ids)}A", "web", ["user"], created)
        await store.create(meta)
        ts = old if name != "active" else None
        lines = [
            turn_line("user", "hi", 1, timestamp=ts),
            turn_line("assistant", "yo", 1, timestamp=ts),
        ]
        if name == "abbreviated":
            lines.append(event_line("abbreviation", text="notes", throughTurn=1, timestamp=old))
        await store.append(meta["id"], lines)
        ids[name] = meta["id"]
    services = await open_services(config)
    try:
        assert services.recovery is not None
        assert services.recovery.needs_abbreviation == [ids["idle"]]
        assert await services.index.needing_abbreviation() == [ids["idle"]]
    finally:
        await shutdown_services(services)


async def test_an_edited_older_pinned_transcript_keeps_the_current_pin(tmp_path: Path) -> None:
    """Regression: a transcript shortened by hand (or a torn line cut off) is re-indexed
    from its start; when it was pinned before a ``/new``, inserting it again broke the
    one-pin-per-identity index and the daemon could not start at all ("recovery from the
    transcripts failed: UNIQUE constraint failed", exit 74, restarted forever)."""
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    services = await open_services(config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        for text in ("the boiler valve is worn", "plumber comes tuesday", "/new", "garden"):
            await services.router.deliver(inbound(text, sender="424242", chat="77"))
        await settle(services)
        old, new = sorted(r.id for r in await services.conversations.list(channel="telegram"))
    finally:
        await shutdown_services(services)
    path = config.conversations_dir / f"{old}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    # the owner deletes the first exchange's reply by hand
    kept = [raw for raw in lines if b"re: the boiler valve" not in raw]
    assert len(kept) == len(lines) - 1
    path.write_bytes(b"".join(kept))

    services = await open_services(config, brain=ScriptedBrain())
    try:
        assert services.recovery is not None and services.recovery.registered == 1
        pinned = await services.conversations.list(channel="telegram", pinned=True)
        assert [r.id for r in pinned] == [new]
        edited = await services.conversations.get(old)
        assert edited is not None and not edited.pinned and edited.turn_count == 2
        channel = await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("and the roses", sender="424242", chat="77"))
        await settle(services)
        assert channel.texts("reply") == ["re: and the roses"]
        assert [t["content"] for t in turns_of(services, new, "user")] == [
            "garden",
            "and the roses",
        ]
    finally:
        await shutdown_services(services)


def turns_of(services: Any, conv_id: str, role: str) -> list[dict[str, Any]]:
    lines = services.store.read_lines(conv_id)
    return [x for x in lines if x.get("type") == "turn" and x.get("role") == role]


async def test_a_deleted_transcript_takes_its_conversation_out_of_the_index(
    tmp_path: Path,
) -> None:
    """Regression: the transcripts are the truth, but a conversation whose transcript the
    owner deleted stayed in the index for good: still listed, still found by search
    (what the owner meant to forget), and `my-agent status` INCONSISTENT at every start."""
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    services = await open_services(config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        for text in ("my bank PIN is 4711, forget it later", "/new", "the roses need water"):
            await services.router.deliver(inbound(text, sender="424242", chat="77"))
        await settle(services)
        forget, keep = sorted(r.id for r in await services.conversations.list())
    finally:
        await shutdown_services(services)
    (config.conversations_dir / f"{forget}.jsonl").unlink()

    services = await open_services(config, brain=ScriptedBrain())
    try:
        assert [r.id for r in await services.conversations.list()] == [keep]
        assert await services.conversations.get(forget) is None
        assert (await services.search.search("bank PIN 4711")).results == []
        assert [r.conversation_id for r in (await services.search.search("roses")).results] == [
            keep
        ]
        rows = await services.index_db.fetchall(
            "SELECT count(*) FROM turns WHERE conversation_id = ?", (forget,)
        )
        assert rows[0][0] == 0
    finally:
        await shutdown_services(services)
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["index"]["ok"], report["index"]


async def test_a_deleted_party_record_takes_the_party_out_of_the_index(tmp_path: Path) -> None:
    """Regression: a third party whose record file (external/p*.jsonl) was deleted stayed
    in the index for good, with their messages and a pending escalation, where a deleted
    conversation transcript is taken out at the next start."""
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    services = await open_services(config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("my account number is 99", sender="555", chat="555"))
        await services.router.deliver(inbound("hello from the florist", sender="666", chat="666"))
        await settle(services)
        forget, keep = (await services.external.find("555")), (await services.external.find("666"))
        assert forget is not None and keep is not None
    finally:
        await shutdown_services(services)
    (config.data_dir / "external" / f"{forget.id}.jsonl").unlink()

    services = await open_services(config, brain=ScriptedBrain())
    try:
        assert [p.id for p in await services.external.list_parties()] == [keep.id]
        assert await services.external.get(forget.id) is None
        assert await services.external.messages(forget.id) == []
        assert {e["partyId"] for e in await services.external.pending_escalations()} == {keep.id}
        assert services.recovery is not None and services.recovery.removed_parties == 1
        # they write again: a new record, as for anyone writing for the first time
        await services.router.deliver(inbound("me again", sender="555", chat="555"))
        await settle(services)
        again = await services.external.find("555")
        assert again is not None
        said = [m["content"] for m in await services.external.messages(again.id)]
        assert "me again" in said and "my account number is 99" not in said
    finally:
        await shutdown_services(services)
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["index"]["ok"], report["index"]
