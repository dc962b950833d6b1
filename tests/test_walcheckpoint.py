"""WAL checkpoints run on their own thread (bot.walcheckpoint), never inside a commit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.db import Database, connect_sync


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
