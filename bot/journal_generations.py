"""The generations of a transcript journal: its files, their checkpoints, their replay.

The writer thread of :class:`bot.journal.Journal` appends a batch's records to the file
of the current generation. Every ``checkpoint_seconds`` it retires that generation and
starts the next (:meth:`Generations._rotate`, in a spare file where there is one): a
checkpoint thread makes the transcripts written meanwhile durable and turns the file
into a spare, which a later generation overwrites (why reusing files matters, and the
format: :mod:`bot.journal_files`). At start, :meth:`Generations.replay` brings every
transcript up to the records a crash left live.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from pathlib import Path

from bot.journal_files import (
    HEADER_SIZE,
    datasync,
    encode_header,
    fsync_path,
    read_journal,
    read_legacy_records,
    sync_files,
    write_all,
)
from bot.journal_replay import restore_records

log = logging.getLogger("my_agent.journal")

MAX_SPARES = 2  # files kept for reuse; more are deleted
MAX_SPARE_BYTES = 64 * 1024 * 1024  # a file grown past this (a burst) is not kept


class Generations:
    """The generation files of the journal of ``directory`` (its ``journal/`` folder):
    the base of :class:`bot.journal.Journal`, which writes their records."""

    def __init__(self, directory: Path) -> None:
        self.files = directory
        self.directory = directory / "journal"
        self._checkpoints = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="journal-checkpoint"
        )
        self._checkpoint: concurrent.futures.Future[None] | None = None
        # generations whose checkpoint failed: (file, generation, transcripts to sync);
        # only the checkpoint thread uses it
        self._unchecked: list[tuple[Path, int, set[Path]]] = []
        self._fd = -1
        self._path: Path | None = None  # the file of the current generation
        self._pos = 0  # where its next record goes
        self._generation = 0
        self._started = 0.0
        self._dirty: set[Path] = set()
        self._spares: list[Path] = []  # checkpointed files, ready to be overwritten
        self._spares_lock = threading.Lock()
        self._next_name = 1

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
            log.info(  # which journal: the conversations' and the parties' said the same
                "journal replayed (%s): %d files, %d records rewritten in %d transcripts",
                self.directory,
                len(lives),
                repaired,
                len(touched),
            )
        return repaired
