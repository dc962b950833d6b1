"""The daemon, the reading commands and ``reindex`` on one data directory at the same
time (bot/store_lock.py): a daemon starting next to a command waits for it instead of
exiting 75; a reindex and a daemon never run on the index together."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
import yaml

from bot import cli, exitcodes, store_lock
from bot.config import AppConfig
from bot.daemon import run_daemon
from bot.notify import read_status_file
from bot.services import DataDirInUse
from bot.transcript import TranscriptStore
from tests.conftest import make_config, raw_config
from tests.support import wait_logged


async def _until_ready(config: AppConfig, daemon: asyncio.Task[int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = read_status_file(config.data_dir / "daemon.json") or {}
        if status.get("state") == "ready":
            return
        if daemon.done():
            daemon.result()  # raises what stopped it
            raise AssertionError("the daemon ended before it was ready")
        await asyncio.sleep(0.05)
    raise AssertionError("the daemon was not ready in time")


async def _stop(daemon: asyncio.Task[int], stop: asyncio.Event) -> None:
    stop.set()
    assert await asyncio.wait_for(daemon, 30) == 0


async def test_a_daemon_starting_while_a_command_holds_the_journal_waits_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: `my-agent conversations list` (or search) run while the daemon was
    # starting held the transcript journal's lock: the daemon exited 75 and systemd
    # restarted it. The command holds it for seconds (journal replay, catching up).
    config = make_config(tmp_path)
    config.conversations_dir.mkdir(parents=True)
    command = TranscriptStore(config.conversations_dir)
    command.open()  # what a reading command holds while no daemon runs
    assert not command.shared
    stop = asyncio.Event()
    daemon = asyncio.create_task(run_daemon(config, stop))
    try:
        # waiting (said so), not refused: awaited, then a bounded negative check
        await wait_logged(caplog, "is held by another process")
        await asyncio.sleep(0.5)
        assert not daemon.done()  # waiting, not refused
    finally:
        command.close()
    await _until_ready(config, daemon, 10)
    await _stop(daemon, stop)


async def test_a_second_daemon_is_still_refused_after_the_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_lock, "JOURNAL_WAIT_SECONDS", 0.5)
    config = make_config(tmp_path)
    config.conversations_dir.mkdir(parents=True)
    first = TranscriptStore(config.conversations_dir)
    first.open(exclusive=True)  # what a running daemon holds
    try:
        started = time.monotonic()
        with pytest.raises(DataDirInUse, match="another my-agent daemon") as refused:
            await asyncio.wait_for(run_daemon(config, asyncio.Event()), 10)
        assert 0.4 < time.monotonic() - started < 5
        # Regression (session 27): without a daemon.json naming it, the refusal named
        # neither the lock nor its holder (here this process, through ``first``).
        lock = config.conversations_dir.resolve() / "journal" / "lock"
        assert f"(pid {os.getpid()}) is running" in str(refused.value)
        assert f"(it holds {lock})" in str(refused.value)
    finally:
        first.close()


async def test_a_daemon_starting_during_a_reindex_waits_before_opening_the_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: a daemon started while `my-agent reindex` ran opened conversations.db
    # before the reindex deleted it (then ran on the deleted file), or took the journal
    # between the reindex's delete and its rebuild (the reindex then rebuilt nothing).
    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True)
    reindex = store_lock.try_lock(config.data_dir, exclusive=True)  # what reindex holds
    assert reindex is not None
    stop = asyncio.Event()
    daemon = asyncio.create_task(run_daemon(config, stop))
    try:
        # waiting (said so): awaited, then a bounded negative check
        await wait_logged(caplog, "a reindex is running")
        await asyncio.sleep(0.5)
        assert not daemon.done()
        assert not config.index_path.exists()  # nothing opened under the reindex
    finally:
        store_lock.release(reindex)
    await _until_ready(config, daemon, 10)
    await _stop(daemon, stop)


async def test_a_reindex_longer_than_the_wait_refuses_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_lock, "REINDEX_WAIT_SECONDS", 0.3)
    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True)
    reindex = store_lock.try_lock(config.data_dir, exclusive=True)
    try:
        with pytest.raises(DataDirInUse, match="a reindex is still running"):
            await asyncio.wait_for(run_daemon(config, asyncio.Event()), 10)
        assert not config.index_path.exists()
    finally:
        store_lock.release(reindex)


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path)), encoding="utf-8")
    return path


def test_reindex_refuses_while_a_daemon_runs_even_before_it_holds_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: reindex only asked whether the journal was locked; a daemon that had
    # started but not yet taken it (opening the index) had its index deleted under it.
    path = _config_file(tmp_path)
    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True)
    config.conversations_dir.mkdir()
    config.index_path.write_bytes(b"")  # stands for the index the daemon has open
    daemon = asyncio.run(store_lock.lock_for_daemon(config.data_dir))
    try:
        assert cli.main(["--config", str(path), "reindex"]) == exitcodes.EX_TEMPFAIL
        assert "stop it before reindexing" in capsys.readouterr().err
        assert config.index_path.exists()  # nothing deleted
    finally:
        store_lock.release(daemon)
    assert cli.main(["--config", str(path), "reindex"]) == exitcodes.OK


def test_reading_commands_refuse_clearly_while_a_reindex_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config_file(tmp_path)
    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True)
    reindex = store_lock.try_lock(config.data_dir, exclusive=True)
    try:
        for argv in (["conversations", "list"], ["search", "anything"]):
            assert cli.main(["--config", str(path), *argv]) == exitcodes.EX_TEMPFAIL, argv
            assert "a reindex is rebuilding" in capsys.readouterr().err
    finally:
        store_lock.release(reindex)
    assert cli.main(["--config", str(path), "conversations", "list"]) == exitcodes.OK


def test_a_command_lets_the_third_party_journal_go_before_the_transcript_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a daemon waiting for the transcript journal got it as soon as the
    # command closed its store, while the command still held the third-party journal:
    # the daemon then ran with that one "in use by another process" (not journaled).
    import bot.services
    from bot.journal import journal_in_use

    path = _config_file(tmp_path)
    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True)
    real = bot.services.close_services
    held: list[bool] = []

    async def close_services(services: object) -> None:
        held.append(journal_in_use(config.external_dir))
        await real(services)  # type: ignore[arg-type]

    monkeypatch.setattr(bot.services, "close_services", close_services)
    assert cli.main(["--config", str(path), "conversations", "list"]) == exitcodes.OK
    assert held == [False]


async def test_a_command_next_to_a_daemon_leaves_the_party_journal_to_it(tmp_path: Path) -> None:
    # Regression: a reading command that started after the daemon took the transcript
    # journal, but before it opened the party files' journal, took (and replayed) that
    # one: the daemon then ran with party files outside any journal.
    from bot.journal_files import journal_in_use, lock_journal
    from bot.services import close_services, open_services

    config = make_config(tmp_path)
    config.conversations_dir.mkdir(parents=True)
    daemon_fd = lock_journal(config.conversations_dir)  # the daemon, half way through
    try:
        services = await open_services(config, recover_now=False)
        try:
            assert services.store.shared
            assert not journal_in_use(config.external_dir)
        finally:
            await close_services(services)
    finally:
        os.close(daemon_fd)


async def test_a_daemon_does_not_run_without_the_party_journal(tmp_path: Path) -> None:
    # The other order: the party files' journal held elsewhere. The daemon used to open
    # it shared and run with its party files unjournaled; now it is refused like a held
    # transcript journal (and lets the transcripts' go again).
    from bot.journal_files import journal_in_use, lock_journal
    from bot.services import close_services, open_services

    config = make_config(tmp_path)
    config.external_dir.mkdir(parents=True)
    held = lock_journal(config.external_dir)
    try:
        with pytest.raises(DataDirInUse):
            await close_services(await open_services(config, exclusive=True))
        assert not journal_in_use(config.conversations_dir)
    finally:
        os.close(held)


async def test_the_daemon_waits_while_the_disk_refuses_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a start on a full disk exited 74 (73 when the data directory's probe
    write failed) at once, and systemd gave up after 5 starts in 300 s. Now the open is
    tried again until the disk takes writes; a stop ends the wait with the error."""
    import errno

    from bot import services as services_module
    from bot.services import DatabaseOpenError, DataDirError, close_services
    from tests.sqlite_driver import sqlite3

    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    real = services_module.open_services
    refusals: list[Exception] = []
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # type: ignore[attr-defined]
    opening = DatabaseOpenError("cannot open conversations.db")
    opening.__cause__ = full
    probe = DataDirError("data directory not usable")
    probe.__cause__ = OSError(errno.ENOSPC, "No space left on device")

    async def refusing(*args: object, **kwargs: object) -> object:
        if len(refusals) < 2:
            refusals.append([opening, probe][len(refusals)])
            raise refusals[-1]
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(services_module, "open_services", refusing)
    monkeypatch.setattr(store_lock, "STORAGE_WAIT_FIRST", 0.05)
    told: list[str] = []
    services = await store_lock.open_services_waiting(config, asyncio.Event(), told.append)
    await close_services(services)
    assert len(refusals) == 2 and len(told) == 2
    assert "KiB free in" in told[0]

    # a stop while waiting raises the refusal; another error is never waited on
    refusals.clear()
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, stop.set)
    monkeypatch.setattr(store_lock, "STORAGE_WAIT_FIRST", 30.0)
    with pytest.raises(DatabaseOpenError):
        await asyncio.wait_for(store_lock.open_services_waiting(config, stop), 5)

    async def broken(*args: object, **kwargs: object) -> object:
        raise DatabaseOpenError("file is not a database")

    monkeypatch.setattr(services_module, "open_services", broken)
    with pytest.raises(DatabaseOpenError, match="not a database"):
        await asyncio.wait_for(store_lock.open_services_waiting(config, asyncio.Event()), 5)


async def test_a_stop_while_waiting_for_the_disk_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM while the daemon waits for a full disk is a clean stop, not exit 74."""
    import errno

    from bot import services as services_module
    from bot.services import DataDirError

    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True, exist_ok=True)

    async def full(*args: object, **kwargs: object) -> object:
        raise DataDirError("not usable") from OSError(errno.ENOSPC, "No space left")

    monkeypatch.setattr(services_module, "open_services", full)
    monkeypatch.setattr(store_lock, "STORAGE_WAIT_FIRST", 0.05)
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, stop.set)
    assert await asyncio.wait_for(run_daemon(config, stop), 10) == 0


async def test_a_second_daemon_named_in_the_status_file_is_refused_at_once(
    tmp_path: Path,
) -> None:
    """Regression: `my-agent run` where a daemon already runs waited the 15 s meant for a
    reading command before exit 75. daemon.json names the live daemon (pid and start
    ticks): it is refused at once, the pid said; daemon.json is left to that daemon."""
    import json
    import subprocess

    from bot.status_file import process_start_ticks

    config = make_config(tmp_path)
    config.conversations_dir.mkdir(parents=True)
    first = TranscriptStore(config.conversations_dir)
    first.open(exclusive=True)  # what a running daemon holds
    other = subprocess.Popen(["sleep", "60"])  # the running daemon's pid
    status_path = config.data_dir / "daemon.json"
    status = {
        "pid": other.pid,
        "state": "ready",
        "started_at": time.time(),
        "start_ticks": process_start_ticks(other.pid),
        "updated_at": time.time(),
        "heartbeat_interval": 10.0,
    }
    status_path.write_text(json.dumps(status), encoding="utf-8")
    try:
        started = time.monotonic()
        with pytest.raises(
            DataDirInUse, match=f"another my-agent daemon \\(pid {other.pid}\\)"
        ) as refused:
            await asyncio.wait_for(run_daemon(config, asyncio.Event()), 30)
        # names the lock too (session 27)
        lock = config.data_dir.resolve() / "conversations" / "journal" / "lock"
        assert f"(it holds {lock})" in str(refused.value)
        assert time.monotonic() - started < 3
        assert read_status_file(status_path) == status  # not overwritten with this pid
        # its start ticks do not match: a reused pid, no daemon; the bounded wait again
        status_path.write_text(
            json.dumps({**status, "start_ticks": (status["start_ticks"] or 0) + 1}),
            encoding="utf-8",
        )
        assert store_lock.running_daemon(config.data_dir) is None
    finally:
        other.kill()
        other.wait()
        first.close()


async def test_the_daemon_waits_while_another_process_holds_state_db_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: state.db held locked by another process (a backup, an sqlite3 shell)
    made the daemon exit 74 advising to "move it aside to start with an empty one",
    which throws a good outbox away; systemd restarted it into the same lock. Now the
    open is tried again; a command still exits 74, with the lock named as the cause."""
    from bot.db import Database
    from bot.services import DatabaseOpenError, close_services, open_services
    from tests.sqlite_driver import sqlite3

    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    real_open = Database.open
    locked_for = [2]  # the opens that find it locked (SQLite's busy timeout passed)

    async def open_db(path: Path, *args: object, **kwargs: object) -> Database:
        if path == config.state_path and locked_for[0] > 0:
            locked_for[0] -= 1
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode = 5  # type: ignore[attr-defined]
            raise exc
        return await real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Database, "open", staticmethod(open_db))
    with pytest.raises(DatabaseOpenError) as refused:
        await open_services(config, exclusive=False)  # a command: exit 74, saying why
    assert "another process holds it locked" in str(refused.value)
    assert "move it aside" not in str(refused.value)
    monkeypatch.setattr(store_lock, "STORAGE_WAIT_FIRST", 0.05)
    told: list[str] = []
    services = await asyncio.wait_for(
        store_lock.open_services_waiting(config, asyncio.Event(), told.append), 30
    )
    await close_services(services)
    assert locked_for == [0] and len(told) == 1
    assert "another process holds it locked" in told[0]


def test_the_journal_lock_is_read_on_a_read_only_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: ``journal_in_use`` opened the lock for writing, which a read-only file
    system refuses (EROFS): `my-agent run` on a used data directory mounted read-only
    crashed (exit 70) instead of waiting with "cannot open the store", and `reindex`
    exited 70. Root writes anywhere, so the refusal is simulated where the lock opens."""
    import errno

    from bot.journal_files import journal_in_use, journal_lock_path, lock_journal

    config = make_config(tmp_path)
    config.conversations_dir.mkdir(parents=True)
    os.close(lock_journal(config.conversations_dir))  # a used data directory: the lock is there
    lock = str(journal_lock_path(config.conversations_dir))
    real_open = os.open

    def read_only_open(path: str, flags: int, *args: int) -> int:
        if str(path) == lock and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", lock)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only_open)
    assert not journal_in_use(config.conversations_dir)
    assert store_lock.running_daemon(config.data_dir) is None
    monkeypatch.setattr(os, "open", real_open)
    held = lock_journal(config.conversations_dir)
    try:
        monkeypatch.setattr(os, "open", read_only_open)
        assert journal_in_use(config.conversations_dir)  # a lock taken elsewhere still shows
    finally:
        os.close(held)


def test_the_disk_is_described_through_the_nearest_existing_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 40): a data directory not created yet (a read-only disk) made
    # the "trying again" line end "(free space of ... unknown: [Errno 2] ...)".
    missing = tmp_path / "not" / "yet"
    assert store_lock._free_space(missing).endswith(f"KiB free in {tmp_path}")
    real = os.statvfs

    def read_only(path: object) -> object:
        st = real(path)  # type: ignore[arg-type]
        return type("St", (), {"f_flag": os.ST_RDONLY, "f_bavail": 0, "f_frsize": st.f_frsize})()

    monkeypatch.setattr(os, "statvfs", read_only)
    assert store_lock._free_space(missing) == "the file system is read-only"
