"""Replaying a journal after a crash: every transcript brought up to its records.

For each record the transcript must hold exactly its bytes at its offset; where it does
not (the write was lost with the page cache of a crashed machine), the transcript is cut
there and the record written again (:meth:`bot.journal.Journal.replay`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

log = logging.getLogger("my_agent.journal")

Record = tuple[str, int, bytes]  # (file name, offset, bytes)


def restore_records(
    files: Path, lives: Iterable[tuple[Path, Sequence[Record]]]
) -> tuple[int, set[Path]]:
    """Apply the records of the live journals in ``lives`` (oldest generation first) to
    the files in ``files``; returns the records rewritten and the files they touched (not
    yet synced: the caller syncs them once)."""
    repaired = 0
    touched: set[Path] = set()
    for journal, records in lives:
        for name, offset, data in records:
            if "/" in name or name.startswith("."):
                log.warning("%s: record for %r ignored", journal.name, name)
                continue
            path = files / name
            if _restore(path, offset, data):
                repaired += 1
                touched.add(path)
    return repaired, touched


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
