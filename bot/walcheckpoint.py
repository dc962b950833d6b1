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

A database that does not sync its commits (``synchronous=NORMAL``: the index, rebuilt from
the transcripts) leaves its WAL frames in the page cache until something flushes them: the
next checkpoint, or the transcript journal's ``syncfs`` once a second. Under a stream of
messages that is 5-10 MB at once, and every transcript ``fdatasync`` that meets such a
flush waits for it (the journal's flushes and these share the device's cache flush;
docs/benchmarks.md "Session 7"). So after a commit (:meth:`WalCheckpointer.note_commit`)
this thread also syncs the WAL (``fdatasync``), at most once per ``flush_interval``: each flush
then carries what a few milliseconds wrote. Idle, nothing is flushed and the thread
sleeps until the next checkpoint.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("my_agent.db")
RESTART_WAIT_MS = 50
BUSY_TIMEOUT_MS = 10_000  # every connection's (bot.db.connect_sync)
WAL_FLUSH_INTERVAL = 0.01  # seconds; the index's (bot.db.Database.open)


class WalCheckpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` every ``interval`` seconds on a thread and,
    with ``wal`` and ``flush_interval``, flushes that WAL file after commits."""

    def __init__(
        self,
        connect: Callable[[], Any],
        name: str,
        interval: float = 0.5,
        restart_frames: int = 262_144,
        wal: Path | None = None,
        flush_interval: float = 0.0,
    ) -> None:
        self._connect = connect
        self.interval = interval
        self.restart_frames = restart_frames  # 1 GiB of 4 KB pages
        self.wal = wal
        self.flush_interval = flush_interval if wal is not None else 0.0
        self._stop = threading.Event()
        self._wrote = threading.Event()  # a commit since the last flush
        self._thread = threading.Thread(target=self._run, name=f"wal-{name}", daemon=True)
        self._wal_fd = -1
        self.checkpoints = 0  # completed checkpoint calls (for tests and status)
        self.restarts = 0  # RESTART checkpoints run because the WAL grew too long
        self.flushes = 0  # WAL fdatasyncs after commits

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop after a last checkpoint (see :attr:`running`)."""
        self._stop.set()
        self._wrote.set()  # wakes the thread if it waits for a commit

    def note_commit(self) -> None:
        """A commit wrote WAL frames (called by the writer thread after each one)."""
        if self.flush_interval and not self._wrote.is_set():
            self._wrote.set()

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
            due = time.monotonic() + self.interval
            while True:
                if self._wait_until(due):
                    continue  # flushed after a commit; the checkpoint is not due yet
                stopping = self._stop.is_set()
                try:
                    self._checkpoint(conn)
                except Exception as exc:  # busy or I/O: the next round tries again
                    log.warning("WAL checkpoint failed: %s", exc)
                if stopping:
                    return
                due = time.monotonic() + self.interval
        finally:
            self._close_wal()
            conn.close()

    def _wait_until(self, due: float) -> bool:
        """Sleep until ``due`` or a stop; True when a commit came first and the WAL was
        flushed (then at most one flush per ``flush_interval``)."""
        remaining = due - time.monotonic()
        if not self.flush_interval:
            self._stop.wait(max(0.0, remaining))
            return False
        if remaining <= 0 or not self._wrote.wait(remaining) or self._stop.is_set():
            return False
        self._wrote.clear()  # a commit from now on asks for the next flush
        self._flush_wal()
        self._stop.wait(self.flush_interval)
        return True

    def _flush_wal(self) -> None:
        assert self.wal is not None
        try:
            # Opened once: SQLite deletes a WAL only when its last connection closes, and
            # this thread's own connection stays open as long as the descriptor does.
            if self._wal_fd < 0:
                self._wal_fd = os.open(self.wal, os.O_RDONLY)
            os.fdatasync(self._wal_fd)
            self.flushes += 1
        except FileNotFoundError:
            self._close_wal()
        except OSError as exc:
            # Nothing is lost (the checkpoints sync the WAL as before), but a flush that
            # fails once fails every 10 ms: stop flushing instead of filling the log.
            log.warning("WAL flush failed (%s); WAL flushed by checkpoints only from now", exc)
            self.flush_interval = 0.0
            self._close_wal()

    def _close_wal(self) -> None:
        if self._wal_fd >= 0:
            os.close(self._wal_fd)
            self._wal_fd = -1

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
