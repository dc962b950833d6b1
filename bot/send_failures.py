"""Telling the owner about messages that could not be delivered.

A message the outbox gives up on (the channel refused it for good, or it failed
``max_attempts`` times) used to leave a log line and a count in ``my-agent status``
only: the owner never learnt that their ``/reply`` to someone, or the assistant's
answer, had not arrived. Now the owner is told on the escalation channel
(:meth:`bot.services.Services.alert_owner`, which bypasses the outbox, so a failing
alert cannot feed itself). A channel that is down fails every message it holds: at
most one alert per channel per ``interval`` seconds, the next one counting those
left out meanwhile.

A message that was sent, but not to every recipient (a reply-all whose Cc the mail
server cannot address: the channel reports it in ``SendResult.left_out``), is told too:
before session 15 only the log knew that someone on the thread never got the answer.
At most once per recipient per ``interval``.

A message failing for a reason that will not fix itself (a TLS misconfiguration:
:class:`bot.channel.Misconfigured`) is told after its first few attempts, while the
outbox still retries it: before session 23 the owner learnt of it when the outbox gave
up, some 50 attempts and hours later. At most once per channel per ``interval``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot.events import OutboundMessage, SendResult
from bot.graphemes import isolate, shorten
from bot.labels import contact_name
from bot.parties import shown_name

if TYPE_CHECKING:
    from bot.outbox import Outbox
    from bot.services import Services

log = logging.getLogger("my_agent.send_failures")

ALERT_INTERVAL = 600.0  # seconds between two alerts about one channel
PREVIEW = 80  # characters of the undelivered text quoted in the alert

_WHAT = {
    "reply": "a reply",
    "command": "a command's answer",
    "escalation": "an alert about a stranger",
    "acknowledgement": "an acknowledgement",  # never alerted: see on_failed
    "notice": "a notice",
}


class SendFailureAlerts:
    """``on_failed`` is the outbox's failed-for-good callback (``Outbox.on_failed``)."""

    def __init__(
        self,
        services: Services,
        interval: float = ALERT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.services = services
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}  # channel -> when its last alert went out
        self._held: Counter[str] = Counter()  # channel -> failures not alerted yet
        self._left_out: dict[tuple[str, str], float] = {}  # (channel, address) -> alerted
        self._stuck: dict[str, float] = {}  # channel -> when it was last told stuck

    def attach(self, outbox: Outbox) -> None:
        """Listen to ``outbox``: messages given up on, and those sent to some only."""
        outbox.on_failed(self.on_failed)
        outbox.on_sent(self.on_sent)
        outbox.on_stuck(self.on_stuck)

    async def on_stuck(self, message: OutboundMessage, error: str) -> None:
        """Tell the owner that ``message`` keeps failing for a reason to fix by hand."""
        now = self.clock()
        last = self._stuck.get(message.channel)
        if last is not None and now - last < self.interval:
            return
        self._stuck[message.channel] = now
        log.info(
            "telling the owner %s sends fail until its configuration is fixed", message.channel
        )
        await self.services.alert_owner(stuck_text(message, error, await self._recipient(message)))

    async def on_sent(self, message: OutboundMessage, result: SendResult) -> None:
        """Tell the owner of the recipients ``message`` was sent without."""
        now = self.clock()
        fresh = [
            addr
            for addr in result.left_out
            if now - self._left_out.get((message.channel, addr), -self.interval) >= self.interval
        ]
        if not fresh:
            return
        for addr in fresh:
            self._left_out[(message.channel, addr)] = now
        log.info("telling the owner %d recipient(s) were left out", len(fresh))
        await self.services.alert_owner(left_out_text(message, fresh, result.left_out_reason))

    async def on_failed(self, message: OutboundMessage, error: str) -> None:
        if message.kind == "acknowledgement":
            # The neutral "your message was passed on" to a third party (who blocked the
            # bot, say): the owner already has their message, and nothing to do about it.
            log.info(
                "acknowledgement to %s on %s not delivered: %s",
                message.chat_id,
                message.channel,
                error,
            )
            return
        now = self.clock()
        last = self._last.get(message.channel)
        if last is not None and now - last < self.interval:
            self._held[message.channel] += 1
            log.info("undelivered %s message held for the next alert", message.channel)
            return
        self._last[message.channel] = now
        held = self._held.pop(message.channel, 0)
        recipient = await self._recipient(message)
        await self.services.alert_owner(alert_text(message, error, held, recipient))

    async def _recipient(self, message: OutboundMessage) -> str:
        """Whom ``message`` was for as the owner knows them: a bare Telegram id ("to
        2002") said nothing, so a number gets the name its conversation knows."""
        chat = message.chat_id
        if not message.conversation_id or not chat.lstrip("-").isdigit():
            return chat
        rec = await self.services.conversations.get(message.conversation_id)
        if rec is None:
            return chat
        name = shown_name(contact_name(rec.channel_meta, list(rec.participants)))
        return f"{isolate(name)} ({chat})" if name else chat


def alert_text(
    message: OutboundMessage, error: str, held: int = 0, recipient: str | None = None
) -> str:
    """The owner's alert about ``message``, which will not be delivered to ``recipient``
    (its chat id when not given)."""
    text = " ".join(message.text.split())
    preview = shorten(text, PREVIEW)
    what = _WHAT.get(message.kind, "a message")
    out = (
        f"Could not deliver {what} on {message.channel} to {recipient or message.chat_id}: "
        f'"{isolate(preview)}" ({error}). It will not be retried'
    )
    out += "; the conversation keeps it." if message.conversation_id else "."
    if held:
        plural = "s" if held > 1 else ""
        out += f" {held} more message{plural} on {message.channel} failed since the last alert."
    return out


def stuck_text(message: OutboundMessage, error: str, recipient: str | None = None) -> str:
    """The owner's alert that ``message`` (and whatever follows it on its channel) cannot
    be sent to ``recipient`` until the channel's configuration is fixed."""
    what = _WHAT.get(message.kind, "a message")
    return (
        f"Cannot send {what} on {message.channel} to {recipient or message.chat_id}: {error}. "
        f"This will not fix itself: check the {message.channel} channel's settings. "
        "It is still being retried, and goes out once they are right."
    )


def left_out_text(message: OutboundMessage, left_out: list[str], reason: str) -> str:
    """The owner's alert that ``message`` went out without ``left_out``."""
    text = " ".join(message.text.split())
    preview = shorten(text, PREVIEW)
    what = _WHAT.get(message.kind, "a message")
    who = ", ".join(left_out)
    return (
        f"Sent {what} on {message.channel} without {who}: {reason or 'not addressable'}. "
        f'The others got it. Forward it yourself if they need it: "{isolate(preview)}"'
    )
