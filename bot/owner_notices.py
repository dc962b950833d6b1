"""Notices the owner gets at most once an interval, across restarts.

Some notices say that a budget is spent (:mod:`bot.party_budget`'s known contacts,
:mod:`bot.party_escalations`'s held escalations): once an hour, not once per message. When
each was last given was kept in memory, per run: a daemon restarted in a crash loop
told the owner again at every start. :func:`notice_due` claims one in ``state.db``
(``owner_notices``, state migration 3), the operational state no reindex rebuilds.
"""

from __future__ import annotations

from bot.db import Database, SyncConn
from bot.events import iso, utcnow
from bot.moments import parse_moment


async def notice_due(state: Database, key: str, interval: float = 3600.0) -> bool:
    """Whether the notice ``key`` may be given now; when it may, it is recorded as
    given (before it goes: a crash in between loses one notice rather than repeating
    it at every start). A last time "in the future" (the clock was set back) does not
    silence it until the clock catches up: it is given, and that time restarts it."""
    now = utcnow()

    def _claim(conn: SyncConn) -> bool:
        row = conn.execute("SELECT told FROM owner_notices WHERE key = ?", (key,)).fetchone()
        # a time that is none (the row edited by hand) is given again, and replaced:
        # before session 42 it raised ValueError at every claim, and the notice (an
        # hourly budget spent) never reached the owner
        told = None if row is None else parse_moment(row[0])
        if told is not None and 0 <= (now - told).total_seconds() < interval:
            return False
        conn.execute(
            "INSERT INTO owner_notices (key, told) VALUES (?, ?)"
            " ON CONFLICT(key) DO UPDATE SET told = excluded.told",
            (key, iso(now)),
        )
        return True

    due: bool = await state.run(_claim)
    return due


async def forget_notice(state: Database, key: str) -> None:
    """Forget when the notice ``key`` was last given: the next one is due at once (the
    problem it was about is solved; when it comes back, that is news)."""
    await state.execute("DELETE FROM owner_notices WHERE key = ?", (key,))
