"""The on-disk format of the transcript journal (:mod:`bot.journal`) and its fsync helpers.

A journal file is reused: once its generation is checkpointed it becomes a spare, and a
later generation writes over it from the start. Overwriting blocks the file already has
changes no metadata, so ``fdatasync`` needs no commit of the filesystem's own journal:
on ext4 it writes the batch and flushes the device, where an append (the file grows)
waits for a jbd2 commit that also flushes every other file's dirty data (transcripts,
SQLite's WAL). That commit was the journal's fsync tail (docs/benchmarks.md).

Because a reused file still holds the records of its earlier lives, every record carries
its generation, and a file's header says which generation it holds now:

- header (24 bytes): ``<magic 8s><generation u64><live u32><crc32 u32>``: the generation
  the file holds (``live`` 1) or held last (``live`` 0: a spare, nothing to replay). New
  generations are numbered above every header's, so no stale record can ever carry the
  generation of a file's current life;
- record: ``<data length u32><crc32 u32><generation u64><offset u64><name length
  u16><name><data>``; the CRC covers everything after it. Reading stops at the first
  record that is torn, corrupt or of another generation (the stale rest of the file).

Files of the first version (``*.wal``: records without a generation, never reused) are
still read by :func:`read_legacy_records`, so a journal left by an older daemon replays.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import logging
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("my_agent.journal")

MAGIC = b"MYAJNL01"
_FILE_HEAD = struct.Struct("<8sQII")
HEADER_SIZE = _FILE_HEAD.size
_HEAD = struct.Struct("<IIQQH")
_TAIL = struct.Struct("<QQH")  # the part of a record's header its CRC covers
_LEGACY_HEAD = struct.Struct("<IIQH")
# written where a refused batch began: generation 0 is no file's, so reading stops there
VOID_RECORD = bytes(_HEAD.size)

# fdatasync skips timestamps-only inode updates; fsync would commit them every time.
datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)

Record = tuple[str, int, bytes]  # (file name, offset in it, bytes written there)


def encode_header(generation: int, live: bool) -> bytes:
    head = _FILE_HEAD.pack(MAGIC, generation, int(live), 0)[:-4]
    return head + zlib.crc32(head).to_bytes(4, "little")


def decode_header(blob: bytes) -> tuple[int, bool]:
    """(generation, live) from a file's start; (0, False) when it has no readable header
    (a file created just before a crash, before its first batch)."""
    if len(blob) < HEADER_SIZE:
        return 0, False
    magic, generation, live, crc = _FILE_HEAD.unpack_from(blob)
    if magic != MAGIC or zlib.crc32(blob[: HEADER_SIZE - 4]) != crc:
        return 0, False
    return int(generation), bool(live)


def encode_record(generation: int, name: str, offset: int, data: bytes) -> bytes:
    raw = name.encode()
    body = _TAIL.pack(generation, offset, len(raw)) + raw + data
    return struct.pack("<II", len(data), zlib.crc32(body)) + body


def read_journal(path: Path) -> tuple[int, bool, list[Record]]:
    """The generation of ``path``, whether it is live, and its live records in order."""
    blob = path.read_bytes()
    generation, live = decode_header(blob)
    if not live:
        return generation, live, []
    # a torn batch (never acknowledged) or the file's stale earlier life ends the records
    return generation, live, _scan(blob, HEADER_SIZE, generation)[0]


def read_legacy_records(path: Path) -> list[Record]:
    """The intact records of a first-version ``*.wal`` file (a torn tail ends it)."""
    blob = path.read_bytes()
    records, end = _scan(blob, 0, None)
    if end < len(blob):
        log.warning("%s: journal ends with %d unreadable bytes", path.name, len(blob) - end)
    return records


def _scan(blob: bytes, pos: int, generation: int | None) -> tuple[list[Record], int]:
    """Records from ``pos`` while they are intact and of ``generation`` (``None``: the
    first version's records, which have none); returns them and where they end."""
    head = _LEGACY_HEAD if generation is None else _HEAD
    out: list[Record] = []
    while pos + head.size <= len(blob):
        size, crc, *tagged, offset, name_len = head.unpack_from(blob, pos)
        end = pos + head.size + name_len + size
        if (
            (tagged[0] if tagged else None) != generation
            or end > len(blob)
            or zlib.crc32(blob[pos + 8 : end]) != crc
        ):
            break
        name = blob[pos + head.size : pos + head.size + name_len].decode()
        out.append((name, offset, blob[end - size : end]))
        pos = end
    return out, pos


def write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


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
            fsync_path(path)
        except FileNotFoundError:
            pass  # deleted since: nothing to keep


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_journal(files: Path) -> int:
    """Take the journal lock of ``files`` (the directory a daemon owns); returns its fd.

    Raises :class:`BlockingIOError` when another process holds it."""
    lock = journal_lock_path(files)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    return fd


def journal_in_use(files: Path) -> bool:
    """True while a process (a running daemon) holds the journal of ``files``."""
    lock = journal_lock_path(files)
    try:
        # read-only: flock(2) needs no write access, and a data directory on a read-only
        # file system (EROFS on O_RDWR) crashed the daemon's start and `reindex` (exit 70)
        # instead of their "cannot open the store" (session 38)
        fd = os.open(lock, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken just now
    return False


def journal_lock_path(files: Path) -> Path:
    """The journal lock of ``files``: the data directory's claim (:func:`lock_journal`)."""
    return files / "journal" / "lock"


def lock_holder(path: Path) -> int | None:
    """The pid of the process holding an flock(2) lock on ``path``, read from
    ``/proc/locks`` (Linux; None elsewhere, or when no process holds it). A second daemon
    refused because the journal lock was held named neither the lock nor who held it
    when ``daemon.json`` did not name a live daemon (session 27)."""
    try:
        inode = path.stat().st_ino
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for row in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 12953 08:01:123456 0 EOF"; waiters have "->" after "1:"
        fields = row.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        pid, device_inode = fields[4], fields[5]
        if device_inode.rsplit(":", 1)[-1] == str(inode) and pid.isdigit() and pid != "0":
            return int(pid)
    return None
