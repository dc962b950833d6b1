"""Problems a channel reports that will not fix themselves, told to the owner.

A channel that cannot connect for a reason only the owner can fix (an IMAP login the
server refuses, TLS settings that do not fit the server, a certificate not trusted) used
to retry with backoff and log a warning each time: nothing told the owner, who learnt
of it when they noticed the assistant had stopped answering mail. A channel now reports
such a problem through :meth:`bot.channel.ChannelHost.alert_owner`, implemented here for
the router: the owner is told on the escalation channel, at most once per
:data:`ALERT_INTERVAL` for as long as it lasts (claimed in ``state.db`` by
:func:`bot.owner_notices.notice_due`, so that a daemon restarted in a loop does not
repeat it), and the line is kept with the channel's cursors for ``my-agent status``.
A problem that stops the channel sending as well (Telegram refusing the bot token) is
told on another channel with the owner's address, else on the dashboard only
(:meth:`bot.services.Services.alert_owner`, the channel's ``sending_blocked``): sent
through the channel itself, it waited for the very fix it was asking for.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from bot import redaction
from bot.owner_notices import forget_notice, notice_due
from bot.tasks import spawn

if TYPE_CHECKING:
    from bot.channel import ChannelHost
    from bot.services import Services

log = logging.getLogger("my_agent.channel_alerts")

# A problem that lasts is told again this often (a weekend of a wrong password: a
# reminder a few times a day, not one per reconnect).
ALERT_INTERVAL = 6 * 3600.0


def alert_text(channel: str, problem: str) -> str:
    """What the owner is told about ``problem`` on ``channel``."""
    return (
        f"The {channel} channel has a problem that will not fix itself: {problem}. "
        "It keeps retrying, and works again once the settings are right."
    )


class ChannelAlerts:
    """The router's side of :meth:`bot.channel.ChannelHost.alert_owner`; ``cursors`` is
    the host whose channel cursors keep the problem lines."""

    def __init__(
        self, services: Services, cursors: ChannelHost, interval: float = ALERT_INTERVAL
    ) -> None:
        self.s = services
        self.cursors = cursors
        self.interval = interval

    async def report(self, channel: str, key: str, problem: str | None) -> None:
        """Keep (or clear) ``problem`` and tell the owner when due; never raises."""
        try:
            if problem is None:
                await self._clear(channel, key)
            else:
                await self._raise(channel, key, problem)
        except Exception:  # storage failing: the log and the status line still say it
            log.exception("cannot keep the %s problem %s", channel, key)

    async def _raise(self, channel: str, key: str, problem: str) -> None:
        problem = redaction.mask(problem)  # kept in state.db, and told to the owner
        value = json.dumps({"problem": problem})
        if await self.cursors.get_cursor(channel, alert_cursor(key)) != value:
            await self.cursors.set_cursor(channel, alert_cursor(key), value)
        if await notice_due(self.s.state, _notice_key(channel, key), self.interval):
            log.warning("telling the owner: %s: %s", channel, problem)
            # Sent by the escalation channel, maybe this one (its SMTP side): the
            # reporting channel's reconnect loop does not wait for an SMTP timeout.
            # A channel that cannot send (a refused Telegram token) is passed over
            # by Services.alert_owner: there, the alert waited for the problem's fix.
            spawn(self.s.alert_owner(alert_text(channel, problem)), name=f"alert-{channel}")

    async def _clear(self, channel: str, key: str) -> None:
        kept = await self.cursors.get_cursor(channel, alert_cursor(key))
        if kept is None or "problem" not in kept:
            return
        log.info("%s: solved: %s", channel, json.loads(kept).get("problem"))
        await self.cursors.set_cursor(channel, alert_cursor(key), "{}")
        await forget_notice(self.s.state, _notice_key(channel, key))


def alert_cursor(key: str) -> str:
    """The channel cursor that keeps the problem ``key`` (for ``my-agent status``)."""
    return f"alert:{key}"


def _notice_key(channel: str, key: str) -> str:
    return f"channel_alert:{channel}:{key}"
