"""Opening a database file: its writer connection (migrated), its reader (memory-mapped)
and its WAL checkpointer, each connection on its own aiosqlite thread.

:meth:`bot.db.Database.open` wraps the three; what runs on them is :mod:`bot.db`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import aiosqlite

from bot.sqlite_conn import Driver, Migration, SyncConn, apply_migrations, connect_sync
from bot.walcheckpoint import WAL_FLUSH_INTERVAL, WalCheckpointer

# address space the reader connection may map (SQLite caps it at its compile-time maximum)
READER_MMAP_BYTES = 1 << 40


async def _connected(conn: aiosqlite.Connection) -> None:
    """Open ``conn``; when that fails (a corrupt file), wait for its thread to stop before
    raising. aiosqlite queues the stop and returns at once; the thread then reported it to
    an event loop that the failing command had closed meanwhile ("Event loop is closed"
    tracebacks after the one-line error)."""
    try:
        await conn
    except BaseException:
        deadline = time.monotonic() + 5
        while conn._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        raise


async def open_connections(
    path: Path,
    migrations: Sequence[Migration],
    drv: Driver,
    synchronous: str,
    read_only: bool = False,
) -> tuple[aiosqlite.Connection, aiosqlite.Connection, WalCheckpointer | None]:
    """The writer (``synchronous``, migrated), the reader and the started checkpointer
    of ``path``; a reader that fails to open closes the writer again. ``read_only`` (a
    reading command on a full disk): both read the file as it is, no checkpointer (a
    migration still owed fails with SQLITE_READONLY)."""
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)

    def _connector() -> SyncConn:
        conn = connect_sync(path, drv, read_only=read_only)
        if not read_only:
            conn.execute(f"PRAGMA synchronous={synchronous}")
            # checkpoints run on their own thread (bot.walcheckpoint), never in a commit
            conn.execute("PRAGMA wal_autocheckpoint=0")
        apply_migrations(conn, migrations)
        return conn

    conn = aiosqlite.Connection(_connector, iter_chunk_size=64)
    await _connected(conn)

    def _reader() -> SyncConn:
        raw = connect_sync(path, drv, read_only=read_only)
        # Searches read scattered pages (FTS doclists, float16 vectors, turn windows):
        # memory-mapped, a page costs a memory read instead of a read() syscall
        # (search p95 at 10,000 conversations 44.7 -> 36.0 ms, docs/search.md). Only
        # the reader maps: writes keep going through the writer's page cache.
        raw.execute(f"PRAGMA mmap_size={READER_MMAP_BYTES}")
        return raw

    reader = aiosqlite.Connection(_reader, iter_chunk_size=64)
    try:
        await _connected(reader)
    except BaseException:
        await conn.close()
        raise
    if read_only:
        return conn, reader, None
    # Commits that are not synced leave their WAL frames to be flushed: a little at a
    # time after commits rather than all at once (bot.walcheckpoint).
    checkpointer = WalCheckpointer(
        lambda: connect_sync(path, drv),
        path.stem,
        wal=path.with_name(path.name + "-wal"),
        flush_interval=WAL_FLUSH_INTERVAL if synchronous.upper() == "NORMAL" else 0.0,
    )
    checkpointer.start()
    return conn, reader, checkpointer
