"""WAL checkpoints off the write path.

SQLite checkpoints a WAL database automatically inside the COMMIT that pushes the WAL past
1,000 pages: that one commit copies megabytes into the database file and fsyncs it, and
every message waiting on it (the group commit) waits too. It was the largest source of
ingest p99 (6 ms against 1 ms without it, docs/benchmarks.md). So the writer connection
turns automatic checkpoints off and this thread runs PASSIVE checkpoints on its own
connection instead: they never block the writer or readers, and a commit never pays for
one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("my_agent.db")


class WalCheckpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` every ``interval`` seconds on a thread."""

    def __init__(self, connect: Callable[[], Any], name: str, interval: float = 0.5) -> None:
        self._connect = connect
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"wal-{name}", daemon=True)
        self.checkpoints = 0  # completed checkpoint calls (for tests and status)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop after a last checkpoint (see :attr:`running`)."""
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            conn = self._connect()
        except Exception:
            log.exception("WAL checkpointer cannot connect; WAL grows until the next start")
            return
        try:
            while True:
                stopping = self._stop.wait(self.interval)
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                except Exception as exc:  # busy or I/O: the next round tries again
                    log.warning("WAL checkpoint failed: %s", exc)
                if stopping:
                    return
        finally:
            conn.close()
