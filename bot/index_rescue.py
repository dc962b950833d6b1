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

Damage in a page that neither the open nor recovery read (a row of an old conversation, a
vector) is looked for once a day by the daemon (:mod:`bot.index_page_checks`), in the background
(:func:`check_pages`: SQLite's quick check, on a connection of its own); what it finds
is reported as damage met while running, below. Before session 27 such a page was found
by the first search or write that reached it, maybe weeks later.

Damage SQLite reports while the daemon runs (a read of a page recovery never touched)
is left as a marker, ``conversations.db.damaged`` (:func:`mark_damaged`): the next start
sets that index aside too (:func:`set_aside_marked`), where the open alone could have
found nothing wrong and kept it.

``state.db`` is not derived from anything (outbox, channel cursors, command claims):
it is never set aside. A corrupt one stops the start (exit 74, naming the file and
what to do; the daemon's quick check finds damage the open does not read,
:mod:`bot.service_databases`), and so does an empty one next to stored conversations
(:func:`check_state_file`): SQLite takes a file of 0 bytes for a new database, so one
that lost its content (a crash of the machine before the data reached the disk, a
restore cut short) was silently started over: unsent replies dropped, and e-mail
resynchronised from scratch (a first run's ``initial_sync``).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from bot.events import iso, utcnow
from bot.journal_files import lock_journal

log = logging.getLogger("my_agent.db")

# SQLite's primary result codes for a damaged file (extended codes carry them in the
# low byte: SQLITE_CORRUPT_VTAB is an FTS5 index that is damaged)
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26


# ... and for storage that refuses writes: SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL,
# SQLITE_CANTOPEN (the -shm file cannot be sized on a full disk)
_REFUSALS = (8, 10, 13, 14)
_REFUSAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is SQLite reporting a damaged file."""
    return any(code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB) for code in _sqlite_codes(exc))


def is_storage_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is the disk refusing writes: full,
    read-only or failing (SQLite's codes for it, or the OSError)."""
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno in _REFUSAL_ERRNOS:
            return True
    return any(code & 0xFF in _REFUSALS for code in _sqlite_codes(exc))


# ... and for a file another process holds locked: SQLITE_BUSY, SQLITE_LOCKED
_LOCKED = (5, 6)


def is_lock_contention(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is SQLite finding the file locked by
    another process (a backup, an ``sqlite3`` shell) past its busy timeout."""
    return any(code & 0xFF in _LOCKED for code in _sqlite_codes(exc))


def _sqlite_codes(exc: BaseException) -> list[int]:
    codes = [getattr(current, "sqlite_errorcode", None) for current in _chain(exc)]
    return [code for code in codes if isinstance(code, int)]


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


class StateLost(Exception):
    """state.db is empty while conversations are stored: its content was lost."""


def check_state_file(state: Path, conversations: Path, external: Path) -> bool:
    """Raise :class:`StateLost` when ``state`` exists empty (its WAL too) next to stored
    conversations or party records; log an error when it is missing next to them, and
    return True then (the owner is told which replies that may have lost,
    :mod:`bot.state_new`)."""
    if not _stored_anything(conversations, "conv-*.jsonl") and not _stored_anything(
        external, "p*.jsonl"
    ):
        return False  # a first start (or a crash during one): nothing to lose
    try:
        size = state.stat().st_size
    except FileNotFoundError:
        # moved aside or deleted by hand (what the error below says to do): start over,
        # but say so
        log.error(
            "%s is missing while conversations are stored: a new one is made (unsent "
            "replies, channel cursors and command claims start empty; the owner is told "
            "which conversations' last reply may not have been sent)",
            state,
        )
        return True
    if size == 0 and _size(Path(f"{state}-wal")) == 0:
        raise StateLost(
            f"{state} is empty (0 bytes) while conversations are stored: its content was "
            "lost (a crash of the machine or a full disk?). Restore it from a backup; or "
            "delete it to start with a new one (unsent replies, channel cursors and "
            "command claims are then lost)"
        )
    return False


def _stored_anything(directory: Path, pattern: str) -> bool:
    return next(directory.glob(pattern), None) is not None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


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


def damaged_marker(path: Path) -> Path:
    """The marker :func:`mark_damaged` leaves next to the index ``path``."""
    return path.with_name(f"{path.name}.damaged")


def mark_damaged(path: Path, reason: BaseException) -> None:
    """Leave word that the index ``path`` was found damaged while running, for the next
    start to set it aside (best effort: a disk that refuses it is logged)."""
    try:
        damaged_marker(path).write_text(f"{reason}\n", encoding="utf-8")
    except OSError as exc:
        log.warning("cannot mark %s as damaged for the next start: %s", path, exc)


def set_aside_marked(path: Path, files: Path) -> None:
    """At the daemon's start: set aside the index :func:`mark_damaged` marked, if any.

    A daemon already running here (its journal lock held) leaves both as they are: the
    start fails on that lock next."""
    marker = damaged_marker(path)
    if not marker.exists():
        return
    if path.exists():
        try:
            reason = marker.read_text(encoding="utf-8").strip() or "damaged"
            set_aside(path, files, RuntimeError(f"found damaged while running: {reason}"))
        except OSError as exc:
            log.warning("cannot set aside %s, marked damaged: %s", path, exc)
            return
    marker.unlink(missing_ok=True)


def damage_text(name: str, damage: str) -> str:
    """The owner's problem line for the index file ``name`` found damaged (``damage``:
    what SQLite or the page check said). Only what is known: one bad page made it say
    "search and history fail" (before session 27), while everything that never reads
    that page works as before."""
    return (
        f"{name} is damaged ({damage}): searches, histories and index writes that reach "
        "the damaged part may fail, the rest works; the transcripts are not affected; "
        "restart my-agent to rebuild it from the transcripts"
    )


QUICK_CHECK_MAX = 5  # problems the page check lists before it stops


class DamagedPages(Exception):
    """What SQLite's quick check found wrong in the pages of an index."""


# index_meta's key for the last page check of this file (its time and result, JSON):
# kept in the file it is about, so that a rebuilt index has none; `my-agent status`
# reports it instead of reading every page itself
PAGE_CHECK_KEY = "page_check"
PAGES_OK = "ok"
PAGES_DAMAGED = "damaged: "  # the prefix of a result that found damage


async def check_pages(db: Any) -> str:
    """SQLite's quick check of every page of ``db`` (a :class:`bot.db.Database`), in a
    thread on a read-only connection of its own (the reader and the writer stay free);
    damage found is reported through ``db.report_damage``. Returns :data:`PAGES_OK`
    when the file is whole, :data:`PAGES_DAMAGED` and what was found, or
    ``"not finished: ..."`` when the check could not run to its end; the result and
    its time are kept in ``index_meta`` (:data:`PAGE_CHECK_KEY`).

    It reads the whole file: about 1 s for an index of 19 MB (600 conversations, 36,000
    turns) on the development machine under load. Cancelled (a stop), the check is
    interrupted rather than waited for."""
    result = await _quick_check(db)
    try:
        value = json.dumps({"at": iso(utcnow()), "result": result}, ensure_ascii=False)
        await db.execute(
            "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)", (PAGE_CHECK_KEY, value)
        )
    except Exception as exc:  # a damaged file may refuse it: the marker says it all
        log.debug("%s: the page check's result is not kept: %s", db.path.name, exc)
    return result


async def _quick_check(db: Any) -> str:
    try:
        conn = db.driver.module.connect(
            f"file:{db.path}?mode=ro", uri=True, timeout=10.0, check_same_thread=False
        )
    except Exception as exc:  # sqlite3 and pysqlite3 raise their own classes
        log.warning("%s: the page check could not start: %s", db.path.name, exc)
        return f"not finished: {exc}"

    def quick_check() -> list[str]:
        try:
            rows = conn.execute(f"PRAGMA quick_check({QUICK_CHECK_MAX})")
            return [str(row[0]) for row in rows]
        finally:
            conn.close()

    try:
        found = await asyncio.to_thread(quick_check)
    except asyncio.CancelledError:
        conn.interrupt()
        raise
    except Exception as exc:
        if not is_corruption(exc):  # a busy or failing disk: the check is not the place
            log.warning("%s: the page check did not finish: %s", db.path.name, exc)
            return f"not finished: {exc}"
        found = [str(exc)]
    if found == ["ok"]:
        log.info("%s: every page checked, no damage found", db.path.name)
        return PAGES_OK
    text = quick_check_text(found)
    if db.damage is None:
        db.report_damage(DamagedPages(text))
    return f"{PAGES_DAMAGED}{text}"


def quick_check_text(found: list[str]) -> str:
    """What ``PRAGMA quick_check(QUICK_CHECK_MAX)`` returned (``found``, not ``["ok"]``)
    in one line: "quick check, N problems: ..."."""
    # one row may list several problems, a line each (under "*** in database main ***")
    lines = [line for row in found for line in row.split("\n") if line.strip()]
    problems_found = [line for line in lines if not line.startswith("*** in database")]
    text = "; ".join(problems_found)
    count = len(problems_found)
    if count >= QUICK_CHECK_MAX:
        problems = f"{count} problems or more"
    else:
        problems = f"{count} problem{'s' if count > 1 else ''}"
    return f"quick check, {problems}: {text}"
