"""Group commit for transcript appends: a write-ahead journal with one fsync per batch.

A transcript append used to be write + fsync of that transcript: one fsync per message,
and messages of different conversations (different files) could never share one. The
journal makes the fsync shared. One thread takes every append queued meanwhile, writes
each to its transcript (page cache only), writes a copy of each to the journal file and
syncs the journal once (``fdatasync``); then the appends are durable and their futures
resolve. Every ``checkpoint_seconds`` the journal moves on to a new generation: a
checkpoint thread fsyncs the transcripts written during the old one and then marks its
file a spare, which a later generation overwrites (the format and why reusing files
matters: :mod:`bot.journal_files`; the generations: :mod:`bot.journal_generations`).

After a crash of the machine (a killed process loses nothing: the page cache survives
it), :meth:`Journal.open` replays what is left: for every record, the transcript must hold
exactly those bytes at that offset; where it does not (the write was lost with the page
cache), the transcript is cut there and the record written again. A lock file keeps a
second process (``my-agent reindex`` next to a running daemon) from replaying a journal
that is still in use.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bot.journal_files import (
    VOID_RECORD,
    datasync,
    encode_record,
    journal_in_use,
    lock_journal,
    write_all,
)
from bot.journal_generations import Generations

__all__ = ["Journal", "journal_in_use", "lock_journal"]

log = logging.getLogger("my_agent.journal")

Writer = Callable[[Path, bytes], tuple[int, bytes]]  # (path, data) -> (offset, bytes written)
Undo = Callable[[Path, int], None]  # (path, offset): cut the file back to that size
Request = tuple[Path, bytes, "concurrent.futures.Future[int]", bool]  # ..., background
_WAKE = "wake"  # queued by checkpoint_soon(): no append, only a wake-up
# How long a batch of background appends only (replies) waits for a foreground one
# (an incoming message) to share its fsync with: see Journal._run.
BACKGROUND_LINGER = 0.002


class Journal(Generations):
    """The write-ahead journal of one directory of JSONL files (see the module doc); its
    generation files, checkpoints and replay are :class:`~bot.journal_generations.Generations`'."""

    def __init__(
        self,
        directory: Path,
        write: Writer,
        checkpoint_seconds: float = 1.0,
        undo: Undo | None = None,
    ) -> None:
        super().__init__(directory)
        self._write = write
        self._undo = undo
        self.checkpoint_seconds = checkpoint_seconds
        self._queue: queue.SimpleQueue[Request | str | None] = queue.SimpleQueue()
        self._checkpoint_requested = False
        self.background_linger = BACKGROUND_LINGER
        self._thread: threading.Thread | None = None
        self._lock_fd = -1

    # -- lifecycle -----------------------------------------------------------------
    def open(self) -> int:
        """Lock the journal, replay what a crash left, start the writer thread.

        Returns the number of records that had to be written again. Raises
        :class:`BlockingIOError` when another process holds the journal.
        """
        self._lock_fd = lock_journal(self.files)
        repaired = self.replay()
        self._rotate()
        self._thread = threading.Thread(target=self._run, name="journal", daemon=True)
        self._thread.start()
        return repaired

    def close(self) -> None:
        """Finish queued appends, checkpoint everything, release the lock."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._fd >= 0:
            self._retire()
        self._checkpoints.shutdown(wait=True)  # every checkpoint done, in order
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def submit(
        self, path: Path, data: bytes, background: bool = False
    ) -> concurrent.futures.Future[int]:
        """Append ``data`` to ``path`` durably; the future gives the file size after it.

        ``background``: nobody waits on this append for a message to count as received
        (a reply); it may wait up to :attr:`background_linger` to share the fsync of the
        next foreground append instead of taking a batch (and an fsync) of its own that
        the next incoming message would have to wait out.
        """
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        if self._thread is None:
            future.set_exception(RuntimeError("the journal is closed"))
        else:
            self._queue.put((path, data, future, background))
        return future

    def checkpoint_soon(self) -> None:
        """Start a new generation (and checkpoint the current one) now rather than when
        :attr:`checkpoint_seconds` have passed; if nothing was written since the last
        one, with the next write."""
        self._checkpoint_requested = True
        self._queue.put(_WAKE)

    # -- the writer thread ---------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            batch: list[Request | str | None] = []
            try:
                batch.append(self._queue.get(timeout=self.checkpoint_seconds))
            except queue.Empty:
                pass  # idle: only a checkpoint may be due
            self._take_queued(batch)
            if batch and all(isinstance(r, tuple) and r[3] for r in batch):
                self._linger(batch)
            stop = any(r is None for r in batch)
            requests = [r for r in batch if isinstance(r, tuple)]
            if requests:
                self._commit(requests)
            if stop or not self._dirty:
                continue
            due = self._checkpoint_requested or (
                time.monotonic() - self._started >= self.checkpoint_seconds
            )
            if due and (self._checkpoint is None or self._checkpoint.done()):
                self._checkpoint_requested = False
                try:
                    self._retire()
                    self._rotate()
                except OSError:
                    log.exception("journal rotation failed; trying again with the next batch")

    def _take_queued(self, batch: list[Request | str | None]) -> None:
        while True:  # everything queued meanwhile shares this batch's one fsync
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def _linger(self, batch: list[Request | str | None]) -> None:
        """Background appends only: wait (bounded) for a foreground one to join them.

        One message at a time, a reply's append otherwise lands alone just before the
        next message's and that message waits for the reply's fsync, then its own (a
        large part of the sequential p99 with replies, docs/benchmarks.md "Session 4")."""
        deadline = time.monotonic() + self.background_linger
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                request = self._queue.get(timeout=remaining)
            except queue.Empty:
                return
            batch.append(request)
            if not isinstance(request, tuple) or not request[3]:
                self._take_queued(batch)
                return

    def _commit(self, requests: list[Request]) -> None:
        if self._fd < 0:  # a rotation failed earlier (e.g. a full disk): try again
            try:
                self._rotate()
            except OSError as exc:
                for _, _, future, _ in requests:
                    if future.set_running_or_notify_cancel():
                        future.set_exception(exc)
                return
        records: list[bytes] = []
        written: list[tuple[concurrent.futures.Future[int], int]] = []
        paths: set[Path] = set()
        starts: dict[Path, int] = {}  # where this batch began writing each file
        for path, data, future, _ in requests:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                offset, raw = self._write(path, data)
            except BaseException as exc:
                future.set_exception(exc)
                continue
            records.append(encode_record(self._generation, path.name, offset, raw))
            written.append((future, offset + len(raw)))
            paths.add(path)
            starts.setdefault(path, offset)
        if not records:
            return
        blob = b"".join(records)
        try:
            write_all(self._fd, blob, self._pos)
            datasync(self._fd)
        except OSError as exc:
            log.error("journal write failed: %s", exc)
            self._void(self._pos)
            # Every append of the batch is refused, and its caller retries it: what the
            # batch wrote to the transcripts is cut off again, else each retry stored a
            # second copy of its message. (This thread is the files' only writer.)
            for path, offset in starts.items():
                self._cut(path, offset)
            self._dirty |= paths  # sync what is left of them anyway
            for future, _ in written:
                future.set_exception(exc)
            try:  # a torn record would hide every later one: go on in a fresh generation
                self._retire()
                self._rotate()
            except OSError:
                log.exception("cannot start a new journal generation")
            return
        self._pos += len(blob)
        self._dirty |= paths
        for future, size in written:
            future.set_result(size)

    def _void(self, pos: int) -> None:
        """End the generation's records at ``pos``, where a refused batch began.

        Its records may be readable there (their write landed and only the sync failed,
        or the first ones of a write cut short), and the generation stays live if its
        checkpoint fails too: replayed at the next start, a refused record cut its
        transcript at its offset, where the retry and every later message had been
        stored since (acknowledged messages lost). A record header of zeros is of no
        generation, so reading stops there. Best effort: the disk may refuse it too."""
        try:
            write_all(self._fd, VOID_RECORD, pos)
            datasync(self._fd)
        except OSError as exc:
            log.error("cannot void the refused batch in %s: %s", self._path, exc)

    def _cut(self, path: Path, offset: int) -> None:
        if self._undo is None:
            return
        try:
            self._undo(path, offset)
        except OSError as exc:  # the lines stay: a retry may then store a second copy
            log.error("cannot cut %s back to %d bytes: %s", path.name, offset, exc)
