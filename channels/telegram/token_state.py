"""Whether Telegram accepts the bot token: a refusal (401) said once, kept, cleared.

A token refused is wrong or revoked: retrying sooner cannot help, so it is asked about
again only every :data:`TOKEN_REFUSED_RETRY` seconds (a token restored with BotFather
comes back without a restart). The refusal is kept with the channel's cursors (key
``token``), so that ``my-agent status`` names it while the daemon is stopped, and is
cleared once Telegram accepts the token, in this run or a later one.
"""

from __future__ import annotations

import json
import logging

from bot.channel import ChannelHost

log = logging.getLogger("my_agent.telegram")

# A token Telegram refused (401) is asked about again this rarely: retrying sooner cannot
# help, but a token revoked and restored with BotFather comes back without a restart.
TOKEN_REFUSED_RETRY = 300.0
TOKEN_REFUSED = (
    "Telegram refused the bot token (401 Unauthorized): set a valid TELEGRAM_BOT_TOKEN "
    "(channels.telegram.token) from BotFather; asked again every {every:g}s"
)


class TokenState:
    """The token's standing with Telegram for one channel (``channel``: its cursor's
    channel name); :attr:`refused` is the problem line while Telegram refuses it."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.refused: str | None = None
        self.retry_every = TOKEN_REFUSED_RETRY
        self.host: ChannelHost | None = None
        self._kept = False  # a refusal kept with the cursors, to clear once accepted

    async def load(self, host: ChannelHost) -> None:
        """Read whether a refusal was kept (by this run or the last)."""
        self.host = host
        self._kept = "problem" in (await host.get_cursor(self.channel, "token") or "")

    async def accept(self) -> None:
        """Telegram accepted the token: said once if it had refused it, the kept refusal
        cleared."""
        if self.refused is not None:
            self.refused = None
            log.info("Telegram accepts the bot token again")
        if self._kept:  # refused before (this run or the last): said no more
            await self._keep()

    async def refuse(self) -> float:
        """Telegram said 401: the token is wrong or revoked. Said once, as an ERROR naming
        the key (before: a warning every few seconds, forever, naming neither the key nor
        that retrying could not help); returns when to ask again (:attr:`retry_every`)."""
        if self.refused is None:
            self.refused = TOKEN_REFUSED.format(every=self.retry_every)
            log.error("%s", self.refused)
            await self._keep()
        else:
            log.debug("Telegram still refuses the bot token")
        return self.retry_every

    async def _keep(self) -> None:
        """Keep the refusal with the cursors: ``my-agent status`` names it while the
        daemon is stopped, and in its /readyz line while it runs."""
        if self.host is None:
            return
        value = {"problem": self.refused} if self.refused else {}
        try:
            await self.host.set_cursor(self.channel, "token", json.dumps(value))
        except Exception as exc:  # storage failing: the log and /status still say it
            log.warning("cannot keep the Telegram token's state: %s", exc)
            return
        self._kept = bool(self.refused)
