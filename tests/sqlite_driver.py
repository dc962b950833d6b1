"""The sqlite3 module the product uses (:func:`bot.sqlite_conn.select_driver`), for tests
that open the product's databases themselves.

Where the standard module cannot load extensions the product runs on ``pysqlite3``, a
second copy of SQLite in the same process. Two copies on one database file do not see
each other's POSIX locks or their shared-memory mapping of the WAL index: a test reading
``state.db`` with the standard module while the daemon wrote it could break the daemon's
locks, and when its connection closed and cut the ``-shm`` file the daemon's thread died
of SIGBUS ("Fatal Python error: Bus error" in a transaction, tests/channels/telegram).
"""

from __future__ import annotations

from bot.sqlite_conn import select_driver

sqlite3 = select_driver().module

__all__ = ["sqlite3"]
