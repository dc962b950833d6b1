"""Another instance polling with the bot token (``getUpdates`` answered 409), told.

Telegram serves one ``getUpdates`` at a time per token: a second instance (a copy of
the daemon left running on another machine, a test run with the production token)
makes each one's long poll end the other's with 409 "terminated by other getUpdates
request". The updates go to whichever asked last, so some of the owner's messages reach
the other instance and never this one. Retrying cannot fix it, and before session 25 it
was only a warning per retry. Now, from the :data:`TELL_AFTER`-th conflict (one or two
are a restart overlapping the last run's poll), the owner is told through
:meth:`bot.channel.ChannelHost.alert_owner` (key :data:`CONFLICT_ALERT`, kept for
``my-agent status``), and it is cleared once polling has gone :data:`CLEAR_AFTER`
seconds without one: the two instances' polls interleave, so a poll that succeeds in
between says nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bot.channel import ChannelHost
from bot.channel_alerts import alert_cursor

log = logging.getLogger("my_agent.telegram")

CONFLICT_ALERT = "conflict"
TELL_AFTER = 3
CLEAR_AFTER = 600.0
CONFLICT_PROBLEM = (
    "another program polls Telegram with this bot token (getUpdates: 409 Conflict): "
    "messages to the bot may reach it instead; stop it, or give it another token"
)


def is_other_poller(message: str) -> bool:
    """Whether a 409's ``message`` is another ``getUpdates`` (not a webhook set)."""
    return "webhook" not in message.lower()


class PollConflicts:
    """The conflicts of one channel's polling; ``clock`` is injectable for tests."""

    def __init__(self, channel: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.channel = channel
        self.clock = clock
        self.count = 0
        self.last: float | None = None  # when the last conflict came (the clock's value)
        self.problem: str | None = None
        self._kept = False  # told (this run or the last): cleared once it is over

    async def load(self, host: ChannelHost) -> None:
        """Read whether the last run left the problem kept: if so, it is taken to have
        been seen just now (cleared at the first poll, then told again at once, a daemon
        restarted in a loop told the owner at every start)."""
        kept = await host.get_cursor(self.channel, alert_cursor(CONFLICT_ALERT))
        self._kept = "problem" in (kept or "")
        if self._kept:
            self.last = self.clock()

    async def conflict(self, host: ChannelHost, message: str) -> None:
        """``getUpdates`` was answered 409 because another instance polls."""
        self.count += 1
        self.last = self.clock()
        if self.count < TELL_AFTER:
            log.warning("Telegram polling: %s; retrying", message)
            return
        if self.problem is None:
            self.problem = CONFLICT_PROBLEM
            log.error("%s (%s)", self.problem, message)
        else:
            log.debug("Telegram polling: %s", message)
        self._kept = True
        await host.alert_owner(self.channel, CONFLICT_ALERT, self.problem)

    async def polled(self, host: ChannelHost) -> None:
        """A poll succeeded: once none has conflicted for :data:`CLEAR_AFTER`, over."""
        if self.last is not None and self.clock() - self.last < CLEAR_AFTER:
            return
        self.count, self.last = 0, None
        if self.problem is not None:
            log.info("no other program polls Telegram with this bot token any more")
            self.problem = None
        if self._kept:
            self._kept = False
            await host.alert_owner(self.channel, CONFLICT_ALERT, None)
