"""The small interface between the core and every channel adapter.

A channel turns wire messages into :class:`~bot.events.InboundMessage` and hands them to
:meth:`ChannelHost.deliver`; the core hands :class:`~bot.events.OutboundMessage` back
through :meth:`Channel.send`. ``deliver`` returns once the message is durable (transcript
fsynced, index updated): only then may a channel acknowledge it to its server (advance
the Telegram offset, mark the mail \\Seen).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from bot.events import InboundMessage, OutboundMessage, SendResult, StreamEvent


class DeliveryError(Exception):
    """The core could not make an inbound message durable; the channel must not ack it."""


class PermanentSendError(Exception):
    """A send that will never succeed (chat gone, address rejected): not retried."""


class Misconfigured(Exception):
    """A send failure that will not fix itself (TLS spoken to a plain server, STARTTLS
    not offered): retried like any other, since the owner may fix the configuration,
    but the owner is told after the first few attempts (:data:`bot.outbox.TELL_AFTER`)
    rather than when the outbox gives up, hours later."""


class Unreachable(Exception):
    """Nothing was delivered: the channel's server could not be reached (no connection
    made, or it answered that it is failing). The outbox retries it with backoff for as
    long as that lasts: such failures do not count toward giving up on the message (a
    network outage of 2.6 hours used up the 50 attempts of every reply queued, and the
    owner's replies were lost), and :meth:`ChannelHost.reachable` sends it at once when
    the channel reaches its server again."""


class RetryLater(Exception):
    """The peer refuses sends for ``retry_after`` seconds (Telegram's flood control): the
    outbox retries no sooner, since every earlier attempt is refused and may lengthen the
    ban."""

    def __init__(self, retry_after: float, message: str = "") -> None:
        super().__init__(message or f"retry after {retry_after:g}s")
        self.retry_after = retry_after


@runtime_checkable
class ChannelHost(Protocol):
    """What the core offers a channel. Implemented by :class:`bot.router.Router`'s host."""

    async def deliver(self, message: InboundMessage) -> None:
        """Record ``message`` durably and schedule its handling. Raises DeliveryError."""

    async def get_cursor(self, channel: str, key: str) -> str | None:
        """A persisted channel cursor (Telegram offset, IMAP UIDVALIDITY/UID)."""

    async def set_cursor(self, channel: str, key: str, value: str) -> None:
        """Persist a channel cursor durably. A value that is a JSON object with a
        ``problem`` string (one of the channel's :meth:`Channel.problems` lines) is also
        listed by ``my-agent status`` while the daemon is stopped."""

    async def record_message_ref(self, channel: str, ref: str, conversation_id: str) -> None:
        """Remember that message ``ref`` (e.g. an e-mail Message-ID) belongs to a conversation."""

    async def reachable(self, channel: str) -> None:
        """The channel reaches its server again after failing to: its messages held back
        by :class:`Unreachable` go now, not at the end of their backoff (up to five
        minutes after the outage). Never raises: a failure is logged."""

    async def alert_owner(self, channel: str, key: str, problem: str | None) -> None:
        """Report a problem of the channel's that will not fix itself (a login the
        server refuses, TLS settings that do not fit it), or with ``problem`` None that
        it is solved. The owner is told ``problem`` on the escalation channel (another
        one while that one's ``sending_blocked``, see :class:`Channel`), at most once
        per (``channel``, ``key``) every few hours, across restarts; it is kept with the
        channel's cursors (``alert:<key>``), so that ``my-agent status`` names it while
        the daemon is stopped (while it runs, the channel's :meth:`Channel.problems`
        does). Solved: the kept line is cleared, and the next occurrence is told at
        once. Never raises: a failure is logged."""

    async def tell_owner(self, channel: str, text: str) -> None:
        """Tell the owner ``text`` once, now, on the escalation channel (another one
        while that one's ``sending_blocked``): something that happened, no problem
        that lasts (for those, :meth:`alert_owner`). Never raises: a failure is
        logged."""


StreamSink = Callable[[StreamEvent], Awaitable[None]]


@runtime_checkable
class Channel(Protocol):
    """A transport to the outside world (Telegram, e-mail, web dashboard, test)."""

    name: str
    supports_streaming: bool

    async def start(self, host: ChannelHost) -> None:
        """Connect and begin delivering inbound messages to ``host``. Returns when up."""

    async def stop(self) -> None:
        """Stop receiving, finish in-flight sends, disconnect. Idempotent.

        A channel whose sends may wait (a flood ban) can also offer ``stop_waiting()``,
        called first when the daemon stops: such a send then raises at once, and the
        outbox keeps its message for the next start. One whose sends wait for the
        owner to fix something (Telegram refusing the bot token) can offer a
        ``sending_blocked`` attribute, True meanwhile: owner alerts then go by another
        channel (:meth:`bot.services.Services.alert_owner`)."""

    async def send(self, message: OutboundMessage) -> SendResult:
        """Deliver one message. Raise to have the outbox retry it later (no sooner than
        :class:`RetryLater` says), or :class:`PermanentSendError` when retrying cannot
        help."""


@runtime_checkable
class StreamingChannel(Channel, Protocol):
    """A channel that can show a reply while it is generated (the dashboard)."""

    async def stream(self, event: StreamEvent) -> None:
        """Show one delta of a reply in progress."""
