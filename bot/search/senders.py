"""The participant names a query may name: the distinct turn senders, cached.

New turns' senders are added after at most :data:`TTL` seconds, with a read of the new
turns only; every :data:`RESCAN` seconds a full scan forgets senders whose turns are gone
(it reads every turn: 0.4 s at 2,000,000 turns, which a once-a-minute full refresh used
to add to one search).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.db import Database, SyncConn

TTL = 60.0  # seconds before new turns' senders are looked up
RESCAN = 600.0  # seconds between full scans of the senders


@dataclass(frozen=True)
class _Cache:
    names: set[str]
    last_id: int  # turns up to this id are reflected in ``names``
    checked: float
    scanned: float  # last full scan


class Senders:
    """The distinct turn senders of one index, read through :meth:`read`."""

    def __init__(self) -> None:
        self._cache: _Cache | None = None

    async def read(self, db: Database) -> set[str]:
        """The sender names (module docstring for how fresh they are)."""
        now = time.monotonic()
        cache = self._cache
        if cache is not None and now - cache.checked <= TTL:
            return cache.names
        full = cache is None or now - cache.scanned > RESCAN
        last = -(1 << 63) if cache is None or full else cache.last_id

        def _read(conn: SyncConn) -> tuple[int, set[str]]:
            row = conn.execute("SELECT max(id) FROM turns").fetchone()
            top = int(row[0]) if row and row[0] is not None else 0
            names = conn.execute(
                "SELECT DISTINCT sender FROM turns WHERE id > ? AND id <= ?", (last, top)
            ).fetchall()
            return top, {str(r[0]) for r in names if r[0]}

        top, names = await db.run(_read, write=False)
        if full or cache is None:
            self._cache = _Cache(names, top, now, now)
        else:
            self._cache = _Cache(cache.names | names, top, now, cache.scanned)
        return self._cache.names
