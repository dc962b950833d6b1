"""The index's pages and keyword indexes, checked from outside the daemon (part of
``my-agent status``, :mod:`bot.health_store`): the daemon's last check of every page
(:func:`pages_checked`), the same check run now (:func:`page_check`, ``--pages``), and
FTS5's ``integrity-check`` (:func:`fts_integrity`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bot.db import select_driver
from bot.health_daemon import disk_space
from bot.index_rescue import PAGE_CHECK_KEY

NOT_CHECKED = "not checked yet"  # the pages of an index no daemon has checked


def page_check(conn: Any) -> str:
    """SQLite's ``quick_check`` of every page of the index: "ok" or its first findings.

    The FTS5 check reads only the keyword index's pages, and counting rows reads no page
    of most tables, so a damaged page elsewhere (a turn's row, a vector) was reported
    "consistent" until a search or a write reached it (session 27)."""
    found = [str(row[0]) for row in conn.execute("PRAGMA quick_check(5)")]
    if found == ["ok"]:
        return "ok"
    text = "; ".join(found).replace("*** in database main ***\n", "")
    return text.replace("\n", "; ")


def pages_checked(conn: Any) -> tuple[str, str | None]:
    """The daemon's last page check of this index (:func:`bot.index_rescue.check_pages`,
    once a day): its result and time, or ``(NOT_CHECKED, None)`` when this file has
    not been checked yet (a new or rebuilt index, or an older daemon). Reading every
    page here took 41 s for the 640 MB ``bench search`` store (session 27)."""
    row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (PAGE_CHECK_KEY,)).fetchone()
    try:
        record = json.loads(row[0]) if row else {}
        return str(record["result"]), str(record["at"])
    except (ValueError, KeyError, TypeError):
        return NOT_CHECKED, None


def _read_only_directory(path: Path) -> bool:
    """Whether ``path`` refuses new files: a read-only file system or permissions (root
    passes the latter, never the former: access(2) answers EROFS to root too)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY) or not os.access(path, os.W_OK)
    except OSError:
        return False


def fts_integrity(index_path: Path) -> str:
    """FTS5 ``integrity-check`` of ``turns_fts`` and of ``notes_fts`` (migration 10; an
    older index has none): "ok", "read-only" or the error, naming the table."""
    # rank=1 also compares an external-content index with its content table (`turns`,
    # `notes`). It is spelled as an INSERT but changes nothing; it needs a writable
    # connection.
    try:
        conn = select_driver().module.connect(str(index_path), timeout=10.0)
    except Exception as exc:  # sqlite3 and pysqlite3 raise their own classes
        return str(exc)
    table = "turns_fts"
    try:
        conn.execute("PRAGMA busy_timeout=10000")
        tables = ["turns_fts"] + [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE name = 'notes_fts'")
        ]
        for table in tables:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
    except Exception as exc:
        msg = str(exc)
        if (
            "readonly" in msg.replace(" ", "").lower()
            or disk_space(index_path.parent)["full"]
            or _read_only_directory(index_path.parent)
        ):
            # a full disk cannot take the -shm file it needs either; nor a read-only
            # mount ("unable to open database file": a healthy read-only copy of a
            # store was called INCONSISTENT, exit 1)
            return "read-only"
        return f"{table}: {msg}"
    finally:
        conn.close()
    return "ok"
