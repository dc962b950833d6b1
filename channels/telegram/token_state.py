"""Whether Telegram accepts the bot token: a refusal (401) said once, told, cleared.

A token refused is wrong or revoked: retrying sooner cannot help, so it is asked about
again only every :data:`TOKEN_REFUSED_RETRY` seconds (a token restored with BotFather
comes back without a restart). The refusal is reported through
:meth:`bot.channel.ChannelHost.alert_owner` (key :data:`TOKEN_ALERT`): the owner is told
once a period across restarts, on another channel than this one, which cannot send
(:attr:`TokenState.sending_blocked`), or on the dashboard; the line is kept with the
channel's cursors (``alert:token``), so that ``my-agent status`` names it while the
daemon is stopped, and cleared once Telegram accepts the token, in this run or a later
one. Before session 25 it was kept under the cursor ``token`` and the owner was never
told: :meth:`TokenState.load` moves such a kept line to the alert's.
"""

from __future__ import annotations

import asyncio
import logging

from bot.channel import ChannelHost, RetryLater
from bot.channel_alerts import alert_cursor

log = logging.getLogger("my_agent.telegram")

# A token Telegram refused (401) is asked about again this rarely: retrying sooner cannot
# help, but a token revoked and restored with BotFather comes back without a restart.
TOKEN_REFUSED_RETRY = 300.0
TOKEN_REFUSED = (
    "Telegram refused the bot token ({answer}): set a valid TELEGRAM_BOT_TOKEN "
    "(channels.telegram.token) from BotFather; asked again every {every:g}s"
)
UNAUTHORIZED = "401 Unauthorized"
# Telegram's answer to a token of the wrong form; also what a wrong api_base answers
NOT_FOUND = "404 Not Found on getMe: a token of the wrong form, or channels.telegram.api_base"
# A send held by a refused token when the daemon stops: the outbox asks again no sooner
# than this. Sooner, its worker retried it at once, over and over (each an attempt and a
# warning) while the stop drained the replies; much later, a restart with a new token
# would keep the owner's replies waiting.
HELD_RETRY_AFTER_STOP = 60.0
# The refusal's key with the host's alerts (kept as the cursor ``alert:token``), and the
# cursor that kept it before session 25.
TOKEN_ALERT = "token"
LEGACY_CURSOR = "token"


class HeldByRefusedToken(RetryLater):
    """A send held while Telegram refuses the token, given up because the daemon stops:
    the outbox keeps its message for the next start."""


class TokenState:
    """The token's standing with Telegram for one channel (``channel``: its cursor's
    channel name); :attr:`refused` is the problem line while Telegram refuses it."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.refused: str | None = None
        self.retry_every = TOKEN_REFUSED_RETRY
        self.host: ChannelHost | None = None
        self._kept = False  # a refusal kept with the cursors, to clear once accepted
        # Set unless Telegram refuses the token: sends wait for it (see :meth:`held`).
        self.accepted = asyncio.Event()
        self.accepted.set()
        self._held_said = False  # "sends held" said once per refusal

    async def load(self, host: ChannelHost) -> None:
        """Read whether a refusal was kept (by this run or the last); one kept under
        the cursor of before session 25 is moved to the alert's."""
        self.host = host
        kept = await host.get_cursor(self.channel, alert_cursor(TOKEN_ALERT))
        legacy = await host.get_cursor(self.channel, LEGACY_CURSOR)
        if legacy is not None and "problem" in legacy:
            if kept is None or "problem" not in kept:
                kept = legacy
            try:
                await host.set_cursor(self.channel, alert_cursor(TOKEN_ALERT), kept)
                await host.set_cursor(self.channel, LEGACY_CURSOR, "{}")
            except Exception as exc:  # storage failing: moved at the next start
                log.warning("cannot move the kept Telegram token refusal: %s", exc)
        self._kept = "problem" in (kept or "")

    async def accept(self) -> None:
        """Telegram accepted the token: said once if it had refused it, the kept refusal
        cleared (and the owner told at once if it comes back)."""
        if self.refused is not None:
            self.refused = None
            log.info("Telegram accepts the bot token again")
        self.accepted.set()
        self._held_said = False
        if self._kept and self.host is not None:  # refused before (this run or the last)
            await self.host.alert_owner(self.channel, TOKEN_ALERT, None)
            self._kept = False

    async def refuse(self, answer: str = UNAUTHORIZED) -> float:
        """Telegram said 401 (or ``answer``, :data:`NOT_FOUND`): the token is wrong or
        revoked. Logged once, as an ERROR
        naming the key (before: a warning every few seconds, forever, naming neither the
        key nor that retrying could not help), and reported to the host at each refusal
        (it tells the owner once a period); returns when to ask again
        (:attr:`retry_every`)."""
        self.accepted.clear()
        if self.refused is None:
            self.refused = TOKEN_REFUSED.format(answer=answer, every=self.retry_every)
            log.error("%s", self.refused)
        else:
            log.debug("Telegram still refuses the bot token")
        if self.host is not None:
            # told elsewhere (the channel's sending_blocked): here it waited in held()
            await self.host.alert_owner(self.channel, TOKEN_ALERT, self.refused)
            self._kept = True
        return self.retry_every

    @property
    def sending_blocked(self) -> bool:
        """True while Telegram refuses the token: sends wait in :meth:`held`."""
        return not self.accepted.is_set()

    async def held(self, stopping: asyncio.Event) -> None:
        """Return once Telegram accepts the token: at once, unless it refuses it. A send
        to a refused token cannot succeed; before, the outbox retried each message as a
        temporary failure, a warning per attempt, until it gave up on it after
        ``max_attempts`` (the reply lost). Now the channel's sends wait here, their
        messages pending in the outbox (in order, none counted as an attempt), and go
        once the polling loop finds the token accepted (restored with BotFather, or the
        daemon restarted with a new one). ``stopping`` set first: raises
        :class:`HeldByRefusedToken`, and the outbox keeps the message."""
        if self.accepted.is_set():
            return
        if not self._held_said:
            self._held_said = True
            log.info("sends to Telegram are held until it accepts the bot token again "
                        "(kept in the outbox meanwhile)")  # fmt: skip
        if not stopping.is_set():
            accepted = asyncio.ensure_future(self.accepted.wait())
            stop = asyncio.ensure_future(stopping.wait())
            try:
                await asyncio.wait({accepted, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (accepted, stop):
                    task.cancel()
                await asyncio.gather(accepted, stop, return_exceptions=True)
        if not self.accepted.is_set():
            raise HeldByRefusedToken(
                HELD_RETRY_AFTER_STOP, "stopping while Telegram refuses the bot token"
            )
