"""WAL checkpoints off the write path.

SQLite checkpoints a WAL database automatically inside the COMMIT that pushes the WAL past
1,000 pages: that one commit copies megabytes into the database file and fsyncs it, and
every message waiting on it (the group commit) waits too. It was the largest source of
ingest p99 (6 ms against 1 ms without it, docs/benchmarks.md). So the writer connection
turns automatic checkpoints off and this thread runs PASSIVE checkpoints on its own
connection instead: they never block the writer or readers, and a commit never pays for
one.

A PASSIVE checkpoint never resets the WAL: the next writer starts it over only if every
frame was copied back by then, and under a steady stream of commits (a burst of hundreds
of messages a second) some always arrive while a checkpoint runs. The WAL then grew without
end while the stream lasted (150 MB in three seconds of ``bench ingest``'s open loop,
docs/benchmarks.md). So once it passes :attr:`WalCheckpointer.restart_frames` (1 GiB), the
thread runs a RESTART checkpoint: the next commit writes the WAL from its start again.
Writers wait behind it, for its copy and its flush, which on a stalling disk can take
long; that is why the cap is high: it only bounds a stream that would otherwise fill the
disk, and an ordinary burst never reaches it. Once the burst is over the WAL starts over by
itself, and ``journal_size_limit`` (set on every connection, :func:`bot.db.connect_sync`)
then cuts the file back to 64 MB.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("my_agent.db")
RESTART_WAIT_MS = 50
BUSY_TIMEOUT_MS = 10_000  # every connection's (bot.db.connect_sync)


class WalCheckpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` every ``interval`` seconds on a thread."""

    def __init__(
        self,
        connect: Callable[[], Any],
        name: str,
        interval: float = 0.5,
        restart_frames: int = 262_144,
    ) -> None:
        self._connect = connect
        self.interval = interval
        self.restart_frames = restart_frames  # 1 GiB of 4 KB pages
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"wal-{name}", daemon=True)
        self.checkpoints = 0  # completed checkpoint calls (for tests and status)
        self.restarts = 0  # RESTART checkpoints run because the WAL grew too long

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
                    self._checkpoint(conn)
                except Exception as exc:  # busy or I/O: the next round tries again
                    log.warning("WAL checkpoint failed: %s", exc)
                if stopping:
                    return
        finally:
            conn.close()

    def _checkpoint(self, conn: Any) -> None:
        _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        if frames < self.restart_frames:
            return
        # Writers queue behind a RESTART checkpoint while it waits for readers: wait for
        # them briefly only, and try again next round rather than hold every write up.
        conn.execute(f"PRAGMA busy_timeout={RESTART_WAIT_MS}")
        try:
            busy = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
        finally:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if busy:
            log.info("WAL of %d frames: readers busy, restart retried next round", frames)
        else:
            self.restarts += 1
            log.info("WAL of %d frames started over", frames)
