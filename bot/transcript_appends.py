"""The write under every append to a transcript directory: whole, or nothing at all.

:class:`bot.transcript.TranscriptStore` appends through here, by the write-ahead journal
(:mod:`bot.journal`) or alone: a torn last line a crash left is closed before the next
record so that it stays one isolated corrupt line, what a failed append wrote is cut
off again, and a transcript deleted while the daemon runs is recreated with its meta
line first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from bot.transcript_lines import Line, encode

log = logging.getLogger("my_agent.transcript")

# Files whose end is remembered: far more than are appended to at once. A file whose entry
# was dropped costs one read of its last byte at its next append.
ENDS = 1024


class FileAppends:
    """Appends to the files under ``directory``, fsynced when ``fsync`` (the base of
    :class:`~bot.transcript.TranscriptStore`)."""

    def __init__(self, directory: Path, fsync: bool) -> None:
        self.directory = directory
        self.fsync = fsync
        # path -> file size after our last complete append (ends with a newline), the
        # latest ENDS files only: before session 41 one entry stayed per transcript and
        # party file ever appended to, for the life of the daemon. Appends run on several
        # threads (the journal's, the executor's): the lock guards the LRU's reordering.
        self._ends: OrderedDict[Path, int] = OrderedDict()
        self._ends_lock = threading.Lock()
        # conversation id -> its meta line (the conversation manager's records): a
        # transcript deleted while the daemon runs is recreated with it, not without
        self.meta_for: Callable[[str], Line | None] | None = None

    def _put(self, path: Path, data: bytes, sync: bool = False) -> tuple[int, bytes]:
        """Append ``data`` (fsync when ``sync``); returns the offset and bytes written."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        size = -1
        try:
            size = os.fstat(fd).st_size
            if not size and not data.startswith(b'{"type":"meta"'):
                data = self._with_meta(path, data)
            elif size and self._end(path) != size:
                # A torn last line (crash mid-write) must not swallow the next record:
                # terminate it so it stays an isolated corrupt line. (Skipped when our
                # own last complete write ended the file at this size.)
                if _last_byte(path, size) != b"\n":
                    data = b"\n" + data
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                os.fsync(fd)
            self._set_end(path, size + len(data))
            return size, data
        except BaseException:
            self._set_end(path, None)
            if size >= 0:
                # Nothing of a failed append stays (a full disk takes part of a write):
                # the caller retries it whole, and a fragment was a corrupt line for good,
                # or, cut just before its newline, a second copy of the message.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
            raise
        finally:
            os.close(fd)

    def _end(self, path: Path) -> int | None:
        """The size our last complete append to ``path`` left (None: unknown)."""
        with self._ends_lock:
            return self._ends.get(path)

    def _set_end(self, path: Path, size: int | None) -> None:
        """Remember ``size`` as ``path``'s end (None: forget it), dropping the least
        recently appended file past :data:`ENDS`."""
        with self._ends_lock:
            if size is None:
                self._ends.pop(path, None)
                return
            self._ends[path] = size
            self._ends.move_to_end(path)
            while len(self._ends) > ENDS:
                self._ends.popitem(last=False)

    def _with_meta(self, path: Path, data: bytes) -> bytes:
        """``data`` for an empty or missing transcript, its meta line first when known.

        A transcript deleted while the daemon ran was recreated by the next append
        without one: `status` said INCONSISTENT, and a restart registered it as a web
        conversation (its channel and sender lost)."""
        meta = self.meta_for(path.stem) if self.meta_for and path.stem.startswith("conv-") else None
        if meta is None:
            return data
        log.warning("%s was missing (deleted?): recreated with its meta line", path.name)
        return encode([meta]) + data

    def _cut(self, path: Path, size: int) -> None:
        """Truncate ``path`` back to ``size`` (an append the journal could not make
        durable, refused to its caller)."""
        self._set_end(path, None)  # the next append checks the last byte again
        os.truncate(path, size)

    def append_now(self, path: Path, data: bytes) -> int:
        """Append ``data`` durably on this thread, outside the journal; returns the file
        size after it. Only where nothing else writes to the file: start-up recovery
        (before any message), a reindex (the daemon stopped)."""
        return self._write(path, data)

    def _write(self, path: Path, data: bytes) -> int:
        """Append ``data`` durably without the journal; returns the file size after it."""
        offset, written = self._put(path, data, sync=self.fsync)
        return offset + len(written)


def _last_byte(path: Path, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, 1, size - 1)
    finally:
        os.close(fd)
