"""Units of work for :class:`bot.db.Database`'s writer thread: how a batch of them is
committed (one transaction, a savepoint per unit) and how their futures are resolved.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

from bot.sqlite_conn import SyncConn

Unit = tuple[Callable[[SyncConn], Any], "asyncio.Future[Any]", Callable[[bool, Any], Any] | None]


class AfterWrite:
    """A unit of work queued only once a write on another thread is done.

    ``fn(conn, result)`` gets the write's result (e.g. a transcript's new size). The
    write thread queues the unit itself, so the event loop is not woken in between; a
    failed write fails the unit (and :meth:`Database.run`) with the write's exception.
    """

    __slots__ = ("_result", "after", "fn")

    def __init__(
        self, after: concurrent.futures.Future[Any], fn: Callable[[SyncConn, Any], Any]
    ) -> None:
        self.after: concurrent.futures.Future[Any] | None = after
        self.fn = fn
        self._result: Any = None

    def took(self, done: concurrent.futures.Future[Any]) -> None:
        """Keep the finished write's result and let go of its future.

        A ``concurrent.futures.Future`` keeps its done-callbacks for good, and the
        callback that queues this unit refers to the unit: without this the future,
        its Condition and lock, the unit and whatever ``fn`` holds (a conversation
        record, the lines) form a reference cycle per message, which only the cyclic
        garbage collector frees, in pauses of tens of milliseconds under load.
        """
        self._result = done.result()
        self.after = None

    def __call__(self, conn: SyncConn) -> Any:
        if self.after is not None:  # queued without Database.chain
            self.took(self.after)
        return self.fn(conn, self._result)


class Unsynced:
    """A unit of work whose commit need not be synced to disk on its own.

    For a write that is durable elsewhere already and rebuilt from there after a crash:
    the outbox row of a reply, which :meth:`bot.resume.requeue_unsent_replies`
    queues again from the reply's (durable) transcript turn. In a database that syncs
    every commit (``synchronous=FULL``, state.db), a batch made only of such units
    commits with ``NORMAL``: the WAL frames reach the disk with the next synced commit
    or WAL checkpoint (normally within :attr:`bot.walcheckpoint.WalCheckpointer.interval`;
    WAL order means a later synced commit covers every earlier frame, so what is lost in
    a crash is always the newest rows). A batch with any other unit is synced as before.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[SyncConn], Any]) -> None:
        self.fn = fn

    def __call__(self, conn: SyncConn) -> Any:
        return self.fn(conn)


def _transaction(raw: SyncConn, batch: list[Unit]) -> list[tuple[bool, Any]]:
    """One transaction, one SAVEPOINT per unit: a failing unit rolls back alone."""
    outcomes: list[tuple[bool, Any]] = []
    raw.execute("BEGIN IMMEDIATE")
    try:
        for fn, _, _ in batch:
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


def _set(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _resolve_all(resolutions: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in resolutions:
        _set(future, ok, value)


def _resolve_batch(resolutions: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """Resolve a batch's futures with one wake-up per event loop (from any thread)."""
    by_loop: dict[Any, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for item in resolutions:
        by_loop.setdefault(item[0].get_loop(), []).append(item)
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve_all, items)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass
