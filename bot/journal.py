"""Group commit for transcript appends: a write-ahead journal with one fsync per batch.

A transcript append used to be write + fsync of that transcript: one fsync per message,
and messages of different conversations (different files) could never share one. The
journal makes the fsync shared. One thread takes every append queued meanwhile, writes
each to its transcript (page cache only), writes a copy of each to the journal file and
syncs the journal once (``fdatasync``); then the appends are durable and their futures
resolve. Every ``checkpoint_seconds`` the journal moves on to a new generation: a
checkpoint thread fsyncs the transcripts written during the old one and then marks its
file a spare, which a later generation overwrites (the format and why reusing files
matters: :mod:`bot.journal_files`).

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
    HEADER_SIZE,
    VOID_RECORD,
    datasync,
    encode_header,
    encode_record,
    fsync_path,
    journal_in_use,
    lock_journal,
    read_journal,
    read_legacy_records,
    sync_files,
    write_all,
)
from bot.journal_replay import restore_records

__all__ = ["Journal", "journal_in_use", "lock_journal", "sync_files"]

log = logging.getLogger("my_agent.journal")

Writer = Callable[[Path, bytes], tuple[int, bytes]]  # (path, data) -> (offset, bytes written)
Undo = Callable[[Path, int], None]  # (path, offset): cut the file back to that size
Request = tuple[Path, bytes, "concurrent.futures.Future[int]", bool]  # ..., background
_WAKE = "wake"  # queued by checkpoint_soon(): no append, only a wake-up
# How long a batch of background appends only (replies) waits for a foreground one
# (an incoming message) to share its fsync with: see Journal._run.
BACKGROUND_LINGER = 0.002
MAX_SPARES = 2  # files kept for reuse; more are deleted
MAX_SPARE_BYTES = 64 * 1024 * 1024  # a file grown past this (a burst) is not kept


class Journal:
    """The write-ahead journal of one directory of JSONL files (see the module doc)."""

    def __init__(
        self,
        directory: Path,
        write: Writer,
        checkpoint_seconds: float = 1.0,
        undo: Undo | None = None,
    ) -> None:
        self.files = directory
        self.directory = directory / "journal"
        self._write = write
        self._undo = undo
        self.checkpoint_seconds = checkpoint_seconds
        self._queue: queue.SimpleQueue[Request | str | None] = queue.SimpleQueue()
        self._checkpoint_requested = False
        self.background_linger = BACKGROUND_LINGER
        self._thread: threading.Thread | None = None
        self._checkpoints = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="journal-checkpoint"
        )
        self._checkpoint: concurrent.futures.Future[None] | None = None
        # generations whose checkpoint failed: (file, generation, transcripts to sync);
        # only the checkpoint thread uses it
        self._unchecked: list[tuple[Path, int, set[Path]]] = []
        self._lock_fd = -1
        self._fd = -1
        self._path: Path | None = None  # the file of the current generation
        self._pos = 0  # where its next record goes
        self._generation = 0
        self._started = 0.0
        self._dirty: set[Path] = set()
        self._spares: list[Path] = []  # checkpointed files, ready to be overwritten
        self._spares_lock = threading.Lock()
        self._next_name = 1

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

    def _rotate(self) -> None:
        """Start the next generation, in a spare file if there is one."""
        with self._spares_lock:
            path = self._spares.pop() if self._spares else None
        if path is None:
            path = self.directory / f"{self._next_name:06d}.jnl"
            self._next_name += 1
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            fsync_path(self.directory)  # the new file's name must survive a crash too
        else:
            fd = os.open(path, os.O_RDWR)
        self._generation += 1
        try:  # durable with the generation's first batch
            write_all(fd, encode_header(self._generation, live=True), 0)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._path, self._pos = fd, path, HEADER_SIZE
        self._started = time.monotonic()

    def _retire(self) -> None:
        """Hand the current generation to the checkpoint thread."""
        path, generation, dirty = self._path, self._generation, self._dirty
        os.close(self._fd)
        self._fd, self._path, self._dirty = -1, None, set()
        assert path is not None
        try:
            self._checkpoint = self._checkpoints.submit(
                self._checkpoint_now, path, generation, dirty
            )
        except RuntimeError:  # the interpreter is exiting (no close()): checkpoint here
            self._checkpoint_now(path, generation, dirty)

    def _checkpoint_now(self, path: Path, generation: int, dirty: set[Path]) -> None:
        """Make the transcripts durable, then turn the generation's file into a spare.

        A generation whose checkpoint failed (the disk failing for a while) is tried
        again with every later one: left live until the next start, its records were
        replayed then over whatever happened to their files meanwhile (a transcript
        deleted to forget it came back from its record at offset 0)."""
        retry, self._unchecked = self._unchecked, []
        for item in [*retry, (path, generation, dirty)]:
            try:
                sync_files(self.files, item[2])
                self._make_spare(item[0], item[1])
            except OSError as exc:
                # The file stays live: tried again with the next checkpoint, else the
                # next start replays it.
                log.error("journal checkpoint of %s failed: %s", item[0].name, exc)
                self._unchecked.append(item)

    def _make_spare(self, path: Path, generation: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            write_all(fd, encode_header(generation, live=False), 0)
            datasync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        self._offer_spare(path, size)

    def _offer_spare(self, path: Path, size: int) -> None:
        with self._spares_lock:
            keep = len(self._spares) < MAX_SPARES and size <= MAX_SPARE_BYTES
            if keep:
                self._spares.append(path)
        if not keep:
            path.unlink(missing_ok=True)  # a spare: nothing lost if the unlink is not durable

    # -- replay ----------------------------------------------------------------------
    def replay(self) -> int:
        """Bring every transcript up to its journal records; returns records rewritten.

        Then every journal file is a spare, and the generations go on above the highest
        one any file ever held (so no stale record can pass for a new one).
        """
        legacy = sorted(p for p in self.directory.glob("*.wal") if p.stem.isdigit())
        files = sorted(p for p in self.directory.glob("*.jnl") if p.stem.isdigit())
        read = [(path, *read_journal(path)) for path in files]
        lives = [(legacy_path, read_legacy_records(legacy_path)) for legacy_path in legacy]
        lives += [
            (path, records)
            for path, _, live, records in sorted(read, key=lambda item: item[1])
            if live
        ]
        repaired, touched = restore_records(self.files, lives)
        for path in touched:
            fsync_path(path)
        if touched:
            fsync_path(self.files)  # files created again by the replay
        # Above every header, and above the clock in milliseconds: the records of a batch
        # torn by a crash may outlive the header write of their generation, which is then
        # in no header; a restart is later than that batch, and rotations are far rarer
        # than one per millisecond.
        self._generation = max(
            max((generation for _, generation, _, _ in read), default=0),
            time.time_ns() // 1_000_000,
        )
        self._next_name = max((int(p.stem) for p in files), default=0) + 1
        for path, generation, live, _ in read:
            if live:
                self._make_spare(path, generation)
            else:
                self._offer_spare(path, path.stat().st_size)
        for legacy_path in legacy:
            legacy_path.unlink()
        if legacy:
            fsync_path(self.directory)
        if lives:
            log.info(
                "journal replayed: %d files, %d records rewritten in %d transcripts",
                len(lives),
                repaired,
                len(touched),
            )
        return repaired
