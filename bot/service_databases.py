"""The services' two databases, opened: conversations.db (the index) and state.db.

A failure to open either is a :class:`DatabaseOpenError` (exit 74) whose message names
the file and what can be done: the index is rebuilt from the transcripts, state.db (the
outbox, channel cursors) is not derived from them. For the daemon a corrupt index is an
:class:`IndexCorrupt`, which :func:`bot.services.open_services` answers by setting it
aside and starting again (:mod:`bot.index_rescue`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from bot.config import AppConfig
from bot.db import Database, SchemaTooNew, SyncConn
from bot.ftsmerge import open_index_database
from bot.index_rescue import (
    QUICK_CHECK_MAX,
    DamagedPages,
    StateLost,
    check_state_file,
    is_corruption,
    is_lock_contention,
    is_storage_refusal,
    quick_check_text,
)
from bot.schema import STATE_MIGRATIONS
from bot.state_new import born_at, mark_born, mark_new

log = logging.getLogger("my_agent.services")


LOCKED_REMEDY = (
    "another process holds it locked (a backup, an sqlite3 shell?): let it finish or "
    "close it; the file itself is fine"
)


# What can be done about a state.db that cannot be used as it is
STATE_REMEDY = (
    "it holds the outbox and channel cursors: restore it from a backup, or move it aside "
    "to start with an empty one"
)


# What an index from a newer my-agent's refusal adds (`my-agent status` says it too)
REBUILD_NEWER_INDEX = "; or rebuild it for this version from the transcripts: my-agent reindex"


class DatabaseOpenError(Exception):
    """conversations.db or state.db cannot be opened or migrated (exit 74)."""


class IndexCorrupt(DatabaseOpenError):
    """The daemon's recovery found conversations.db damaged (set aside and rebuilt)."""


async def open_databases(
    config: AppConfig, exclusive: bool, read_only: bool = False
) -> tuple[Database, Database]:
    """conversations.db and state.db, in that order; neither stays open on an error.
    ``read_only``: each read as it is (a reading command on a full disk)."""
    opened: list[Database] = []
    path = config.index_path
    try:
        index_db = await open_index(config, exclusive, read_only)
        opened.append(index_db)
        path = config.state_path
        state = await _open_state(config, check=exclusive, read_only=read_only)
        opened.append(state)
    except IndexCorrupt:
        await close_all(opened)
        raise
    except Exception as exc:
        await close_all(opened)
        raise open_error(config, path, exc) from exc
    return index_db, state


async def check_state(config: AppConfig) -> None:
    """Open state.db (migrated, as the services open it) and close it again; raises the
    :class:`DatabaseOpenError` :func:`open_databases` would. ``my-agent reindex`` asks
    before it deletes the index: it deleted it first, then the services refused a
    state.db from a newer version or damaged (exit 74, "the file is left untouched"),
    and the index, its vectors and page checks were gone all the same (before session
    39)."""
    try:
        state = await _open_state(config, check=False)
    except Exception as exc:
        raise open_error(config, config.state_path, exc) from exc
    await close_all([state])


async def _open_state(config: AppConfig, check: bool, read_only: bool = False) -> Database:
    """state.db, migrated; ``check`` (the daemon): every page read once by SQLite's
    quick check, and damage found raises :class:`DamagedPages` (exit 74, as any state.db
    the open refuses: "restore it from a backup, or move it aside").

    Opening reads a few pages only: damage elsewhere (a copy whose WAL did not match its
    database, a bad sector in the outbox) was met by the first query to reach it, at the
    daemon's start an exception that ended it as an internal error (exit 70), which
    systemd restarted into the same error (before session 40). state.db is small: the
    check takes 0.1-0.2 s for 100,000 outbox rows (160 MB) in the page cache (read from
    the disk, as fast as the disk reads the file). A one-shot command skips it: it rarely
    reads state.db, and damage its query meets is named there (:func:`state_damage`)."""
    made_new = check_state_file(config.state_path, config.conversations_dir, config.external_dir)
    state = await Database.open(
        config.state_path, STATE_MIGRATIONS, synchronous="FULL", read_only=read_only
    )
    try:
        if made_new:  # the replies it may have lost are named (bot/state_new.py)
            await state.run(mark_new)
        # What an empty outbox owes is written after it (bot/resume.py). Read first: once
        # marked, an open (every command's) takes no write transaction for it.
        if not read_only and await state.run(born_at, write=False) is None:
            await state.run(mark_born)
        found = await state.run(_quick_check, write=False) if check else ["ok"]
    except BaseException:
        await close_all([state])
        raise
    if found != ["ok"]:
        await close_all([state])
        raise DamagedPages(quick_check_text(found))
    return state


def _quick_check(conn: SyncConn) -> list[str]:
    # A page too damaged to walk is an error, not a row: a finding all the same (not
    # "damage noticed while running", which Database.run would log of it)
    try:
        return [str(row[0]) for row in conn.execute(f"PRAGMA quick_check({QUICK_CHECK_MAX})")]
    except Exception as exc:
        if not is_corruption(exc):
            raise
        return [str(exc)]


def state_damage(state: Database, exc: BaseException) -> DatabaseOpenError | None:
    """The error (exit 74) for ``exc``, raised by a query that met damage in state.db
    (``state`` has recorded it), or None when ``exc`` is something else. A damaged
    outbox page met after the open ended the daemon as an internal error (exit 70, a
    bug's exit naming no file) before session 40; now as when the open refuses it."""
    if state.damage is None or not is_corruption(exc):
        return None
    return DatabaseOpenError(f"{state.path} is damaged ({exc}); {STATE_REMEDY}")


def open_error(config: AppConfig, path: Path, exc: Exception) -> DatabaseOpenError:
    """The error for ``path`` (conversations.db or state.db) refusing to open with
    ``exc``: it names the file and what can be done."""
    if isinstance(exc, (StateLost, SchemaTooNew)):  # the message says what to do
        also = (
            REBUILD_NEWER_INDEX
            if isinstance(exc, SchemaTooNew) and path == config.index_path
            else ""
        )
        return DatabaseOpenError(f"{exc}{also}")
    # Name the file and what can be done: the index is rebuilt from the transcripts;
    # state.db (outbox, channel cursors) is not derived from them.
    remedy = (
        "the disk refuses writes (full, read-only or failing): free space or repair "
        "it; the file itself may be fine"
        if is_storage_refusal(exc)
        # not "move it aside": that would throw away a good outbox for a lock
        else LOCKED_REMEDY
        if is_lock_contention(exc)
        else "it is rebuilt from the transcripts: move it aside (or run my-agent reindex)"
        if path == config.index_path
        else STATE_REMEDY
    )
    return DatabaseOpenError(f"cannot open {path}: {exc}; {remedy}")


async def open_index(config: AppConfig, exclusive: bool, read_only: bool = False) -> Database:
    """conversations.db; for the daemon (``exclusive``) a corrupt one raises
    :class:`IndexCorrupt`, which :func:`bot.services.open_services` answers by setting it
    aside and starting again (recovery rebuilds it from the transcripts,
    :mod:`bot.index_rescue`)."""
    try:
        return await open_index_database(config.index_path, read_only=read_only)
    except Exception as exc:
        if exclusive and is_corruption(exc):
            raise IndexCorrupt(f"{config.index_path} is corrupt: {exc}") from exc
        raise


async def close_all(databases: list[Database]) -> None:
    """Close ``databases``, logging (not raising) a failure: their threads would
    otherwise keep the process alive."""
    for db in databases:
        try:
            await db.close()
        except Exception:
            log.exception("closing %s failed", db.path)
