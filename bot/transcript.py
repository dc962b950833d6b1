"""Append-only JSONL transcripts, the source of truth (seed 000 "Transcript (JSONL)").

One file per conversation, ``conv-{ulid}.jsonl``: a ``meta`` line, then ``turn`` and
``event`` lines. Appends are durable (per ``transcripts.fsync``) before the caller
acknowledges anything: once the store is opened, through the write-ahead journal of
:mod:`bot.journal` (one fsync for every append of a batch, the transcripts fsynced at each
checkpoint); before that, or without a journal, by write + fsync of the transcript
itself. Reads are tolerant: a torn last line or a corrupt line is skipped with a warning
and never blocks later appends or reads. The lines' format: :mod:`bot.transcript_lines`; the
write under each append: :mod:`bot.transcript_appends`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bot.journal import Journal, lock_journal
from bot.record_cache import keyed_locks
from bot.transcript_appends import FileAppends
from bot.transcript_lines import (
    READOUT_MODELS,
    Line,
    encode,
    event_line,
    meta_line,
    new_conversation_id,
    parse_lines,
    recallable,
    turn_line,
    well_formed,
)

# The line format is bot.transcript_lines'; its names stay importable from here.
__all__ = [
    "READOUT_MODELS",
    "Line",
    "TranscriptStore",
    "UnreadableTranscript",
    "encode",
    "event_line",
    "meta_line",
    "new_conversation_id",
    "parse_lines",
    "recallable",
    "turn_line",
    "well_formed",
]

log = logging.getLogger("my_agent.transcript")


class UnreadableTranscript(OSError):
    """A write to a transcript start-up could not read (:meth:`TranscriptStore.mark_unreadable`).

    An ``OSError``: the router holds the message as it does on any storage failure."""


class TranscriptStore(FileAppends):
    """JSONL files under ``directory``; safe for concurrent appends from one process.

    The write under each append (whole or nothing, a torn line closed, a deleted
    transcript recreated with its meta line): :class:`~bot.transcript_appends.FileAppends`."""

    def __init__(
        self, directory: Path, fsync: bool = True, checkpoint_seconds: float = 1.0
    ) -> None:
        super().__init__(directory, fsync)
        self.checkpoint_seconds = checkpoint_seconds
        self._journal: Journal | None = None
        # True when another process (a running daemon) held the journal at open(): it
        # writes these transcripts and indexes them, so this one must only read.
        self.shared = False
        self._lock_fd = -1  # the journal's lock, held without a journal (no fsync)
        self._locks = keyed_locks()  # held or waited for only (bounded)
        # Many concurrent fsyncs on different files are committed together by the
        # filesystem journal: a wide pool turns per-message fsync latency into throughput.
        self._executor = ThreadPoolExecutor(max_workers=6, thread_name_prefix="transcript")
        # conversation id -> why start-up could not read its transcript (for status)
        self.unreadable: dict[str, str] = {}

    def path(self, conv_id: str) -> Path:
        """The transcript of ``conv_id``; ValueError for anything not a conversation id."""
        # Built each time (a microsecond): before session 41 each was kept in a dict, one
        # entry per conversation ever looked up, for the life of the daemon.
        # (a NUL reached open() as "embedded null byte": the dashboard's load_more of
        # "conv-\x00" was an internal error instead of an empty page)
        if not conv_id.startswith("conv-") or any(c in conv_id for c in ("/", "..", "\0")):
            raise ValueError(f"not a conversation id: {conv_id!r}")
        return self.directory / f"{conv_id}.jsonl"

    def exists(self, conv_id: str) -> bool:
        return self.path(conv_id).exists()

    def conversation_ids(self) -> list[str]:
        """Every transcript's conversation id; ``[]`` when the directory does not exist.

        A directory that cannot be listed raises (``PermissionError``): ``Path.glob``
        returned nothing for it, and recovery took every conversation out of the index
        as deleted.
        """
        if not self.directory.is_dir():
            return []
        with os.scandir(self.directory) as entries:
            names = [e.name for e in entries]
        return sorted(
            n[: -len(".jsonl")] for n in names if n.startswith("conv-") and n.endswith(".jsonl")
        )

    def mark_unreadable(self, conv_id: str, why: str) -> None:
        """Refuse writes to ``conv_id`` for the rest of this run: start-up could not read
        its transcript, so its index rows may lag the file (its next turn number unknown,
        lines never indexed). The file is left as it is; the next start reads it again."""
        self.unreadable[conv_id] = why

    def _check_writable(self, conv_id: str) -> None:
        why = self.unreadable.get(conv_id)
        if why is not None:
            raise UnreadableTranscript(
                f"{self.path(conv_id).name} could not be read at start ({why}): not written "
                "to until a restart reads it"
            )

    def _lock(self, conv_id: str) -> asyncio.Lock:
        lock = self._locks.get(conv_id)
        if lock is None:
            lock = self._locks[conv_id] = asyncio.Lock()
        return lock

    # -- opening -------------------------------------------------------------------
    def open(self, exclusive: bool = False) -> int:
        """Replay the journal a crash left behind and route appends through it.

        Returns the number of records that were missing from transcripts. Without
        ``fsync`` there is no journal (nothing is durable anyway), only its lock. When
        another process holds the journal (a running daemon): with ``exclusive`` (the
        daemon itself) :class:`BlockingIOError` is raised, else appends are fsynced one
        by one.
        """
        if self._journal is not None or self._lock_fd >= 0:
            return 0
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.fsync:
            # The lock alone still keeps a second daemon off this directory: without
            # it two daemons ran on one store, both answering and sending everything.
            try:
                self._lock_fd = lock_journal(self.directory)
            except BlockingIOError:
                if exclusive:
                    raise
                self.shared = True
            return 0
        # looked up per call, not bound now: the write can be swapped (fault injection)
        journal = Journal(
            self.directory,
            lambda path, data: self._put(path, data),
            self.checkpoint_seconds,
            undo=self._cut,
        )
        try:
            repaired = journal.open()
        except BlockingIOError:
            if exclusive:
                raise
            log.info("%s: the journal is in use by another process", self.directory)
            self.shared = True
            return 0
        self._journal = journal
        return repaired

    def open_shared(self) -> int:
        """Use the store next to the process that owns its journal, without trying to
        take it: appends are fsynced one by one (as when :meth:`open` finds it held)."""
        if self._journal is None and self._lock_fd < 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.shared = True
        return 0

    def close(self) -> None:
        """Checkpoint and close the journal (queued appends finish first)."""
        journal, self._journal = self._journal, None
        if journal is not None:
            journal.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- writing -------------------------------------------------------------------
    def submit_file(
        self, path: Path, data: bytes, background: bool = False
    ) -> concurrent.futures.Future[int]:
        """Start a durable append of ``data`` to ``path``; the future gives the new size.

        ``background`` (a reply): see :meth:`bot.journal.Journal.submit`."""
        if self._journal is not None:
            return self._journal.submit(path, data, background)
        return self._executor.submit(self._write, path, data)

    async def append_file(self, path: Path, data: bytes) -> int:
        """Append ``data`` to ``path`` durably (any file of this directory)."""
        return await asyncio.wrap_future(self.submit_file(path, data))

    async def create(self, meta: Line) -> None:
        """Create a transcript with its meta line (durable, directory entry included)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(meta["id"])
        self._check_writable(meta["id"])
        async with self._lock(meta["id"]):
            await asyncio.to_thread(self._create_sync, path, encode([meta]))

    async def discard_created(self, conv_id: str, size: int) -> None:
        """Remove a transcript :meth:`create` just wrote, while it holds only its meta
        line (``size`` bytes): its conversation could not be indexed, and the retry
        makes another. Anything appended since keeps the file."""
        path = self.path(conv_id)
        async with self._lock(conv_id):
            if path.exists() and path.stat().st_size == size:
                await asyncio.to_thread(path.unlink)

    def _create_sync(self, path: Path, data: bytes) -> None:
        self._write(path, data)
        if self.fsync:
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    async def append(self, conv_id: str, lines: Iterable[Mapping[str, Any]]) -> int:
        """Append lines durably; returns the new file size in bytes."""
        self._check_writable(conv_id)
        data = encode(lines)
        path = self.path(conv_id)
        async with self._lock(conv_id):
            return await self.append_file(path, data)

    def lock(self, conv_id: str) -> asyncio.Lock:
        """The lock that orders appends to one transcript (hold it around
        :meth:`submit_append`)."""
        return self._lock(conv_id)

    def submit_append(
        self, conv_id: str, lines: Iterable[Mapping[str, Any]], background: bool = False
    ) -> concurrent.futures.Future[int]:
        """Start a durable append on a transcript thread; the future gives the new size.

        The caller holds :meth:`lock` until the future is done. Unlike :meth:`append`
        this does not wake the event loop when the write is done: the next step (the
        index update, see :class:`bot.db.AfterWrite`) is chained on the writing thread.
        """
        self._check_writable(conv_id)
        return self.submit_file(self.path(conv_id), encode(lines), background)

    # -- reading -------------------------------------------------------------------
    def read_lines(self, conv_id: str) -> list[Line]:
        """All readable lines; corrupt ones are skipped with a warning."""
        lines, _ = self.read_from(conv_id, 0)
        return lines

    def read_from(self, conv_id: str, offset: int) -> tuple[list[Line], int]:
        """Complete lines from byte ``offset``; returns them and the offset after them.

        A trailing fragment without a newline (a torn write) is left unread.
        """
        path = self.path(conv_id)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return [], offset
        end = data.rfind(b"\n")
        if end < 0:
            if data:
                log.warning("%s: torn last line ignored (%d bytes)", path.name, len(data))
            return [], offset
        if end + 1 < len(data):
            log.warning("%s: torn last line ignored (%d bytes)", path.name, len(data) - end - 1)
        start_line = 1
        if offset:
            start_line = 0  # unknown absolute line number; warnings still name the file
        return parse_lines(data[: end + 1], path.name, start_line), offset + end + 1

    async def aread_lines(self, conv_id: str) -> list[Line]:
        return await asyncio.to_thread(self.read_lines, conv_id)
