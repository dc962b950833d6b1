"""The core's parts as one object, :class:`Services`, shared with channels.

What each part is (store, databases, index, brain, router, outbox, ...), what they
report together as the daemon's health, and the one message that bypasses them all: an
alert to the owner. They are opened in order, and closed, by :mod:`bot.services`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot import redaction
from bot.arrivals import IncomingFlow
from bot.brain.base import Brain
from bot.channel import Channel
from bot.config import AppConfig
from bot.db import Database
from bot.events import OutboundMessage, StreamEvent
from bot.external import ExternalStore
from bot.hooks import EventBus
from bot.identity import OwnerIdentities
from bot.index import ConversationIndex
from bot.index_rescue import damage_text
from bot.outbox import Outbox
from bot.recovery import RecoveryReport
from bot.replies import ReplyEngine
from bot.search import SearchService
from bot.transcript import TranscriptStore

log = logging.getLogger("my_agent.services")


@dataclass
class Services:
    """The core's parts, opened by :func:`bot.services.open_services`; fields set
    after the constructor (brain, router, replies) are built from the others."""

    config: AppConfig
    bus: EventBus
    store: TranscriptStore
    index_db: Database
    state: Database
    index: ConversationIndex
    conversations: Any  # ConversationManager (Any avoids an import cycle in type checkers)
    external: ExternalStore
    search: SearchService
    outbox: Outbox
    identities: OwnerIdentities
    brain: Brain = field(init=False)
    router: Any = field(init=False)  # bot.router.Router
    replies: ReplyEngine = field(init=False)
    embedder: Any = None  # bot.embedding.EmbeddingService
    vectors: Any = None  # bot.vectors.VectorIndex
    lifecycle: Any = None  # bot.lifecycle.Lifecycle
    incoming: IncomingFlow = field(default_factory=IncomingFlow)
    channels: dict[str, Channel] = field(default_factory=dict)
    stream_sink: Callable[[StreamEvent], Awaitable[None]] | None = None
    memory_flush: Callable[..., Awaitable[None]] | None = None
    recovery: RecoveryReport | None = None
    config_path: Path | None = None
    ready: bool = False
    # the daemon's daily check of the index's pages (bot.index_page_checks.page_checks)
    page_check: asyncio.Task[None] | None = None

    # -- health ----------------------------------------------------------------------
    def vector_search_available(self) -> bool:
        """True once the embedding model is loaded and vectors can be searched."""
        return bool(self.index_db.vec_available and self.search.hybrid)

    def health(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "brain": self.brain.name,
            "vectorSearch": self.vector_search_available(),
            "channels": {name: getattr(ch, "started", True) for name, ch in self.channels.items()},
            "spooled": len(self.router.spool),
            # messages refused (shutting down) or not stored / replies not written (storage)
            "accepting": self.router.accepting,
            "repliesWaitingForStorage": len(self.replies.storage_waiting),
            # what a channel reports about itself (e-mail: mails the server holds back)
            "channelProblems": self.channel_problems(),
            # transcripts start-up could not read: skipped, their conversations not written
            "unreadableTranscripts": self.unreadable_transcripts(),
            # conversations.db found damaged while running (rebuilt at the next start)
            "indexDamage": self.index_damage(),
        }

    def index_damage(self) -> str | None:
        """The problem line for a conversations.db found damaged while running, or None."""
        if self.index_db.damage is None:
            return None
        return damage_text(self.index_db.path.name, self.index_db.damage)

    def unreadable_transcripts(self) -> list[str]:
        """One problem line per transcript start-up could not read (file and error)."""
        return [
            f"transcript {self.store.path(conv_id).name} cannot be read ({why}): its "
            "conversation is skipped until a restart reads it"
            for conv_id, why in sorted(self.store.unreadable.items())
        ]

    def channel_problems(self) -> dict[str, list[str]]:
        """Per channel, what its optional ``problems()`` reports (only channels with any)."""
        out: dict[str, list[str]] = {}
        for name, channel in self.channels.items():
            report = getattr(channel, "problems", None)
            found = report() if callable(report) else None
            if found:
                out[name] = list(found)
        return out

    async def alert_owner(self, text: str) -> None:
        """Tell the owner directly (bypassing storage), on the escalation channel.

        When that channel says it cannot send now (its ``sending_blocked``: Telegram
        refusing the bot token), on another channel that has the owner's address, else
        on the dashboard only (the ``notice`` event) and in the log. Before session 25
        the alert waited in that channel's send for it to work again (an alert about
        the refused token waited for the token), and a stop lost it. A secret in
        ``text`` (an error's, bot/redaction.py) is masked."""
        text = redaction.mask(text)
        channel_name = self.config.escalation_channel()
        blocked = self._sending_blocked(channel_name)
        if blocked:
            channel_name = self._other_alert_channel()
        channel = self.channels.get(channel_name)
        chat = self.identities.address_for(channel_name)
        if channel is None or chat is None:
            if blocked:
                escalation = self.config.escalation_channel()
                log.info(
                    "owner alert on the dashboard only (%s cannot send now): %s", escalation, text
                )
            else:
                log.error("owner alert (no channel to send it on): %s", text)
            await self.bus.emit("notice", text=text)
            return
        try:
            await channel.send(
                OutboundMessage(
                    channel=channel_name,
                    chat_id=chat,
                    text=text,
                    kind="notice",
                    subject="my-agent alert",
                    # Shown by the dashboard from the "notice" event below, which
                    # every path emits: sent to it as well, it showed twice.
                    metadata={"alert": True},
                )
            )
        except Exception:
            log.exception("could not alert the owner: %s", text)
        await self.bus.emit("notice", text=text)

    def _sending_blocked(self, name: str) -> bool:
        """Whether channel ``name`` says it cannot send now (an optional
        ``sending_blocked`` of a :class:`~bot.channel.Channel`)."""
        return bool(getattr(self.channels.get(name), "sending_blocked", False))

    def _other_alert_channel(self) -> str:
        """A channel that can send and reach the owner; "web" (the dashboard's notice)
        when none can."""
        for name in self.channels:
            if not self._sending_blocked(name) and self.identities.address_for(name):
                return name
        return "web"
