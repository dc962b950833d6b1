"""The test stack's own helpers: a test's look at a running daemon's database must not
disturb it."""

from __future__ import annotations

import os
from pathlib import Path

from bot.sqlite_conn import select_driver

from .stack import query_db


def test_a_tests_look_at_state_db_leaves_the_daemons_wal_alone(tmp_path: Path) -> None:
    # Regression: the tests read state.db with the standard sqlite3 while the daemon's
    # connections (pysqlite3, a second copy of SQLite in the process) were open: POSIX
    # locks are the process's, so closing that connection found no other one and deleted
    # the WAL and its shared memory from under them (under load: "database disk image
    # is malformed", "disk I/O error", and once the whole run: "Fatal Python error: Bus
    # error" in the writer thread). With one driver, SQLite knows its connections.
    path = tmp_path / "state.db"
    daemon = select_driver().module.connect(str(path), isolation_level=None)
    try:
        daemon.execute("PRAGMA journal_mode=WAL")
        daemon.execute("CREATE TABLE outbox (attempts INTEGER)")
        daemon.execute("INSERT INTO outbox VALUES (1)")
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        before = (os.stat(wal).st_ino, os.stat(shm).st_ino)
        assert query_db(path, "SELECT attempts FROM outbox") == [(1,)]
        assert wal.exists() and shm.exists(), "the WAL went from under the open connection"
        assert (os.stat(wal).st_ino, os.stat(shm).st_ino) == before
        daemon.execute("INSERT INTO outbox VALUES (2)")
        assert query_db(path, "SELECT count(*) FROM outbox") == [(2,)]
    finally:
        daemon.close()
