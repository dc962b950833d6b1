"""``my-agent status`` logic (bot.healthcheck) over a real data directory."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot import healthcheck
from bot.config import AppConfig
from bot.conversations import ConversationManager
from bot.db import Database
from bot.exitcodes import EX_DATADIR
from bot.hooks import EventBus
from bot.index import ConversationIndex
from bot.notify import STATUS_FILE_NAME, Notifier
from bot.schema import INDEX_MIGRATIONS, STATE_MIGRATIONS
from bot.transcript import TranscriptStore
from bot.transcript_lines import encode, turn_line
from tests.support import fill_disk, garble_page, mount_tmpfs


def _config(tmp_path: Path, web_port: int = 0, web: bool = False) -> AppConfig:
    return AppConfig.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "channels": {"web": {"enabled": web, "port": web_port}},
        }
    )


async def _populate(config: AppConfig) -> list[str]:
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    store = TranscriptStore(config.conversations_dir, fsync=False)
    mgr = ConversationManager(config, store, ConversationIndex(db), EventBus())
    ids = []
    for channel, n in (("telegram", 3), ("web", 2)):
        rec = await mgr.create(channel, identity_key=f"{channel}:1", pinned=True)
        for i in range(n):
            await mgr.append_turn(rec.id, "user", f"question {i} about tomatoes")
            await mgr.append_turn(rec.id, "assistant", f"answer {i}")
        ids.append(rec.id)
    await mgr.mark_needs_abbreviation(ids[0])  # a failed pass: flagged, failure recorded
    await mgr.mark_abbreviation_failed([ids[0]], True)
    await db.close()
    state = await Database.open(config.state_path, STATE_MIGRATIONS)
    for status in ("pending", "pending", "sent", "failed"):
        await state.execute(
            "INSERT INTO outbox (channel, payload, status, created) VALUES (?, ?, ?, ?)",
            ("telegram", "{}", status, "2026-01-01T00:00:00.000Z"),
        )
    await state.close()
    return ids


@pytest.fixture
async def populated(tmp_path: Path) -> AsyncIterator[tuple[AppConfig, list[str]]]:
    config = _config(tmp_path)
    ids = await _populate(config)
    yield config, ids


async def test_consistent_store_without_daemon(populated: tuple[AppConfig, list[str]]) -> None:
    config, _ = populated
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["counts"]["conversations"] == 2
    assert report["counts"]["by_channel"] == {"telegram": 1, "web": 1}
    assert report["counts"]["turns"] == 10
    # Both have turns and no notes yet; one is flagged by a failed pass. (Regression: the
    # flag alone was counted, so a stop before the idle timeout showed 0 pending.)
    assert report["counts"]["pending_abbreviations"] == 2
    assert report["counts"]["abbreviations_to_retry"] == 1
    assert report["outbox"]["pending"] == 2 and report["outbox"]["failed"] == 1
    idx = report["index"]
    assert idx["ok"], idx
    assert idx["transcripts"] == 2 and idx["transcript_turns"] == 10 == idx["fts_documents"]
    assert idx["fts_integrity"] == "ok" and idx["unindexed_bytes"] == 0
    assert report["daemon"]["state"] == "unknown"
    assert any("not running" in p for p in report["problems"])
    assert any("failed for good" in p for p in report["problems"])
    assert report["exit_code"] == 1
    text = healthcheck.format_text(report)
    assert "index:                 consistent" in text
    oldest = report["outbox"]["oldest_pending"]
    assert oldest
    assert f"outbox:                2 pending (the oldest queued {oldest}), 1 failed" in text
    assert "abbreviations pending: 2 (1 failed, to retry; 1 not yet written)" in text


async def test_messages_held_in_the_spool_file_are_named(
    populated: tuple[AppConfig, list[str]],
) -> None:
    # (session 39) what a full disk left in spool.jsonl waits for the next start
    from bot.spool_file import SPOOL_NAME, encode
    from tests.support import inbound

    config, _ = populated
    (config.data_dir / SPOOL_NAME).write_bytes(
        encode(inbound("one", message_id="s-1")) + encode(inbound("two", message_id="s-2"))
    )
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert (
        f"2 message(s) the disk refused are held in {config.data_dir / SPOOL_NAME}: stored "
        "when the daemon runs and the disk has room"
    ) in report["problems"]


async def test_live_status_file_means_healthy(populated: tuple[AppConfig, list[str]]) -> None:
    config, _ = populated
    n = Notifier(env={}, status_path=config.data_dir / STATUS_FILE_NAME)
    n.ready("channels up: loopback")
    daemon = healthcheck.daemon_from_status_file(config.data_dir)
    assert daemon["state"] == "ready" and daemon["pid"] == os.getpid()
    assert daemon["status"] == "channels up: loopback"
    # No beat for much longer than the interval: the loop is stuck.
    later = time.time() + 10 * n.file_heartbeat
    assert healthcheck.daemon_from_status_file(config.data_dir, now=later)["state"] == "stale"
    n.stopped()
    assert healthcheck.daemon_from_status_file(config.data_dir)["state"] == "stopped"


async def test_a_draining_daemon_is_reported_stopping_not_stopped(
    populated: tuple[AppConfig, list[str]],
) -> None:
    # Regression: during a SIGTERM drain the status said "daemon is not running
    # (stopping)" while the daemon ran on, finishing its replies.
    config, _ = populated
    n = Notifier(env={}, status_path=config.data_dir / STATUS_FILE_NAME)
    n.ready("channels up: loopback")
    n.stopping()
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["daemon"]["state"] == "stopping"
    assert not any("not running" in p for p in report["problems"])
    assert "daemon is stopping: draining replies" in report["problems"]
    n.stopped()


def test_dead_pid_is_stopped(tmp_path: Path) -> None:
    proc_pid = os.fork()
    if proc_pid == 0:
        os._exit(0)
    os.waitpid(proc_pid, 0)
    (tmp_path / STATUS_FILE_NAME).write_text(
        json.dumps({"pid": proc_pid, "state": "ready", "updated_at": time.time()})
    )
    assert healthcheck.daemon_from_status_file(tmp_path)["state"] == "stopped"


async def test_quick_status_compares_transcripts_by_size_without_reading_them(
    populated: tuple[AppConfig, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A year of transcripts (10,000, 330,000 turn lines) took 4 of the 5 s of a quick
    # status to read and count; --quick compares each one's size with the index.
    config, ids = populated
    path = config.conversations_dir / f"{ids[1]}.jsonl"
    with path.open("ab") as fh:  # written, not indexed yet
        fh.write(encode([turn_line("user", "not yet indexed", 3)]))
    (config.conversations_dir / "conv-01JZZZZZZZZZZZZZZZZZZZZZZZ.jsonl").write_bytes(
        encode([{"type": "meta", "id": "conv-01JZZZZZZZZZZZZZZZZZZZZZZZ", "channel": "web"}])
    )
    reads: list[str] = []
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        if self.name.startswith("conv-"):
            reads.append(self.name)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert reads == []
    idx = report["index"]
    assert idx["missing_from_index"] == ["conv-01JZZZZZZZZZZZZZZZZZZZZZZZ"]
    assert idx["unindexed_bytes"] > 0 and idx["transcript_turns"] is None
    assert "uncounted (--quick)" in healthcheck.format_text(report)
    full = await asyncio.to_thread(healthcheck.collect, config)  # still counts them
    assert len(reads) == 3 and full["index"]["transcript_turns"] >= 4


async def test_inconsistencies_are_reported(populated: tuple[AppConfig, list[str]]) -> None:
    config, ids = populated
    # A turn line that reached the transcript and was marked indexed but is not in the
    # index: a turn-count mismatch.
    path = config.conversations_dir / f"{ids[1]}.jsonl"
    with path.open("ab") as fh:
        fh.write(encode([turn_line("user", "lost line", 3)]))
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    size = path.stat().st_size
    await db.execute("UPDATE conversations SET indexed_bytes = ? WHERE id = ?", (size, ids[1]))
    # A turns row removed behind FTS's back: FTS and its content table disagree.
    await db.execute("DELETE FROM turns WHERE id = (SELECT min(id) FROM turns)")
    await db.close()
    # A transcript that the index has never seen.
    (config.conversations_dir / "conv-01JZZZZZZZZZZZZZZZZZZZZZZZ.jsonl").write_bytes(
        encode([{"type": "meta", "id": "conv-01JZZZZZZZZZZZZZZZZZZZZZZZ", "channel": "web"}])
    )
    report = await asyncio.to_thread(healthcheck.collect, config)
    idx = report["index"]
    assert not idx["ok"]
    assert idx["missing_from_index"] == ["conv-01JZZZZZZZZZZZZZZZZZZZZZZZ"]
    assert {m["id"] for m in idx["mismatched"]} == {ids[0], ids[1]}
    assert idx["fts_documents"] == idx["index_turns"] + 1
    assert idx["fts_integrity"] != "ok"
    problems = "\n".join(report["problems"])
    assert "not in the index" in problems and "different turn count" in problems
    assert "FTS holds" in problems and "integrity-check" in problems
    assert "INCONSISTENT" in healthcheck.format_text(report)


async def test_damaged_notes_index_is_reported(populated: tuple[AppConfig, list[str]]) -> None:
    """The notes' keyword index (``notes_fts``, migration 10) is checked like the turns':
    a note removed behind its back is an integrity problem that names the table."""
    config, ids = populated
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    await db.execute(
        "INSERT INTO notes (conversation_id, text) VALUES (?, 'budget review notes')", (ids[0],)
    )
    await db.execute("DROP TRIGGER notes_fts_delete")
    await db.execute("DELETE FROM notes")
    await db.close()
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["index"]["fts_integrity"].startswith("notes_fts: ")
    assert "FTS integrity-check: notes_fts" in "\n".join(report["problems"])


async def test_transcript_lines_that_cannot_be_read_are_named(
    populated: tuple[AppConfig, list[str]],
) -> None:
    # Regression (session 27): a line of a transcript that is not JSON is skipped by the
    # index and by status's count alike, so status called a store that had lost a message
    # "consistent"; only the log of the start that read it said which line.
    config, ids = populated
    path = config.conversations_dir / f"{ids[0]}.jsonl"
    raw = path.read_bytes().splitlines(keepends=True)
    raw[2] = raw[2].replace(b'"content":"', b'"content":', 1)
    path.write_bytes(b"".join(raw))
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["index"]["damaged_lines"] == [f"{path.name}:3"]
    assert not report["index"]["ok"] and report["exit_code"] == 1
    problem = next(p for p in report["problems"] if "cannot be read" in p)
    assert problem.endswith(f": {path.name}:3"), problem
    quick = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert quick["index"]["damaged_lines"] == []  # --quick reads no transcript


async def test_a_damaged_page_of_the_index_is_reported(
    populated: tuple[AppConfig, list[str]],
) -> None:
    # Regression (session 27): garbage over a page that counting and FTS5's check do not
    # read (here the conversations' id index) was reported "consistent"; the first
    # search or write that reached it failed.
    config, _ = populated
    garble_page(config.index_path, "sqlite_autoindex_conversations_1")
    report = await asyncio.to_thread(healthcheck.collect, config, pages=True)
    assert report["index"]["pages"] != "ok" and report["exit_code"] == 1
    assert any(
        "conversations.db was found damaged (" in p and "my-agent reindex" in p
        for p in report["problems"]
    ), report["problems"]
    quick = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert quick["index"]["pages"] == "skipped"


async def test_unindexed_tail_is_lag_not_error(populated: tuple[AppConfig, list[str]]) -> None:
    config, ids = populated
    path = config.conversations_dir / f"{ids[0]}.jsonl"
    with path.open("ab") as fh:
        fh.write(encode([turn_line("user", "not indexed yet", 4)]))
        fh.write(b'{"type":"turn","role":"us')  # a torn last line is ignored
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["index"]["ok"]
    assert report["index"]["unindexed_bytes"] > 0
    assert report["index"]["transcript_turns"] == 11


def test_missing_data_dir(tmp_path: Path) -> None:
    report = healthcheck.collect(_config(tmp_path))
    assert report["exit_code"] == EX_DATADIR


async def test_missing_index_is_a_problem(populated: tuple[AppConfig, list[str]]) -> None:
    config, _ = populated
    config.index_path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(config.index_path) + suffix).unlink(missing_ok=True)
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert any("conversations.db is missing" in p for p in report["problems"])


async def test_unreadable_index_is_exit_74(populated: tuple[AppConfig, list[str]]) -> None:
    config, _ = populated
    for suffix in ("-wal", "-shm"):
        Path(str(config.index_path) + suffix).unlink(missing_ok=True)
    config.index_path.write_bytes(b"this is not a database" * 100)
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["exit_code"] == 74


async def _readyz_server(status: int) -> tuple[web.AppRunner, int]:
    async def readyz(request: web.Request) -> web.Response:
        return web.json_response({"ready": status == 200}, status=status)

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


@pytest.mark.parametrize("status", [200, 503])
async def test_readyz(tmp_path: Path, status: int) -> None:
    runner, port = await _readyz_server(status)
    try:
        config = _config(tmp_path, web_port=port, web=True)
        await _populate(config)
        report = await asyncio.to_thread(healthcheck.collect, config)
    finally:
        await runner.cleanup()
    rz = report["daemon"]["readyz"]
    assert rz["http_status"] == status and rz["ok"] is (status == 200)
    assert rz["body"] == {"ready": status == 200}
    if status == 200:
        assert report["daemon"]["state"] == "ready"
        assert not any("daemon" in p for p in report["problems"])
    else:
        assert any("not running" in p for p in report["problems"])


async def test_a_stopped_daemon_is_not_revived_by_another_ones_dashboard(
    tmp_path: Path,
) -> None:
    # Regression: a status file saying "stopped" (or a dead pid) plus a 200 from /readyz
    # on the configured port was reported "ready", no problem, exit 0. That answer comes
    # from another daemon (the service, while the owner checks an old local data dir).
    runner, port = await _readyz_server(200)
    try:
        config = _config(tmp_path, web_port=port, web=True)
        await _populate(config)
        stopped = {"pid": os.getpid(), "state": "stopped", "updated_at": time.time()}
        (config.data_dir / STATUS_FILE_NAME).write_text(json.dumps(stopped))
        report = await asyncio.to_thread(healthcheck.collect, config)
    finally:
        await runner.cleanup()
    assert report["daemon"]["state"] == "stopped"
    assert report["exit_code"] == 1
    assert any("not running (stopped)" in p and "another" in p for p in report["problems"])


async def test_a_not_ready_daemon_is_told_by_what_its_readyz_says_failed(
    tmp_path: Path,
) -> None:
    # Regression: a daemon whose Telegram bot token was refused (the channel retrying in
    # the background) was reported "/readyz is not ok: 503", and its row "no ready answer
    # from ...: HTTP 503" though it had answered, naming the channel in its body.
    body = {
        "ready": False,
        "checks": {
            "web": True,
            "core": True,
            "channels": {"web": True, "telegram": False},
            "vectorSearch": False,
            "accepting": True,
            "storage": True,
        },
    }

    async def readyz(request: web.Request) -> web.Response:
        return web.json_response(body, status=503)

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        config = _config(tmp_path, web_port=runner.addresses[0][1], web=True)
        await _populate(config)
        # what the Telegram channel keeps while its token is refused: the line names it
        # (it said "the daemon's log says why" and nothing more)
        await _keep_token_refusal(config)
        live = {
            "pid": os.getpid(),
            "state": "ready",
            "status": "ready",
            "updated_at": time.time(),
            "heartbeat_interval": 10.0,
        }
        (config.data_dir / STATUS_FILE_NAME).write_text(json.dumps(live))
        report = await asyncio.to_thread(healthcheck.collect, config)
    finally:
        await runner.cleanup()
    assert report["exit_code"] == 1
    assert "/readyz is not ok: HTTP 503, not connected: telegram" in " ".join(report["problems"])
    text = healthcheck.format_text(report)
    assert "no ready answer" not in text
    assert "not ready (http://127.0.0.1:" in text and "not connected: telegram" in text
    assert "telegram: Telegram refused the bot token" in " ".join(report["problems"])
    assert "telegram: Telegram refused the bot token" in text
    assert "vectorSearch" not in text  # informative only: keyword search still answers


def test_readyz_refused(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = _config(tmp_path, web_port=port, web=True)
    rz = healthcheck.check_readyz(config, timeout=1.0)
    assert rz is not None and rz["ok"] is False and "error" in rz
    # Regression: printed "readyz: FAIL (url)" (and the JSON's error was urllib's
    # "<urlopen error [Errno 111] Connection refused>"), read as a second failure of a
    # daemon that was simply stopped.
    assert rz["error"].endswith("Connection refused") and "urlopen" not in rz["error"]
    report = {
        "data_dir": str(tmp_path),
        "daemon": {"state": "stopped", "pid": 7, "status": "stopped", "readyz": rz},
        "problems": ["daemon is not running (stopped)"],
    }
    text = healthcheck.format_text(report)
    assert "FAIL" not in text and "stopped pid 7\n" in text
    assert f"no ready answer from {rz['url']}: " in text and "Connection refused" in text


def test_the_status_values_start_in_one_column(
    populated: tuple[AppConfig, list[str]],
) -> None:
    """Regression: the values started in three columns ("disk:         61284.7 MiB",
    "conversations: 2", "abbreviations pending: 1", "replies pending:  0")."""
    config, _ = populated
    report = healthcheck.collect(config)
    text = healthcheck.format_text(report)
    columns = {len(line) - len(line.split(":", 1)[1].lstrip()) for line in text.splitlines()}
    assert len(columns) == 1, text
    # and the counts agree with their nouns ("1 parties, 1 escalations pending")
    for parties, escalations, said in (
        (1, 1, "1 party, 1 escalation pending"),
        (2, 0, "2 parties, 0 escalations pending"),
    ):
        report["counts"].update(external_parties=parties, pending_escalations=escalations)
        assert f"external:              {said}\n" in healthcheck.format_text(report)


async def test_main_json(
    populated: tuple[AppConfig, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = populated
    parser = argparse.ArgumentParser()
    healthcheck.add_arguments(parser)
    code = await asyncio.to_thread(
        healthcheck.main, parser.parse_args(["--json", "--quick"]), config
    )
    data = json.loads(capsys.readouterr().out)
    assert code == data["exit_code"] == 1
    assert data["index"]["fts_integrity"] == "skipped"


async def test_live_status_line(services: Any) -> None:
    rec = await services.conversations.create("telegram", identity_key="telegram:1", pinned=True)
    await services.conversations.append_turn(rec.id, "user", "hello")
    await services.conversations.mark_needs_abbreviation(rec.id)
    line = await healthcheck.live_status(services)
    assert line.startswith("ready: brain offline, replies recall-only; channels none")
    assert "1 conversations" in line and "outbox 0 pending" in line
    assert "1 abbreviations pending" in line and "held in memory" not in line
    assert "email:" not in line


async def test_live_status_counts_the_notes_owed_as_status_does(services: Any) -> None:
    # Regression: the systemd status line counted only the conversations flagged for a
    # retry, while /status and `my-agent status` count every one owed notes: one left
    # before its idle timeout (turns since its last notes) was "0 pending" there.
    from bot.command_status import notes_line

    rec = await services.conversations.create("web")
    await services.conversations.append_turn(rec.id, "user", "the boiler makes a noise")
    line = await healthcheck.live_status(services)
    assert "1 abbreviations pending" in line, line
    assert (await notes_line(services)).startswith("Notes: 1 conversation waiting")


async def test_live_status_names_what_a_channel_reports(services: Any) -> None:
    # The e-mail channel's mails the server would not hand over (retried) show in the
    # status line, which `my-agent status` and `systemctl status` print.
    class Stuck:
        name = "email"

        def problems(self) -> list[str]:
            return ["1 mail in INBOX the server would not hand over (uid 103), retried"]

        async def stop(self) -> None:
            pass

    services.channels["email"] = Stuck()
    assert services.health()["channelProblems"] == {"email": Stuck().problems()}
    line = await healthcheck.live_status(services)
    assert line.endswith(
        "; email: 1 mail in INBOX the server would not hand over (uid 103), retried"
    )


async def test_a_full_disk_is_named_instead_of_a_stuck_daemon(tmp_path: Path) -> None:
    # Regression: on a full data disk the daemon cannot write its status file, so
    # `my-agent status` blamed a stuck event loop ("heartbeat is stale") and said nothing
    # of the disk, while every incoming message was being refused for lack of space.
    config = _config(tmp_path)
    mount_tmpfs(config.data_dir, "4m")
    try:
        await _populate(config)
        report = await asyncio.to_thread(healthcheck.collect, config)
        assert report["disk"]["free_bytes"] > 1 << 20 and not report["disk"]["full"]
        assert not any("full" in p for p in report["problems"])
        Notifier(env={}, status_path=config.data_dir / STATUS_FILE_NAME).ready("ready")
        status = json.loads((config.data_dir / STATUS_FILE_NAME).read_text())
        status["updated_at"] = time.time() - 120  # its last beat before the disk filled
        (config.data_dir / STATUS_FILE_NAME).write_text(json.dumps(status))
        fill_disk(config.data_dir)
        report = await asyncio.to_thread(healthcheck.collect, config)
        assert report["disk"]["full"] and report["daemon"]["state"] == "stale"
        problems = report["problems"]
        assert any(p.startswith("the data directory's file system is full") for p in problems)
        assert not any("event loop stuck" in p for p in problems), problems
        assert any("disk is full" in p and "heartbeat" in p for p in problems), problems
        assert report["exit_code"] == 1  # problems listed (it was 74 before session 15)
        assert "disk:                  FULL" in healthcheck.format_text(report)
    finally:
        subprocess.run(["umount", "-l", str(config.data_dir)], capture_output=True)


def test_a_first_start_on_a_read_only_file_system_says_where_to_run(tmp_path: Path) -> None:
    # Regression: `my-agent run` in a read-only directory said "copy the directory
    # somewhere writable" of a data directory that did not exist yet.
    from bot.service_data_dir import DataDirError, check_data_dir

    mount = tmp_path / "ro"
    mount_tmpfs(mount, "1m")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        config = _config(tmp_path)
        config.data_dir = mount / ".my_agent"
        with pytest.raises(DataDirError) as info:
            check_data_dir(config)
        assert "cannot be created: the file system is read-only" in str(info.value)
        assert "copy the directory" not in str(info.value)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_leaves_no_empty_files_in_the_data_directory(tmp_path: Path) -> None:
    # Regression: on a full disk a file is made and its bytes refused, so the start's
    # write probe (".write-test") and the status file's temporary copy
    # ("daemon.json.tmp") stayed behind as empty files in the owner's data directory.
    from bot.service_data_dir import DataDirError, check_data_dir

    config = _config(tmp_path)
    mount_tmpfs(config.data_dir, "4m")
    try:
        check_data_dir(config)  # its directories made while there is room
        before = sorted(p.name for p in config.data_dir.iterdir())
        filler = fill_disk(config.data_dir)
        with pytest.raises(DataDirError, match="is full"):  # (DataDirFull, session 42)
            check_data_dir(config)
        Notifier(env={}, status_path=config.data_dir / STATUS_FILE_NAME).ready("ready")
        after = sorted(p.name for p in config.data_dir.iterdir() if p != filler)
        assert after == before, after
    finally:
        subprocess.run(["umount", "-l", str(config.data_dir)], capture_output=True)


async def test_status_on_a_full_disk_with_the_daemon_stopped_reports_what_it_can(
    tmp_path: Path,
) -> None:
    # Regression: with the daemon stopped its databases are closed (no -wal, no -shm), and
    # a read-only open must create the -shm file: on a full disk `my-agent status` said
    # "cannot read conversations.db: unable to open database file" and exited 74, the
    # counts, the outbox and the index check all lost, when the disk was the problem.
    config = _config(tmp_path)
    mount_tmpfs(config.data_dir, "4m")
    try:
        await _populate(config)
        assert not list(config.data_dir.glob("*.db-shm"))
        config_file = tmp_path / "config.yaml"
        config_file.write_text(
            f"data_dir: {config.data_dir}\nchannels: {{web: {{enabled: false}}}}\n"
        )
        fill_disk(config.data_dir)
        proc = subprocess.run(
            [sys.executable, "-m", "bot.cli", "status", "--config", str(config_file), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr  # problems listed, not 74
        report = json.loads(proc.stdout)
        assert report["disk"]["full"]
        assert report["counts"]["conversations"] == 2 and report["counts"]["turns"] == 10
        assert report["outbox"]["pending"] == 2 and report["outbox"]["failed"] == 1
        assert report["index"]["ok"], report["index"]
        assert not any("cannot read" in p for p in report["problems"]), report["problems"]
    finally:
        subprocess.run(["umount", "-l", str(config.data_dir)], capture_output=True)


def test_a_killed_or_replaced_pid_is_stopped(tmp_path: Path) -> None:
    # Regression: after `kill -9` the daemon stays a zombie until its parent reaps it,
    # and later its pid may belong to another process: `os.kill(pid, 0)` succeeds for
    # both, so status reported a dead daemon as "ready" with no problem at all.
    zombie = os.fork()
    if zombie == 0:
        os._exit(0)
    try:
        for _ in range(200):  # until the child has exited (not reaped: a zombie)
            if Path(f"/proc/{zombie}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.01)
        status = {"pid": zombie, "state": "ready", "updated_at": time.time()}
        (tmp_path / STATUS_FILE_NAME).write_text(json.dumps(status | {"started_at": time.time()}))
        assert healthcheck.daemon_from_status_file(tmp_path)["state"] == "stopped"
    finally:
        os.waitpid(zombie, 0)
    # This process is alive, but it started long after that daemon wrote its file.
    status = {"pid": os.getpid(), "state": "ready", "updated_at": time.time()}
    (tmp_path / STATUS_FILE_NAME).write_text(json.dumps(status | {"started_at": 1_000_000.0}))
    assert healthcheck.daemon_from_status_file(tmp_path)["state"] == "stopped"
    (tmp_path / STATUS_FILE_NAME).write_text(json.dumps(status | {"started_at": time.time()}))
    assert healthcheck.daemon_from_status_file(tmp_path)["state"] == "ready"


def test_a_running_daemon_stays_running_when_the_clock_is_set_forward(tmp_path: Path) -> None:
    """The clock set forward a day after the daemon started (NTP fixing a slow clock):
    the kernel's start time of its pid moves a day later too, which read as another
    process that got the pid, and status called the running daemon stopped."""
    n = Notifier(env={}, status_path=tmp_path / STATUS_FILE_NAME)
    n.started_at -= 86400  # as written before the clock was set forward by a day
    n.ready("channels up: loopback")
    assert healthcheck.daemon_from_status_file(tmp_path)["state"] == "ready"
    # another process with this pid (it started at another tick) is not the daemon
    data = json.loads((tmp_path / STATUS_FILE_NAME).read_text())
    data["start_ticks"] += 1
    (tmp_path / STATUS_FILE_NAME).write_text(json.dumps(data))
    assert healthcheck.daemon_from_status_file(tmp_path)["state"] == "stopped"


@pytest.mark.parametrize(
    "body",
    [
        {"pid": "abc", "state": "ready"},
        {"pid": 0, "state": "ready", "updated_at": "yesterday"},
        {"pid": 99999999999, "state": "ready"},
        {"pid": -1, "state": "ready", "updated_at": 1e300},
        {"pid": True, "state": ["ready"], "heartbeat_interval": "10", "started_at": None},
    ],
)
def test_a_mangled_status_file_is_no_traceback_and_no_live_daemon(
    tmp_path: Path, body: dict[str, Any]
) -> None:
    # Regression: a status file edited by hand (or from another version) ended `status`
    # in a ValueError or OverflowError traceback, and pid -1 (os.kill(-1, 0) succeeds)
    # was reported as a ready daemon.
    (tmp_path / STATUS_FILE_NAME).write_text(json.dumps(body))
    daemon = healthcheck.daemon_from_status_file(tmp_path)
    assert daemon["state"] == "stopped" and daemon["pid"] == 0


async def test_messages_waiting_for_a_reply_are_counted(
    populated: tuple[AppConfig, list[str]],
) -> None:
    # Regression: a stop while replies were still queued (SIGTERM drains for a bounded
    # time; the rest are answered after the restart), or an outage of the model, left
    # owner messages unanswered, and `my-agent status` showed no trace of them.
    config, ids = populated
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["counts"]["replies_pending"] == 0
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    mgr = ConversationManager(
        config,
        TranscriptStore(config.conversations_dir, fsync=False),
        ConversationIndex(db),
        EventBus(),
    )
    await mgr.append_turn(ids[1], "user", "still waiting for an answer")
    await db.close()
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["counts"]["replies_pending"] == 1
    assert "replies pending:       1" in healthcheck.format_text(report)


def _documented_json_keys() -> dict[str, set[str]]:
    """The keys docs/operations.md lists under "status --json", per section."""
    import re

    from tests.support import REPO

    text = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    table = text.split("### `status --json`", 1)[1].split("\n## ", 1)[0]
    keys: dict[str, set[str]] = {}
    for line in table.splitlines():
        match = re.match(r"\| `(\w+)` \| (.*) \|$", line)
        if match:
            keys[match[1]] = set(re.findall(r"`(\w+)`", match[2]))
    return keys


async def test_status_json_keys_are_the_documented_ones(tmp_path: Path) -> None:
    # The fields of `status --json` are an interface (monitoring scripts read them):
    # every one the code writes is documented, and none documented is gone.
    config = _config(tmp_path)
    await _populate(config)
    report = await asyncio.to_thread(healthcheck.collect, config, deep=True)
    documented = _documented_json_keys()
    assert set(report) == set(documented)
    for section in ("disk", "counts", "index", "outbox"):
        assert set(report[section]) == documented[section], section
    assert set(report["daemon"]) <= documented["daemon"]


async def _keep_token_refusal(config: AppConfig) -> None:
    """What the Telegram channel keeps with its cursors while its token is refused."""
    state = await Database.open(config.state_path, STATE_MIGRATIONS)
    await state.execute(
        "INSERT INTO channel_cursors (channel, key, value, updated) VALUES (?, ?, ?, ?)",
        ("telegram", "alert:token", json.dumps({"problem": "Telegram refused the bot token"}),
         "2026-01-01T00:00:00.000Z"),
    )  # fmt: skip
    await state.close()


async def test_a_token_refusal_kept_by_telegram_is_not_reported_once_telegram_is_disabled(
    tmp_path: Path,
) -> None:
    # Regression: the refusal the Telegram channel kept with its cursors (for a stopped
    # daemon's report) stayed in every `my-agent status` after Telegram was turned off.
    config = _config(tmp_path)
    await _populate(config)
    await _keep_token_refusal(config)
    refused = "telegram: Telegram refused the bot token"
    off = await asyncio.to_thread(healthcheck.collect, config)
    assert off["daemon"]["state"] in ("stopped", "unknown")
    assert refused not in off["problems"]
    config.channels.telegram.enabled = True  # still on: still said
    config.channels.telegram.token = "123456:kept"
    on = await asyncio.to_thread(healthcheck.collect, config)
    assert refused in on["problems"]


async def test_status_counts_the_vectors_and_their_model(
    populated: tuple[AppConfig, list[str]],
) -> None:
    # A model change drops every vector and the daemon embeds them again, searching by
    # keyword meanwhile: status said nothing of it (nor of a store with no vectors).
    config, _ = populated
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    counts = report["counts"]
    assert counts["turn_vectors"] == counts["note_vectors"] == counts["notes"] == 0
    assert counts["embedding_model"] is None
    assert "vectors:               none (keyword-only search" in healthcheck.format_text(report)
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    await db.execute("INSERT INTO index_meta (key, value) VALUES ('embedding_model', 'mini@384')")
    await db.execute("UPDATE conversations SET abbreviation = 'notes'")
    await db.close()
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert report["counts"]["notes"] == 2
    text = healthcheck.format_text(report)
    assert "vectors:               0 of 10 messages, 0 of 2 notes (model mini@384)" in text


async def test_status_counts_vectors_against_the_turns_recall_reads(tmp_path: Path) -> None:
    # Regression: the offline brain's replies are kept out of recall and never embedded,
    # but the vectors were counted against every turn: an offline store read "27 of 54
    # turns" for good, as if half its vectors were missing.
    config = _config(tmp_path)
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    store = TranscriptStore(config.conversations_dir, fsync=False)
    mgr = ConversationManager(config, store, ConversationIndex(db), EventBus())
    rec = await mgr.create("web")
    for i in range(3):
        await mgr.append_turn(rec.id, "user", f"question {i} about tomatoes")
        await mgr.append_turn(rec.id, "assistant", "[offline mode] nothing", model="offline")
    await db.execute("INSERT INTO index_meta (key, value) VALUES ('embedding_model', 'mini@384')")
    await db.close()
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert report["counts"]["turns"] == 6 and report["counts"]["recall_turns"] == 3
    assert "vectors:               0 of 3 messages, " in healthcheck.format_text(report)


async def test_live_status_says_how_search_answers(services: Any) -> None:
    from types import SimpleNamespace

    from bot.command_status import search_line

    assert "search keyword-only" in await healthcheck.live_status(services)
    assert search_line(services) == "Search: keyword only"
    services.vector_search_available = lambda: True
    services.vectors = SimpleNamespace(rebuilding=True, stale=False, missing=True)
    line = await healthcheck.live_status(services)
    assert line.endswith("search hybrid, embedding the vectors still missing"), line
    assert "embedding the vectors still missing" in search_line(services)
    services.vectors = SimpleNamespace(rebuilding=False, stale=False, missing=False)
    assert (await healthcheck.live_status(services)).endswith("search hybrid")


def test_a_daemon_that_died_without_stopping_is_not_shown_with_its_live_status(
    tmp_path: Path,
) -> None:
    """Regression: after a `kill -9` status printed "daemon: stopped pid 7 — ready:
    channels web, loopback; 2 conversations; ... search hybrid", the dead daemon's last
    status line read as the state of now, and the problem said only "(stopped)", as for
    a clean stop."""
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    config = _config(tmp_path)
    config.data_dir.mkdir(parents=True)
    said = "ready: channels web; 2 conversations; search hybrid"
    status = {"pid": dead, "state": "ready", "status": said, "updated_at": time.time()}
    (config.data_dir / STATUS_FILE_NAME).write_text(json.dumps(status))
    daemon = healthcheck.daemon_from_status_file(config.data_dir)
    assert daemon["state"] == "stopped" and daemon["unclean"] is True
    report = healthcheck.collect(config, readyz_timeout=0.5)
    ended = "daemon is not running (it ended without stopping: killed or crashed)"
    assert ended in report["problems"]
    text = healthcheck.format_text(report)
    line = next(x for x in text.splitlines() if x.startswith("daemon:"))
    assert line.endswith(
        f"stopped pid {dead} — it ended without stopping (killed or crashed); "
        f"its last status: {said}"
    )
    # a clean stop is said as before
    (config.data_dir / STATUS_FILE_NAME).write_text(json.dumps(status | {"state": "stopped"}))
    assert "unclean" not in healthcheck.daemon_from_status_file(config.data_dir)


async def test_status_says_the_daemon_answers_with_the_offline_brain(
    services: Any, tmp_path: Path
) -> None:
    """Regression (session 40): the ready line named the offline brain, the first
    refresh of the status line (30 s on) dropped it, and `my-agent status` (text and
    --json) never said again that no model answers."""
    n = Notifier(env={}, status_path=tmp_path / STATUS_FILE_NAME)
    n.brain = services.brain.name
    n.ready("ready: brain offline, replies recall-only; channels none")
    n.status(await healthcheck.live_status(services))  # the refresh keeps it
    daemon = healthcheck.daemon_from_status_file(tmp_path)
    assert daemon["brain"] == "offline"
    assert "brain offline, replies recall-only" in daemon["status"]
    report = {"data_dir": str(tmp_path), "daemon": daemon, "problems": []}
    rows = dict(line.split(":", 1) for line in healthcheck.format_text(report).splitlines())
    assert rows["brain"].strip() == "offline (no API key: replies recall-only, no model answers)"
    n.stopped()


async def test_the_daemons_status_line_says_how_old_its_figures_are(tmp_path: Path) -> None:
    """Regression: `my-agent status` printed the daemon's line, made every 30 s, above
    the rows it reads now: "ready: ...; 1 abbreviations pending" over "abbreviations
    pending: 0", and "embedding the vectors still missing: 383 of 402 conversations"
    over "6431 of 6431 turns, 402 of 402 notes", with nothing to say which was current."""
    n = Notifier(env={}, status_path=tmp_path / STATUS_FILE_NAME)
    line = "ready: channels web; 2 conversations; 1 abbreviations pending; search hybrid"
    n.ready("ready: brain offline")
    n.status(line)  # (the status file is written when the line changes)
    made = n.status_at
    daemon = healthcheck.daemon_from_status_file(tmp_path, now=made + 25)
    assert daemon["state"] == "ready" and daemon["status_age_seconds"] == 25.0
    report = {"data_dir": str(tmp_path), "daemon": daemon, "problems": []}
    said = healthcheck.format_text(report).splitlines()[-1]
    assert said.endswith(f"ready pid {os.getpid()} — {line} (as of 25 s ago)")
    # a fresh line is shown as it is
    daemon = healthcheck.daemon_from_status_file(tmp_path, now=made + 1)
    said = healthcheck.format_text({**report, "daemon": daemon}).splitlines()[-1]
    assert said.endswith(f"— {line}")
    # the same line made again is as fresh as when it was made (a heartbeat writes it)
    n.status(line)
    n.beat()
    assert healthcheck.daemon_from_status_file(tmp_path)["status_age_seconds"] < 5
    n.stopped()


async def _idle_conversations(config: AppConfig, count: int) -> None:
    """``count`` conversations whose last turn is long past the idle timeout, no notes."""
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    store = TranscriptStore(config.conversations_dir, fsync=False)
    mgr = ConversationManager(config, store, ConversationIndex(db), EventBus())
    for n in range(count):
        rec = await mgr.create("web")
        when = f"2026-01-0{n + 1}T10:00:00.000Z"
        await mgr.append_turn(rec.id, "user", f"the tomato seedlings, week {n}", timestamp=when)
    await db.close()


def test_status_after_a_reindex_says_the_notes_are_not_yet_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: the reindex (as every start) flags the idle conversations without
    # notes for a pass (needs_abbreviation), and status counted the flag as failures:
    # "abbreviations pending: 2 (2 to retry)", as if their notes had failed.
    from bot import cli
    from tests.conftest import raw_config

    config = _config(tmp_path)
    asyncio.run(_idle_conversations(config, 2))
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(raw_config(tmp_path)), encoding="utf-8")
    assert cli.main(["--config", str(path), "reindex"]) == 0
    report = healthcheck.collect(config, deep=False)
    assert report["counts"]["pending_abbreviations"] == 2
    assert report["counts"]["abbreviations_to_retry"] == 0
    text = healthcheck.format_text(report)
    assert "abbreviations pending: 2 (2 not yet written)" in text
    assert "retry" not in text


async def test_status_counts_a_failed_pass_to_retry(tmp_path: Path) -> None:
    config = _config(tmp_path)
    await _idle_conversations(config, 3)
    db = await Database.open(config.index_path, INDEX_MIGRATIONS)
    ids = [row[0] for row in await db.fetchall("SELECT id FROM conversations ORDER BY id")]
    await db.execute("UPDATE conversations SET needs_abbreviation = 1")
    await db.execute("UPDATE conversations SET abbreviation_failed = 1 WHERE id = ?", (ids[0],))
    await db.close()
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert report["counts"]["abbreviations_to_retry"] == 1
    text = healthcheck.format_text(report)
    assert "abbreviations pending: 3 (1 failed, to retry; 2 not yet written)" in text


async def test_status_reads_an_index_from_before_the_failures_column(tmp_path: Path) -> None:
    # `my-agent status` reads the index as it is: a daemon of the previous version has
    # not added abbreviation_failed yet (migration 13); the stand-ins still count.
    from bot.db import apply_migrations, connect_sync

    config = _config(tmp_path)
    config.index_path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect_sync(config.index_path)
    apply_migrations(conn, INDEX_MIGRATIONS[:-1])
    conn.execute(
        "INSERT INTO conversations (id, channel, created, updated, turn_count, "
        "needs_abbreviation) VALUES ('conv-a', 'web', '2026-01-01', '2026-01-01', 2, 1)"
    )
    conn.commit()
    conn.close()
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert report["counts"]["pending_abbreviations"] == 1
    assert report["counts"]["abbreviations_to_retry"] == 0


def test_an_index_on_a_read_only_mount_is_read_only_not_inconsistent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: on a read-only mount SQLite cannot make the ``-shm`` file the
    integrity-check needs and says "unable to open database file"; a healthy read-only
    copy of a store was reported INCONSISTENT (exit 1). Root passes permissions, so the
    mount is simulated where it is read (statvfs) and where SQLite fails."""
    from types import SimpleNamespace

    from bot import health_pages
    from tests.sqlite_driver import sqlite3

    class Refusing:
        def execute(self, *_: object) -> None:
            raise sqlite3.OperationalError("unable to open database file")

        def close(self) -> None:
            pass

    driver = SimpleNamespace(module=SimpleNamespace(connect=lambda *_a, **_k: Refusing()))
    monkeypatch.setattr(health_pages, "select_driver", lambda: driver)
    path = tmp_path / "conversations.db"
    assert health_pages.fts_integrity(path) == "turns_fts: unable to open database file"
    real = os.statvfs

    def read_only(where: object) -> object:
        found = real(where)  # type: ignore[arg-type]
        return SimpleNamespace(
            f_flag=found.f_flag | os.ST_RDONLY,
            f_bavail=found.f_bavail,
            f_frsize=found.f_frsize,
            f_blocks=found.f_blocks,
            f_bfree=found.f_bfree,
            f_bsize=found.f_bsize,
        )

    monkeypatch.setattr(os, "statvfs", read_only)
    assert health_pages.fts_integrity(path) == "read-only"


async def test_empty_databases_are_not_built_yet_rather_than_unreadable(
    populated: tuple[AppConfig, list[str]],
) -> None:
    """Regression: a 0-byte conversations.db or state.db (a first start or a reindex
    killed right after making the file) gave "cannot read ...: no such table", exit 74,
    although the next start builds them."""
    config, _ = populated
    config.index_path.write_bytes(b"")
    config.state_path.write_bytes(b"")
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["exit_code"] == 1
    problems = "\n".join(report["problems"])
    assert "conversations.db is empty" in problems and "cannot read" not in problems
    assert "conversations.db is empty" in healthcheck.format_text(report)


@pytest.mark.parametrize("which", ["index", "state"])
async def test_a_database_from_a_newer_version_is_named_as_the_daemon_refuses_it(
    populated: tuple[AppConfig, list[str]], which: str
) -> None:
    """Regression (session 39): with conversations.db or state.db written by a newer
    my-agent the daemon exits 74 at every start, and status listed only "daemon is not
    running", calling such an index consistent."""
    from bot.exitcodes import EX_DATABASE
    from bot.services import DatabaseOpenError, open_services
    from tests.sqlite_driver import sqlite3

    config, _ = populated
    path = config.index_path if which == "index" else config.state_path
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=999")
    conn.close()
    with pytest.raises(DatabaseOpenError) as refused:
        await open_services(config)
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["exit_code"] == EX_DATABASE
    assert str(refused.value) in report["problems"]  # the same words as the refusal
    assert "schema version 999, newer than this my-agent" in str(refused.value)
    text = healthcheck.format_text(report)
    assert str(path) in text
    assert ("consistent" in text) is (which == "state")  # an index it cannot use is not
