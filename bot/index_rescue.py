"""A corrupt ``conversations.db`` is set aside at the daemon's start and rebuilt.

The index is derived from the transcripts (recovery rebuilds a deleted one), so a file
SQLite calls corrupt (a torn write on a failing disk, a restore cut short, a file
truncated by a full disk) need not keep the daemon down: before session 18 the daemon
exited 74 on it, and systemd restarted it into the same error every 5 seconds while no
message could be received. The daemon now renames the file (and its WAL) to
``conversations.db.corrupt-<UTC time>``, kept for a post-mortem, and opens a new one,
which recovery fills from the transcripts. Only the daemon does this, holding the
transcript journal's lock (the data directory's claim): a one-shot command still exits
74 naming the file, and never pulls the index from under a running daemon.

``state.db`` is not derived from anything (outbox, channel cursors, command claims):
it is never set aside here.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from bot.journal_files import lock_journal

log = logging.getLogger("my_agent.db")

# SQLite's primary result codes for a damaged file (extended codes carry them in the
# low byte: SQLITE_CORRUPT_VTAB is an FTS5 index that is damaged)
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is SQLite reporting a damaged file."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB):
            return True
        current = current.__cause__ or current.__context__
    return False


def set_aside(path: Path, files: Path, reason: BaseException) -> Path:
    """Rename the corrupt index ``path`` (and its WAL) out of the way; returns the new name.

    ``files`` is the transcripts' directory, whose journal lock is held meanwhile: a
    daemon running on it (its lock held) raises :class:`BlockingIOError` and nothing is
    renamed. The shared-memory file is removed: it only mirrors the WAL's index.
    """
    lock = lock_journal(files)
    try:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = path.with_name(f"{path.name}.corrupt-{stamp}")
        os.replace(path, target)
        wal = Path(f"{path}-wal")
        if wal.exists():
            os.replace(wal, f"{target}-wal")
        Path(f"{path}-shm").unlink(missing_ok=True)
    finally:
        os.close(lock)
    log.error(
        "%s is corrupt (%s): moved to %s, a new index is rebuilt from the transcripts",
        path,
        reason,
        target.name,
    )
    return target
