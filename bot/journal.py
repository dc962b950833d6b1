"""Group commit for transcript appends: a write-ahead journal with one fsync per batch.

A transcript append used to be write + fsync of that transcript: one fsync per message,
and messages of different conversations (different files) could never share one. The
journal makes the fsync shared. One thread takes every append queued meanwhile, writes
each to its transcript (page cache only), appends a copy of each to the journal file and
fsyncs the journal once; then the appends are durable and their futures resolve. Every
``checkpoint_seconds`` the journal rotates: a checkpoint thread fsyncs the transcripts
written during the old generation and only then deletes its journal file.

After a crash of the machine (a killed process loses nothing: the page cache survives
it), :meth:`Journal.open` replays what is left: for every record, the transcript must hold
exactly those bytes at that offset; where it does not (the write was lost with the page
cache), the transcript is cut there and the record written again. A lock file keeps a
second process (``my-agent reindex`` next to a running daemon) from replaying a journal
that is still in use.

Record: ``<data length u32><crc32 u32><offset u64><name length u16><name><data>``; the
CRC covers everything after it, so a torn tail (a batch never acknowledged) ends the
replay of that file.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import ctypes.util
import fcntl
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("my_agent.journal")

_HEAD = struct.Struct("<IIQH")
_TAIL = struct.Struct("<QH")  # the part of the header the CRC covers
Writer = Callable[[Path, bytes], tuple[int, bytes]]  # (path, data) -> (offset, bytes written)


def encode_record(name: str, offset: int, data: bytes) -> bytes:
    raw = name.encode()
    body = _TAIL.pack(offset, len(raw)) + raw + data
    return struct.pack("<II", len(data), zlib.crc32(body)) + body


def read_records(path: Path) -> list[tuple[str, int, bytes]]:
    """The intact records of a journal file, in order (a torn or corrupt tail ends it)."""
    blob = path.read_bytes()
    out: list[tuple[str, int, bytes]] = []
    pos = 0
    while pos + _HEAD.size <= len(blob):
        size, crc, offset, name_len = _HEAD.unpack_from(blob, pos)
        end = pos + _HEAD.size + name_len + size
        if end > len(blob) or zlib.crc32(blob[pos + 8 : end]) != crc:
            log.warning("%s: journal ends with %d unreadable bytes", path.name, len(blob) - pos)
            break
        name = blob[pos + _HEAD.size : pos + _HEAD.size + name_len].decode()
        out.append((name, offset, blob[end - size : end]))
        pos = end
    return out


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.syncfs  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not Linux / no glibc: fsync per file
        return None


_syncfs = _load_syncfs()


def sync_files(directory: Path, paths: set[Path]) -> None:
    """Make ``paths`` (all in ``directory``'s filesystem) durable.

    One ``syncfs(2)`` where Linux has it: one filesystem-journal commit for every file,
    where an fsync per file costs one commit each (100 transcripts took 30-200 ms and
    stalled the journal's own fsync meanwhile; syncfs took 12-30 ms). Else, or if it
    reports an error, an fsync per file (which raises what it finds).
    """
    if not paths:
        return
    if _syncfs is not None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            if _syncfs(fd) == 0:
                return
            log.warning(
                "syncfs failed (%s); fsyncing files one by one", os.strerror(ctypes.get_errno())
            )
        finally:
            os.close(fd)
    for path in paths:
        try:
            _fsync_path(path)
        except FileNotFoundError:
            pass  # deleted since: nothing to keep


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def journal_in_use(files: Path) -> bool:
    """True while a process (a running daemon) holds the journal of ``files``."""
    lock = files / "journal" / "lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken just now
    return False


class Journal:
    """The write-ahead journal of one directory of JSONL files (see the module doc)."""

    def __init__(self, directory: Path, write: Writer, checkpoint_seconds: float = 1.0) -> None:
        self.files = directory
        self.directory = directory / "journal"
        self._write = write
        self.checkpoint_seconds = checkpoint_seconds
        self._queue: queue.SimpleQueue[tuple[Path, bytes, concurrent.futures.Future[int]] | None]
        self._queue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._checkpoints = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="journal-checkpoint"
        )
        self._checkpoint: concurrent.futures.Future[None] | None = None
        self._lock_fd = -1
        self._fd = -1
        self._generation = 0
        self._started = 0.0
        self._dirty: set[Path] = set()

    # -- lifecycle -----------------------------------------------------------------
    def open(self) -> int:
        """Lock the journal, replay what a crash left, start the writer thread.

        Returns the number of records that had to be written again. Raises
        :class:`BlockingIOError` when another process holds the journal.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise
        self._lock_fd = fd
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
            os.close(self._fd)
            self._fd = -1
            journal, dirty, self._dirty = self._journal_path(self._generation), self._dirty, set()
            self._checkpoints.submit(self._checkpoint_now, journal, dirty)
        self._checkpoints.shutdown(wait=True)  # every checkpoint done, in order
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def submit(self, path: Path, data: bytes) -> concurrent.futures.Future[int]:
        """Append ``data`` to ``path`` durably; the future gives the file size after it."""
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        if self._thread is None:
            future.set_exception(RuntimeError("the journal is closed"))
        else:
            self._queue.put((path, data, future))
        return future

    # -- the writer thread ---------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            batch: list[tuple[Path, bytes, concurrent.futures.Future[int]] | None] = []
            try:
                batch.append(self._queue.get(timeout=self.checkpoint_seconds))
            except queue.Empty:
                pass  # idle: only a checkpoint may be due
            while True:  # everything queued meanwhile shares this batch's one fsync
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(r is None for r in batch)
            requests = [r for r in batch if r is not None]
            if requests:
                self._commit(requests)
            if stop or not self._dirty:
                continue
            if time.monotonic() - self._started >= self.checkpoint_seconds and (
                self._checkpoint is None or self._checkpoint.done()
            ):
                try:
                    self._rotate_and_checkpoint()
                except OSError:
                    log.exception("journal rotation failed; staying on the current file")

    def _commit(self, requests: list[tuple[Path, bytes, concurrent.futures.Future[int]]]) -> None:
        if self._fd < 0:  # a rotation failed earlier (e.g. a full disk): try again
            try:
                self._rotate()
            except OSError as exc:
                for _, _, future in requests:
                    if future.set_running_or_notify_cancel():
                        future.set_exception(exc)
                return
        records: list[bytes] = []
        written: list[tuple[concurrent.futures.Future[int], int]] = []
        paths: set[Path] = set()
        for path, data, future in requests:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                offset, raw = self._write(path, data)
            except BaseException as exc:
                future.set_exception(exc)
                continue
            records.append(encode_record(path.name, offset, raw))
            written.append((future, offset + len(raw)))
            paths.add(path)
        if not records:
            return
        try:
            view = memoryview(b"".join(records))
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as exc:
            log.error("journal write failed: %s", exc)
            self._dirty |= paths  # the transcripts may hold the bytes: sync them anyway
            for future, _ in written:
                future.set_exception(exc)
            try:  # a torn record would hide every later one: go on in a fresh file
                self._rotate_and_checkpoint()
            except OSError:
                log.exception("cannot start a new journal file")
            return
        self._dirty |= paths
        for future, size in written:
            future.set_result(size)

    def _journal_path(self, generation: int) -> Path:
        return self.directory / f"{generation:012d}.wal"

    def _rotate(self) -> None:
        # the replay at open removed every older file: numbering is ours from there on
        self._generation += 1
        self._fd = os.open(
            self._journal_path(self._generation), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        _fsync_path(self.directory)  # the new file's name must survive a crash too
        self._started = time.monotonic()

    def _rotate_and_checkpoint(self) -> None:
        old, dirty = self._journal_path(self._generation), self._dirty
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._dirty = set()
        self._checkpoint = self._checkpoints.submit(self._checkpoint_now, old, dirty)
        self._rotate()

    def _checkpoint_now(self, journal: Path, dirty: set[Path]) -> None:
        """Make the transcripts durable, then drop the journal that covered them."""
        try:
            sync_files(self.files, dirty)
            journal.unlink(missing_ok=True)
            _fsync_path(self.directory)
        except OSError as exc:
            # The journal stays: the next start replays it (cheap, idempotent).
            log.error("journal checkpoint of %s failed: %s", journal.name, exc)

    # -- replay ----------------------------------------------------------------------
    def replay(self) -> int:
        """Bring every transcript up to its journal records; returns records rewritten."""
        journals = sorted(p for p in self.directory.glob("*.wal") if p.stem.isdigit())
        repaired = 0
        touched: set[Path] = set()
        for journal in journals:
            for name, offset, data in read_records(journal):
                if "/" in name or name.startswith("."):
                    log.warning("%s: record for %r ignored", journal.name, name)
                    continue
                path = self.files / name
                if _restore(path, offset, data):
                    repaired += 1
                    touched.add(path)
        for path in touched:
            _fsync_path(path)
        if touched:
            _fsync_path(self.files)  # files created again by the replay
        for journal in journals:
            journal.unlink()
        if journals:
            _fsync_path(self.directory)
            log.info(
                "journal replayed: %d files, %d records rewritten in %d transcripts",
                len(journals),
                repaired,
                len(touched),
            )
        return repaired


def _restore(path: Path, offset: int, data: bytes) -> bool:
    """Make ``path`` hold ``data`` at ``offset``; True when it had to be written."""
    try:
        # A record at offset 0 created its file (a party file is created by its first
        # append) and may have lost its directory entry: create it again. Any other
        # missing file was deleted on purpose, and a deleted one is not brought back.
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if offset == 0 else 0), 0o600)
    except FileNotFoundError:
        log.warning("journal record for missing %s skipped", path.name)
        return False
    try:
        if os.pread(fd, len(data), offset) == data:
            return False
        size = os.fstat(fd).st_size
        if size < offset:
            log.error("%s is shorter than its journal expects; appending at its end", path.name)
            offset = size
        os.ftruncate(fd, offset)
        os.pwrite(fd, data, offset)
        log.warning("%s: restored %d bytes at %d from the journal", path.name, len(data), offset)
        return True
    finally:
        os.close(fd)
