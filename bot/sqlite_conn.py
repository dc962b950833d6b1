"""SQLite connections: driver selection, extension loading, pragmas and numbered migrations.

Some Python builds cannot load SQLite extensions (``enable_load_extension`` missing). We
use the standard module when it can, ``pysqlite3`` otherwise, and when neither can load
sqlite-vec the index works FTS-only with a logged warning (SPEC.md "SQLite with
extensions"). Every connection gets WAL, ``busy_timeout`` and foreign keys.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bot.walcheckpoint import BUSY_TIMEOUT_MS

log = logging.getLogger("my_agent.db")

T = TypeVar("T")
SyncConn = Any  # sqlite3.Connection or pysqlite3.dbapi2.Connection (same API)
Migration = Callable[[SyncConn], None]


def run_script(conn: SyncConn, script: str) -> None:
    """Run statements one by one: ``executescript`` would COMMIT the migration's
    transaction first and break its atomicity. (Here, not in :mod:`bot.schema`: the
    migration modules that :mod:`bot.schema` imports use it, and importing one of them
    first was a circular import.)"""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


WAL_SIZE_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class Driver:
    """Which sqlite3 module we use and whether it can load sqlite-vec."""

    name: str
    module: Any
    vec_available: bool
    sqlite_version: str
    reason: str = ""


_driver: Driver | None = None


def _try_vec(module: Any) -> tuple[bool, str]:
    try:
        import sqlite_vec
    except ImportError as exc:  # pragma: no cover - dependency missing
        return False, f"sqlite-vec not installed ({exc})"
    conn = module.connect(":memory:")
    try:
        if not hasattr(conn, "enable_load_extension"):
            return False, "this sqlite3 build cannot load extensions"
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute("select vec_version()").fetchone()
        return True, ""
    except Exception as exc:
        return False, f"sqlite-vec failed to load: {exc}"
    finally:
        conn.close()


def select_driver(force: str | None = None) -> Driver:
    """Pick the sqlite3 module: the standard one if it loads sqlite-vec, else pysqlite3.

    ``force`` ("sqlite3", "pysqlite3", "novec") is for tests of the fallbacks.
    """
    global _driver
    if _driver is not None and force is None:
        return _driver
    candidates: list[tuple[str, Any]] = [("sqlite3", sqlite3)]
    try:
        import pysqlite3.dbapi2 as pysqlite3_mod

        candidates.append(("pysqlite3", pysqlite3_mod))
    except ImportError:
        pass
    if force in ("sqlite3", "pysqlite3"):
        candidates = [c for c in candidates if c[0] == force]
    reasons = []
    chosen: Driver | None = None
    if force != "novec":
        for name, module in candidates:
            ok, reason = _try_vec(module)
            if ok:
                chosen = Driver(name, module, True, module.sqlite_version)
                break
            reasons.append(f"{name}: {reason}")
    if chosen is None:
        reason = "; ".join(reasons) or "vector search disabled"
        chosen = Driver("sqlite3", sqlite3, False, sqlite3.sqlite_version, reason)
        log.warning("sqlite-vec unavailable, search degrades to FTS only (%s)", reason)
    if force is None:
        _driver = chosen
    return chosen


def connect_sync(
    path: Path | str, driver: Driver | None = None, read_only: bool = False
) -> SyncConn:
    """Open a connection with WAL, busy_timeout, foreign keys and sqlite-vec if available.
    ``read_only`` (a reading command on a full disk): opened to read the file as it is
    (:func:`read_only_uri`); any write raises SQLITE_READONLY."""
    drv = driver or select_driver()
    target = read_only_uri(Path(path)) if read_only else str(path)
    conn = drv.module.connect(
        target, uri=read_only, timeout=10.0, isolation_level=None, check_same_thread=False
    )
    if not read_only:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    if not read_only:
        # A WAL file left long by a burst is cut back to this when it starts over
        # (bot.walcheckpoint); without it the file keeps its largest size for good.
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        # The index is derived data (rebuildable from transcripts); NORMAL is durable
        # across process crashes in WAL mode. state.db raises this to FULL itself.
        conn.execute("PRAGMA synchronous=NORMAL")
    if drv.vec_available:
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    return conn


def read_only_uri(path: Path) -> str:
    """The URI that reads the database at ``path`` without writing a byte: ``mode=ro``
    while its ``-wal`` or ``-shm`` is there (a daemon runs, or a crash left them: the WAL
    holds part of the database, and its index is there to read it by); with neither (a
    clean stop), ``immutable``: the main file is the whole database, and ``mode=ro``
    would have to create the ``-shm`` file, which a full disk refuses
    (:func:`bot.status_reads.connect_readonly` reads ``my-agent status``'s so too)."""
    uri = path.absolute().as_uri()
    if any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm")):
        return f"{uri}?mode=ro"
    return f"{uri}?immutable=1"


def in_transaction(conn: SyncConn, fn: Callable[[SyncConn], T]) -> T:
    """``fn(conn)`` in a transaction of its own: committed, or rolled back and raised."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


class SchemaTooNew(Exception):
    """The database was written by a newer my-agent (its schema version is past the last
    migration this code knows): opening it would write rows the newer schema does not
    expect, so it is refused untouched."""


class MigrationFailed(Exception):
    """A migration raised: its transaction was rolled back, the database stays at the
    version before it (the cause is chained: a full disk, a locked database...)."""


def _file_name(conn: SyncConn) -> str:
    for _seq, name, file in conn.execute("PRAGMA database_list"):
        if name == "main" and file:
            return str(file)
    return "the database"


def newer_schema(conn: SyncConn, migrations: Sequence[Any]) -> str | None:
    """The refusal (:class:`SchemaTooNew`'s message) of a database written by a newer
    my-agent, its schema version past ``migrations``; None when this version knows it.
    ``my-agent status`` says the same of a file it reads (:mod:`bot.status_reads`)."""
    current = int(conn.execute("PRAGMA user_version").fetchone()[0])
    known = len(migrations)
    if not migrations or current <= known:  # (no migrations: opened as it is, by a tool)
        return None
    return (
        f"{_file_name(conn)} has schema version {current}, newer than this my-agent "
        f"knows ({known}): it was written by a newer version of my-agent. Run that "
        "version again (a downgrade is not supported); the file is left untouched"
    )


def apply_migrations(conn: SyncConn, migrations: Sequence[Migration]) -> int:
    """Apply numbered migrations (index+1 = version) each in its own transaction.

    Raises :class:`SchemaTooNew` for a database from a newer version (a downgrade; not
    checked without migrations, an open of the file as it is) and
    :class:`MigrationFailed` when a step fails, which leaves the previous version.
    """
    newer = newer_schema(conn, migrations)
    if newer is not None:
        raise SchemaTooNew(newer)
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    known = len(migrations)
    # A new file (version 0) is created in one line: its eight steps, logged one by one
    # as for an upgrade, made twelve lines of a first start's or a reindex's output.
    created = current == 0
    step_level = logging.DEBUG if created else logging.INFO
    if current < known and not created:
        # an upgrade of a year's store can take a while: say what is going on
        log.info("%s: schema version %d, migrating to %d", _file_name(conn), current, known)
    for number, migration in enumerate(migrations, start=1):
        if number <= current:
            continue
        started = time.monotonic()

        def _step(
            c: SyncConn, migration: Migration = migration, number: int = number
        ) -> int | None:
            # Read again under the write lock: another process opening the same old file
            # (the daemon and a `search` at once) may have applied it since the read
            # above. It was applied a second time and failed ("table titles already
            # exists"), and the slower process exited 74 (before session 39).
            done = int(c.execute("PRAGMA user_version").fetchone()[0])
            if done >= number:
                return done
            migration(c)
            c.execute(f"PRAGMA user_version={number}")
            return None

        try:
            found = in_transaction(conn, _step)
        except Exception as exc:
            raise MigrationFailed(
                f"migration {number} of {_file_name(conn)} failed ({exc}): it was rolled "
                f"back, the file stays at schema version {current}"
            ) from exc
        if found is not None:
            current = found  # applied by another process meanwhile
            if current > known:  # ... by a newer my-agent: as at the start
                raise SchemaTooNew(newer_schema(conn, migrations) or "newer schema")
            continue
        log.log(
            step_level,
            "applied migration %d of %s (%.1f s)",
            number,
            _file_name(conn),
            time.monotonic() - started,
        )
        current = number
    if created and known:
        log.info("%s: created (schema version %d)", _file_name(conn), known)
    return int(current)
