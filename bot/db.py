"""SQLite access for the daemon: connections on their own threads and batched writes.

Driver selection, extension loading, pragmas and numbered migrations are in
:mod:`bot.sqlite_conn` (re-exported here, where the rest of the code imports them);
opening a file's writer, reader and checkpointer in :mod:`bot.db_connections`.

Connections are wrapped in :class:`aiosqlite.Connection` so every statement runs on the
connection's own thread. A unit of work (one ingest batch, one migration) runs there as a
single function through :meth:`Database.run`, which is one thread hop instead of one per
statement and keeps each transaction atomic with respect to other coroutines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from bot.db_connections import open_connections
from bot.index_rescue import is_corruption
from bot.sqlite_conn import (
    WAL_SIZE_LIMIT,
    Driver,
    Migration,
    MigrationFailed,
    SchemaTooNew,
    SyncConn,
    apply_migrations,
    connect_sync,
    in_transaction,
    select_driver,
)
from bot.walcheckpoint import WalCheckpointer
from bot.write_units import AfterWrite, Unit, Unsynced, _resolve_batch, _transaction

__all__ = [
    "WAL_SIZE_LIMIT",
    "AfterWrite",
    "Database",
    "Driver",
    "Migration",
    "MigrationFailed",
    "SchemaTooNew",
    "SyncConn",
    "Unsynced",
    "apply_migrations",
    "connect_sync",
    "in_transaction",
    "select_driver",
]

log = logging.getLogger("my_agent.db")

T = TypeVar("T")
CHAINED = object()


class Database:
    """An async SQLite connection (aiosqlite) with atomic units of work."""

    def __init__(
        self,
        path: Path,
        conn: aiosqlite.Connection,
        driver: Driver,
        reader: aiosqlite.Connection | None = None,
        checkpointer: WalCheckpointer | None = None,
        synchronous: str = "NORMAL",
        idle_work: Callable[[SyncConn], bool] | None = None,
    ) -> None:
        self.path = path
        # the writer's level; an all-Unsynced batch drops FULL to NORMAL for its commit
        self.synchronous = synchronous.upper()
        self._level = self.synchronous  # the level the writer connection has now
        self.checkpointer = checkpointer
        self._conn = conn
        # Reads run on their own connection (and thread): WAL lets them proceed while the
        # writer commits, and sqlite releases the GIL while it works.
        self._reader = reader or conn
        self.driver = driver
        # Units of work waiting for the writer thread (fed from the loop and from other
        # threads, e.g. a transcript append handing over its index update).
        self._pending: list[Unit] = []
        self._lock = threading.Lock()
        self._draining = False
        # Work for the writer's idle time (bot.ftsmerge): after a commit, one bounded
        # transaction per call while no unit of work waits, until it reports none left.
        self.idle_work = idle_work
        self._idle_due = False
        # The first "database disk image is malformed" a unit of work met while running
        # (None: none yet), and who is told of it, once (bot/services.py).
        self.damage: str | None = None
        self.on_damage: Callable[[BaseException], None] | None = None

    @classmethod
    async def open(
        cls,
        path: Path,
        migrations: Sequence[Migration] = (),
        driver: Driver | None = None,
        synchronous: str = "NORMAL",
        idle_work: Callable[[SyncConn], bool] | None = None,
        read_only: bool = False,
    ) -> Database:
        """Open ``path`` (migrated) with a writer, a reader and a WAL checkpointer.

        ``idle_work(conn)``: a bounded step of background maintenance the writer thread
        runs in a transaction of its own whenever a commit has written and no unit of
        work is waiting; it returns True while more remains (:mod:`bot.ftsmerge`).
        ``read_only`` (a reading command on a full disk): the file read as it is, every
        write failing with SQLITE_READONLY (:func:`bot.sqlite_conn.read_only_uri`).
        """
        drv = driver or select_driver()
        conn, reader, checkpointer = await open_connections(
            path, migrations, drv, synchronous, read_only
        )
        return cls(path, conn, drv, reader, checkpointer, synchronous, idle_work)

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
        try:
            if not write:
                reader = self._reader
                return await reader._execute(fn, reader._conn)  # type: ignore[no-any-return]
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            if isinstance(fn, AfterWrite):
                self.chain(fn, future)
            else:
                self.submit(fn, future)
            return await future  # type: ignore[no-any-return]
        except Exception as exc:
            if self.damage is None and is_corruption(exc):
                self.report_damage(exc)
            raise

    def report_damage(self, exc: BaseException) -> None:
        """Record that the file is damaged (``exc`` says how), log it and tell
        ``on_damage``: a unit of work that met it, or the page check after the daemon's
        start (:func:`bot.index_rescue.check_pages`)."""
        # Damage found while running was noticed only at the next start: each read
        # failing meanwhile ended in a traceback (the offline brain's), the owner not told.
        self.damage = str(exc)
        log.error("%s is damaged (%s): noticed while running", self.path, exc)
        if self.on_damage is not None:
            self.on_damage(exc)

    def chain(
        self,
        unit: AfterWrite,
        future: asyncio.Future[Any],
        then: Callable[[bool, Any], Any] | None = None,
    ) -> None:
        """Queue ``unit`` once its write is done (see :meth:`submit` for ``then``).

        The thread that finishes the write queues the unit: the loop is not woken up in
        between. A failed write resolves ``future`` with its exception.
        """
        after = unit.after
        assert after is not None, "an AfterWrite is queued once"
        after.add_done_callback(lambda done: self._after(done, unit, future, then))

    def _after(
        self,
        done: concurrent.futures.Future[Any],
        unit: AfterWrite,
        future: asyncio.Future[Any],
        then: Callable[[bool, Any], Any] | None,
    ) -> None:
        # On the thread that finished the write (or the loop's, if it was done already).
        if done.cancelled() or done.exception() is not None:
            exc = done.exception() if not done.cancelled() else RuntimeError("write cancelled")
            unit.after = None  # no cycle through the future's callbacks (AfterWrite.took)
            _resolve_batch([(future, False, exc)])
        else:
            unit.took(done)
            self.submit(unit, future, then)

    def submit(
        self,
        fn: Callable[[SyncConn], Any],
        future: asyncio.Future[Any],
        then: Callable[[bool, Any], Any] | None = None,
    ) -> None:
        """Queue ``fn(conn)`` for the next group commit; callable from any thread.

        Without ``then`` the outcome resolves ``future``. With ``then``, ``then(ok,
        value)`` runs on the writer thread after the commit and returns what ``future``
        gets, or :data:`CHAINED` when it handed ``future`` on (e.g. to another database)
        so a pipeline of writes costs the event loop a single wake-up.
        """
        if not self._conn._running:  # closed: its thread would never run the unit
            _resolve_batch([(future, False, ValueError("the database is closed"))])
            return
        with self._lock:
            self._pending.append((fn, future, then))
            if self._draining:
                return
            self._draining = True
        self._conn._tx.put_nowait((None, self._drain))

    def _drain(self) -> None:
        """Writer thread: commit pending units in batches until none is left."""
        raw = self._conn._conn
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch and not self._idle_due:
                    self._draining = False
                    return
            if not batch:
                self._run_idle_work(raw)
                continue
            level = self.synchronous
            if level == "FULL" and all(isinstance(unit[0], Unsynced) for unit in batch):
                level = "NORMAL"
            try:
                if level != self._level:  # set before BEGIN: it cannot change inside
                    raw.execute(f"PRAGMA synchronous={level}")
                    self._level = level
                outcomes = _transaction(raw, batch)
            except BaseException as exc:
                outcomes = [(False, exc)] * len(batch)
            else:
                if self.checkpointer is not None:  # a no-op where commits are synced
                    self.checkpointer.note_commit()
                self._idle_due = self.idle_work is not None
            resolutions: list[tuple[asyncio.Future[Any], bool, Any]] = []
            for (_, future, then), (ok, value) in zip(batch, outcomes, strict=True):
                if then is not None:
                    try:
                        result = then(ok, value)
                    except BaseException as exc:
                        resolutions.append((future, False, exc))
                        continue
                    if result is not CHAINED:
                        resolutions.append((future, True, result))
                else:
                    resolutions.append((future, ok, value))
            _resolve_batch(resolutions)

    def _run_idle_work(self, raw: SyncConn) -> None:
        """Writer thread, nothing pending: one step of :attr:`idle_work`. A failure is
        logged and the work waits for the next commit (units of work never see it)."""
        work = self.idle_work  # None once closing (close() does not wait for it)
        more = False
        try:
            more = work is not None and bool(in_transaction(raw, work))
        except Exception:
            log.exception(
                "idle work on %s failed; tried again after the next commit", self.path.name
            )
        if more and self.checkpointer is not None:
            self.checkpointer.note_commit()
        self._idle_due = more and self.idle_work is not None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self.run(lambda c: c.execute(sql, params).fetchall(), write=False)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return await self.run(lambda c: c.execute(sql, params).fetchone(), write=False)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        await self.run(lambda c: c.execute(sql, params))

    async def close(self) -> None:
        # Idle work stops after the step in progress: the writer's queue (and the close
        # queued behind it) does not wait for a long merge to finish; it resumes after
        # the next commit once the database is opened again.
        self.idle_work = None
        if self.checkpointer is not None:
            self.checkpointer.stop()
            while self.checkpointer.running:  # a checkpoint in progress finishes first
                await asyncio.sleep(0.005)
        if self._reader is not self._conn:
            await self._reader.close()
        await self._conn.close()
