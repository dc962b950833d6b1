"""WAL checkpoints run on their own thread (bot.walcheckpoint), never inside a commit."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from bot.db import Database, connect_sync
from bot.walcheckpoint import (
    BUSY_TIMEOUT_MS,
    RESTART_WAIT_MS,
    WAL_FLUSH_INTERVAL,
    WalCheckpointer,
)


def _schema(conn: Any) -> None:
    conn.execute("CREATE TABLE t (v TEXT)")


async def test_commits_never_checkpoint_and_the_thread_does(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "x.db", [_schema])
    try:
        assert db.checkpointer is not None
        assert await db.run(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
        for _ in range(1500):  # well past SQLite's automatic threshold of 1,000 pages
            await db.run(lambda c: c.execute("INSERT INTO t VALUES (?)", ("x" * 4000,)))
        before = db.checkpointer.checkpoints
        for _ in range(300):  # the thread's next round copies the WAL back
            if db.checkpointer.checkpoints > before:
                break
            await asyncio.sleep(0.01)
        assert db.checkpointer.checkpoints > before
        db.checkpointer.stop()
        for _ in range(300):
            if not db.checkpointer.running:
                break
            await asyncio.sleep(0.01)
        assert not db.checkpointer.running
        other = connect_sync(tmp_path / "x.db")
        try:  # everything written is in the database file: nothing left to copy
            busy, frames, done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            other.close()
        assert busy == 0 and frames == done
    finally:
        await db.close()


async def _wal_frames_after_steady_writes(db: Database, seconds: float) -> int:
    """Eight writers committing 4 KB rows back to back for ``seconds`` (the writer thread
    is never idle, as in a burst of messages); the WAL's length in frames after."""
    deadline = asyncio.get_running_loop().time() + seconds

    async def writer() -> None:
        while asyncio.get_running_loop().time() < deadline:
            await db.run(lambda c: c.execute("INSERT INTO t VALUES (?)", ("y" * 4000,)))

    await asyncio.gather(*(writer() for _ in range(8)))
    return _wal_frames(db)


def _wal_frames(db: Database) -> int:
    """The WAL's length in frames, read by a connection of its own."""
    other = connect_sync(db.path)
    try:
        return int(other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        other.close()


async def test_a_steady_stream_of_commits_cannot_grow_the_wal_for_ever(tmp_path: Path) -> None:
    # Regression: PASSIVE checkpoints alone never let the WAL start over while commits
    # keep arriving (150 MB in three seconds of bench ingest); past restart_frames the
    # thread runs a RESTART checkpoint and the WAL is written from its start again.
    db = await Database.open(tmp_path / "x.db", [_schema])
    try:
        assert db.checkpointer is not None
        db.checkpointer.interval = 0.02
        db.checkpointer.restart_frames = 200
        frames = await _wal_frames_after_steady_writes(db, 1.5)
        rows = (await db.fetchone("SELECT count(*) FROM t"))[0]
        # A restart that a reader held off at the end runs at the thread's next pass
        # (session 40: 20,058 frames of 52,368 rows were read just before it): the WAL
        # must start over by then, within the same bound.
        for _ in range(100):
            if frames < rows / 4:
                break
            await asyncio.sleep(0.02)
            frames = _wal_frames(db)
        assert db.checkpointer.restarts >= 1
        # Without the restarts the WAL holds every frame since the start: at least one per
        # committed row. Relative to the rows written, not a fixed count: how many fit in
        # 1.5 s depends on the machine, and a restart pending at the end (a reader in the
        # way) once left 5,496 frames of ~40,000 rows, over a fixed bound of 5,000.
        assert frames < rows / 4, (frames, rows)
    finally:
        await db.close()


def test_every_connection_limits_the_wal_file_left_behind(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "y.db")
    try:
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == 64 * 1024 * 1024
    finally:
        conn.close()


class _FakeConn:
    """Answers the checkpointer's PRAGMAs; records them."""

    def __init__(self, frames: int, busy: int = 0) -> None:
        self.frames, self.busy = frames, busy
        self.sql: list[str] = []

    def execute(self, sql: str) -> Any:
        self.sql.append(sql)
        row = (self.busy, self.frames, self.frames) if "RESTART" in sql else (0, self.frames, 0)
        return _Rows(row)


class _Rows:
    def __init__(self, row: tuple[int, int, int]) -> None:
        self.row = row

    def fetchone(self) -> tuple[int, int, int]:
        return self.row


def test_a_long_wal_gets_a_short_restart_checkpoint_and_a_short_one_does_not() -> None:
    checkpointer = WalCheckpointer(lambda: None, "x", restart_frames=1000)
    short = _FakeConn(frames=999)
    checkpointer._checkpoint(short)
    assert short.sql == ["PRAGMA wal_checkpoint(PASSIVE)"] and checkpointer.restarts == 0
    long = _FakeConn(frames=1000)
    checkpointer._checkpoint(long)
    assert long.sql == [
        "PRAGMA wal_checkpoint(PASSIVE)",
        f"PRAGMA busy_timeout={RESTART_WAIT_MS}",  # writers wait behind it: briefly only
        "PRAGMA wal_checkpoint(RESTART)",
        f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
    ]
    assert checkpointer.restarts == 1
    busy = _FakeConn(frames=5000, busy=1)  # a reader held on: try again next round
    checkpointer._checkpoint(busy)
    assert checkpointer.restarts == 1 and busy.sql[-1] == f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}"


async def _until(predicate: Any, seconds: float = 3.0) -> bool:
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return bool(predicate())


async def test_commits_that_are_not_synced_get_their_wal_flushed_soon(
    tmp_path: Path, monkeypatch: Any
) -> None:
    synced: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    db = await Database.open(tmp_path / "x.db", [_schema])
    try:
        checkpointer = db.checkpointer
        assert checkpointer is not None and checkpointer.flush_interval == WAL_FLUSH_INTERVAL
        await asyncio.sleep(0.1)
        assert checkpointer.flushes == 0  # idle: nothing to flush, no wake-ups
        await db.run(lambda c: c.execute("INSERT INTO t VALUES ('a')"))
        assert await _until(lambda: checkpointer.flushes == 1)
        wal = os.stat(tmp_path / "x.db-wal").st_ino
        assert synced == [wal]  # the WAL file itself, within milliseconds of the commit
        for _ in range(50):  # a burst: at most one flush per interval, not one per commit
            await db.run(lambda c: c.execute("INSERT INTO t VALUES ('b')"))
        # (the flush thread clears _wrote before its fdatasync counts: waiting for that
        # alone raced the count, and a fast burst read 1 flush; session 40)
        assert await _until(lambda: checkpointer.flushes >= 2 and not checkpointer._wrote.is_set())
        assert checkpointer.flushes < 50
    finally:
        await db.close()


async def test_a_database_that_syncs_every_commit_flushes_nothing_more(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "s.db", [_schema], synchronous="FULL")
    try:
        assert db.checkpointer is not None and db.checkpointer.flush_interval == 0
        await db.run(lambda c: c.execute("INSERT INTO t VALUES ('a')"))
        await asyncio.sleep(0.05)
        assert db.checkpointer.flushes == 0
    finally:
        await db.close()


def test_a_flush_before_the_wal_exists_does_nothing(tmp_path: Path) -> None:
    wal = tmp_path / "x.db-wal"
    checkpointer = WalCheckpointer(
        lambda: connect_sync(tmp_path / "x.db"), "x", interval=60.0, wal=wal, flush_interval=0.001
    )
    checkpointer._flush_wal()  # no WAL yet: nothing to do, no error, flushing stays on
    assert checkpointer.flushes == 0 and checkpointer.flush_interval == 0.001
    wal.write_bytes(b"frames")
    checkpointer._flush_wal()
    assert checkpointer.flushes == 1
    checkpointer._close_wal()


async def test_a_failing_wal_flush_is_reported_once_and_stops(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken)
    db = await Database.open(tmp_path / "x.db", [_schema])
    try:
        checkpointer = db.checkpointer
        assert checkpointer is not None
        for _ in range(20):
            await db.run(lambda c: c.execute("INSERT INTO t VALUES ('a')"))
            await asyncio.sleep(0.005)
        assert await _until(lambda: checkpointer.flush_interval == 0)
        assert await db.fetchone("SELECT count(*) FROM t") == (20,)  # nothing lost
    finally:
        await db.close()
    failures = [r for r in caplog.records if "WAL flush failed" in r.getMessage()]
    assert len(failures) == 1
