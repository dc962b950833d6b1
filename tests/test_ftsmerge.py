"""FTS5 merges in the index writer's idle time, not inside message commits
(bot.ftsmerge, bot.db.Database.idle_work; docs/benchmarks.md "Session 11")."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from bot.db import Database, SyncConn
from bot.ftsmerge import merge_slice


async def _segments(db: Database) -> int:
    row = await db.fetchone("SELECT count(DISTINCT segid) FROM turns_fts_idx")
    assert row is not None
    return int(row[0])


async def _idle(db: Database) -> None:
    """Until the writer has no idle work left (it runs on the writer thread)."""
    for _ in range(500):
        if not db._idle_due and not db._draining:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("idle work never finished")


async def test_the_index_does_not_merge_inside_commits(services: Any) -> None:
    row = await services.index_db.fetchone("SELECT v FROM turns_fts_config WHERE k = 'automerge'")
    assert row is not None and int(row[0]) == 0


async def test_commits_leave_segments_and_idle_time_merges_them(services: Any) -> None:
    db = services.index_db
    manager = services.conversations
    rec = await manager.create("web")
    db.idle_work = None  # what the commits alone do
    for i in range(12):
        # 4,000 distinct words: a segment of several leaf pages per commit. With FTS5's
        # default automerge (4) the 8th commit merged the first 8 in one go (the stall
        # this replaces); crisismerge waits for 16 segments.
        words = " ".join(f"w{i}x{j}" for j in range(4000))
        await manager.append_turn(rec.id, "user", f"kayak trip {i}: {words}")
    assert await _segments(db) == 12
    db.idle_work = merge_slice
    await manager.append_turn(rec.id, "user", "kayak trip 12, the last one")
    await _idle(db)
    assert await _segments(db) < 4
    found = await db.fetchall("SELECT rowid FROM turns_fts WHERE turns_fts MATCH 'kayak'")
    assert len(found) == 13
    # FTS5's own check of the merged index against its content (raises if corrupt)
    await db.execute("INSERT INTO turns_fts (turns_fts, rank) VALUES ('integrity-check', 1)")


def _table(conn: SyncConn) -> None:
    conn.execute("CREATE TABLE t (x INTEGER)")


async def test_idle_work_runs_between_units_until_done(tmp_path: Path) -> None:
    calls: list[int] = []

    def work(conn: SyncConn) -> bool:
        # a transaction of its own, after the commit that wrote
        calls.append(conn.execute("SELECT count(*) FROM t").fetchone()[0])
        return len(calls) < 3

    db = await Database.open(tmp_path / "x.db", [_table], idle_work=work)
    try:
        assert calls == []  # nothing written yet: nothing to do
        await db.execute("INSERT INTO t VALUES (1)")
        for _ in range(200):
            if len(calls) >= 3:
                break
            await asyncio.sleep(0.01)
        await db.execute("INSERT INTO t VALUES (2)")
        await _idle(db)
        # three steps after the first commit (the third said "done"), then after the
        # second commit one more step, which sees both rows
        assert calls[:3] == [1, 1, 1]
        assert calls[3:] == [2]
    finally:
        await db.close()


async def test_failing_idle_work_is_logged_and_units_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    def broken(conn: SyncConn) -> bool:
        nonlocal calls
        calls += 1
        conn.execute("INSERT INTO t VALUES (99)")
        raise RuntimeError("merge failed")

    db = await Database.open(tmp_path / "x.db", [_table], idle_work=broken)
    try:
        with caplog.at_level(logging.ERROR, logger="my_agent.db"):
            await db.execute("INSERT INTO t VALUES (1)")
            await _idle(db)
            await db.execute("INSERT INTO t VALUES (2)")
            await _idle(db)
        assert calls == 2  # once per commit: a failure waits for the next one
        rows = await db.fetchall("SELECT x FROM t ORDER BY x")
        assert rows == [(1,), (2,)]  # the failed step rolled back alone
        assert "idle work on x.db failed" in caplog.text
    finally:
        await db.close()


async def test_endless_idle_work_neither_starves_units_nor_holds_up_close(
    tmp_path: Path,
) -> None:
    steps = 0

    def endless(conn: SyncConn) -> bool:
        nonlocal steps
        steps += 1
        time.sleep(0.001)
        return True  # always "more to do"

    db = await Database.open(tmp_path / "x.db", [_table], idle_work=endless)
    await db.execute("INSERT INTO t VALUES (1)")
    while steps < 5:
        await asyncio.sleep(0.005)
    for i in range(2, 12):  # units run between steps
        await asyncio.wait_for(db.execute("INSERT INTO t VALUES (?)", (i,)), 5)
    await asyncio.wait_for(db.close(), 5)
    after = steps
    await asyncio.sleep(0.05)
    assert steps == after  # the writer stopped stepping once closed
