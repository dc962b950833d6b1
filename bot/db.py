"""SQLite access: driver selection, extension loading, pragmas and numbered migrations.

Some Python builds cannot load SQLite extensions (``enable_load_extension`` missing). We
use the standard module when it can, ``pysqlite3`` otherwise, and when neither can load
sqlite-vec the index works FTS-only with a logged warning (SPEC.md "SQLite with
extensions").

Connections are wrapped in :class:`aiosqlite.Connection` so every statement runs on the
connection's own thread. A unit of work (one ingest batch, one migration) runs there as a
single function through :meth:`Database.run`, which is one thread hop instead of one per
statement and keeps each transaction atomic with respect to other coroutines.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

log = logging.getLogger("my_agent.db")

T = TypeVar("T")
SyncConn = Any  # sqlite3.Connection or pysqlite3.dbapi2.Connection (same API)
Migration = Callable[[SyncConn], None]


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


def connect_sync(path: Path | str, driver: Driver | None = None) -> SyncConn:
    """Open a connection with WAL, busy_timeout, foreign keys and sqlite-vec if available."""
    drv = driver or select_driver()
    conn = drv.module.connect(
        str(path), timeout=10.0, isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=10000")
    conn.execute("PRAGMA foreign_keys=ON")
    # The index is derived data (rebuildable from transcripts); NORMAL is durable across
    # process crashes in WAL mode. state.db raises this to FULL itself.
    conn.execute("PRAGMA synchronous=NORMAL")
    if drv.vec_available:
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    return conn


def apply_migrations(conn: SyncConn, migrations: Sequence[Migration]) -> int:
    """Apply numbered migrations (index+1 = version) each in its own transaction."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    for number, migration in enumerate(migrations, start=1):
        if number <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            migration(conn)
            conn.execute(f"PRAGMA user_version={number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        log.info("applied migration %d", number)
        current = number
    return int(current)


class Database:
    """An async SQLite connection (aiosqlite) with atomic units of work."""

    def __init__(
        self,
        path: Path,
        conn: aiosqlite.Connection,
        driver: Driver,
        reader: aiosqlite.Connection | None = None,
    ) -> None:
        self.path = path
        self._conn = conn
        # Reads run on their own connection (and thread): WAL lets them proceed while the
        # writer commits, and sqlite releases the GIL while it works.
        self._reader = reader or conn
        self.driver = driver
        self._pending: list[tuple[Callable[[SyncConn], Any], asyncio.Future[Any]]] = []
        self._flusher: asyncio.Future[None] | None = None

    @classmethod
    async def open(
        cls,
        path: Path,
        migrations: Sequence[Migration] = (),
        driver: Driver | None = None,
        synchronous: str = "NORMAL",
    ) -> Database:
        drv = driver or select_driver()
        path.parent.mkdir(parents=True, exist_ok=True)

        def _connector() -> SyncConn:
            conn = connect_sync(path, drv)
            conn.execute(f"PRAGMA synchronous={synchronous}")
            apply_migrations(conn, migrations)
            return conn

        conn = aiosqlite.Connection(_connector, iter_chunk_size=64)
        await conn
        reader = aiosqlite.Connection(lambda: connect_sync(path, drv), iter_chunk_size=64)
        await reader
        return cls(path, conn, drv, reader)

    @property
    def vec_available(self) -> bool:
        return self.driver.vec_available

    async def run(self, fn: Callable[[SyncConn], T], *, write: bool = True) -> T:
        """Run ``fn(conn)`` on the connection thread.

        Writes are group-committed: calls that arrive while a transaction is running are
        run together in the next one, each inside its own SAVEPOINT, so one failing unit
        of work rolls back alone and raises to its caller only. Under concurrent load
        this turns N commits (and N thread hops) into one.
        """
        if not write:
            reader = self._reader
            return await reader._execute(fn, reader._conn)  # type: ignore[no-any-return]

        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((fn, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await future  # type: ignore[no-any-return]

    async def _flush(self) -> None:
        raw = self._conn._conn
        while self._pending:
            batch, self._pending = self._pending, []

            def _tx(
                batch: list[tuple[Callable[[SyncConn], Any], Any]] = batch,
            ) -> list[tuple[bool, Any]]:
                outcomes: list[tuple[bool, Any]] = []
                raw.execute("BEGIN IMMEDIATE")
                try:
                    for fn, _ in batch:
                        raw.execute("SAVEPOINT unit")
                        try:
                            result = fn(raw)
                        except Exception as exc:
                            raw.execute("ROLLBACK TO unit")
                            raw.execute("RELEASE unit")
                            outcomes.append((False, exc))
                            continue
                        raw.execute("RELEASE unit")
                        outcomes.append((True, result))
                    raw.execute("COMMIT")
                except BaseException:
                    if raw.in_transaction:
                        raw.execute("ROLLBACK")
                    raise
                return outcomes

            try:
                outcomes = await self._conn._execute(_tx)
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self.run(lambda c: c.execute(sql, params).fetchall(), write=False)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return await self.run(lambda c: c.execute(sql, params).fetchone(), write=False)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        await self.run(lambda c: c.execute(sql, params))

    async def close(self) -> None:
        if self._reader is not self._conn:
            await self._reader.close()
        await self._conn.close()
