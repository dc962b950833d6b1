"""When the index's pages are checked: once a day at most, not at every start.

:func:`bot.index_rescue.check_pages` reads the whole of ``conversations.db``. At every
start that cost the 10,000-conversation ``bench search`` store (640 MB) 41 s of reading
and 3.6 s of CPU on this 2-core machine, and a 100,000-conversation one ten times that,
competing with the searches and replies of the minutes after a restart; a restart a day
(an upgrade, a config change, SIGHUP's cousins) paid it each time. Damage is rare and the
JSONL transcripts rebuild the index whatever is found, so a check a day finds it soon
enough: the time of the last complete check is kept in ``state.db`` (the ``index`` row of
``channel_cursors``), so a restart does not start the day over. A daemon that runs for
weeks checks once a day while it runs. The result is kept in the index itself
(:func:`bot.index_rescue.check_pages`), where ``my-agent status`` reads it rather than
reading every page again (``--pages`` does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from bot.index_rescue import PAGES_DAMAGED, check_pages

log = logging.getLogger("my_agent.index")

CHECK_INTERVAL = 86_400.0  # seconds between two checks of every page
CURSOR = ("index", "page_check")  # (channel, key) of the last check's time in state.db


class Cursors(Protocol):
    """Where the last check's time is kept (the router's channel cursors)."""

    async def get_cursor(self, channel: str, key: str) -> str | None: ...

    async def set_cursor(self, channel: str, key: str, value: str) -> None: ...


async def page_checks(
    db: Any,
    cursors: Cursors,
    *,
    interval: float = CHECK_INTERVAL,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    check: Callable[[Any], Awaitable[str]] = check_pages,
) -> None:
    """Check ``db``'s pages whenever ``interval`` has passed since the last check (at
    once when none is recorded, or the record is unreadable or in the future), until
    damage is found: reported by the check, it is the next start's to rebuild."""
    while True:
        last = _recorded(await cursors.get_cursor(*CURSOR), clock())
        wait = 0.0 if last is None else last + interval - clock()
        if wait > 0:
            log.debug("next check of the index's pages in %.0f s", wait)
            await sleep(wait)
        result = await check(db)
        # whole seconds, rounded down: rounded to the nearest, the time could be up to
        # half a second ahead of the clock, read back as "in the future" (_recorded) and
        # so checked again at once (a small index some 17 times in a row at a start)
        await cursors.set_cursor(*CURSOR, str(int(clock())))
        if result.startswith(PAGES_DAMAGED):
            return


def _recorded(value: str | None, now: float) -> float | None:
    """The last check's time as stored; None when there is none or it cannot be right
    (a clock set back must not put the next check off for years)."""
    try:
        last = float(value) if value is not None else None
    except ValueError:
        return None
    return last if last is not None and 0.0 <= last <= now else None
