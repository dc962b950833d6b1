"""What ``my-agent status`` reads from the databases, with or without the daemon.

Kept apart from the report (:mod:`bot.healthcheck`) so that each read can be used where
the report is put together, whichever module that is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from bot.db import select_driver
from bot.sqlite_conn import newer_schema


def connect_readonly(path: Path) -> Any:
    """A read-only connection to the SQLite database at ``path``.

    A closed WAL database (its ``-wal`` gone, as a clean stop leaves it) still needs its
    ``-shm`` file created to be read in ``mode=ro``, which a full disk refuses: before
    session 15 ``my-agent status`` exited 74 there and reported nothing. With no ``-wal``
    left, the main file is the whole database, so it is read as ``immutable`` instead,
    which needs no ``-shm``. With a ``-wal`` left the error stands (reading the main file
    alone would report an older state as the current one).
    """
    drv = select_driver()
    conn = drv.module.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)
    try:
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the WAL index
        return conn
    except Exception:
        conn.close()
        if _wal_left(path):
            raise
    conn = drv.module.connect(f"file:{path}?immutable=1", uri=True, timeout=10.0)
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return conn


def schema_too_new(path: Path, migrations: Sequence[Any]) -> str | None:
    """The refusal every command and the daemon give for the database at ``path`` when a
    newer my-agent wrote it (:func:`bot.sqlite_conn.newer_schema`), else None (also when
    it cannot be read: the caller's own read says why). ``status`` said nothing of it,
    and called such an index consistent, while the daemon exited 74 in a loop (before
    session 39)."""
    try:
        conn = connect_readonly(path)
    except Exception:  # sqlite3 and pysqlite3 raise their own classes
        return None
    try:
        return newer_schema(conn, migrations)
    except Exception:
        return None
    finally:
        conn.close()


def _wal_left(path: Path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False


def stored_channel_problems(state_path: Path, channels: Collection[str] | None = None) -> list[str]:
    """The problems channels keep with their cursors in ``state.db`` (a JSON value with a
    ``problem`` line, :meth:`bot.channel.ChannelHost.set_cursor`): what the daemon's
    status line says while it runs (a mail the server would not hand over), for a
    report made while it does not. ``channels``: only theirs (the channels enabled: a
    refusal kept by a channel turned off since is no problem of the daemon's)."""
    conn = connect_readonly(state_path)
    try:
        rows = conn.execute(
            "SELECT channel, value FROM channel_cursors WHERE value LIKE '{%' ORDER BY channel, key"
        ).fetchall()
    finally:
        conn.close()
    out = []
    for channel, value in rows:
        try:
            problem = json.loads(value).get("problem")
        except (ValueError, AttributeError):
            continue
        if isinstance(problem, str) and problem and (channels is None or channel in channels):
            out.append(f"{channel}: {problem}")
    return out
