"""Producing replies: one at a time per conversation (or party), in arrival order.

A reply job runs after the user turn is durable. The brain's text is appended to the
transcript (durable) and only then queued in the outbox, under a dedup key, so a crash
at any point either leaves an unanswered user turn (answered after restart) or a
recorded reply (sent at most once). When the model is unreachable the user is told once
and the job waits and retries, holding back later messages of the same conversation so
order is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.brain.base import (
    BrainReply,
    BrainRequest,
    HistoryTurn,
    Profile,
)
from bot.brain.restricted_window import MemberWindows
from bot.bursts import Bursts
from bot.events import OutboundMessage
from bot.group_budget import GroupBudget
from bot.model_switch import forget_dropped_model
from bot.previous_conversation import note_for
from bot.reply_generation import ReplyGeneration, answered
from bot.reply_queue import KeyedSerialQueue
from bot.reply_writes import ReplyWrites
from bot.transcript_lines import READOUT_MODELS

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.replies")

# An album (photos sent together, one message each) is answered once no more of it has
# come for this long: its items arrive within milliseconds of each other.
ALBUM_SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class ReplyTarget:
    """Where a reply goes (normally where the message came from)."""

    channel: str
    chat_id: str
    in_reply_to: str | None = None
    thread_refs: tuple[str, ...] = ()
    subject: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def reply(self, text: str, conversation_id: str, *, plain: bool = False) -> OutboundMessage:
        """The outbound reply to this target. ``plain``: a readout (the offline brain's,
        an apology) that quotes stored text, so a channel must not read it as Markdown."""
        metadata = dict(self.metadata)
        if plain:
            metadata["plain"] = True
        return OutboundMessage(
            channel=self.channel,
            chat_id=self.chat_id,
            text=text,
            kind="reply",
            conversation_id=conversation_id,
            in_reply_to=self.in_reply_to,
            thread_refs=self.thread_refs,
            subject=self.subject,
            metadata=metadata,
        )

    def answer(self, reply: BrainReply, conversation_id: str) -> OutboundMessage:
        """The outbound message of ``reply`` (plain text when it is a readout)."""
        return self.reply(reply.text, conversation_id, plain=reply.model in READOUT_MODELS)


class ReplyEngine(ReplyWrites):
    """Runs the brain for owner conversations and restricted third-party exchanges
    (the reply's writes: :class:`~bot.reply_writes.ReplyWrites`)."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self.queue = KeyedSerialQueue(services.config.brain.max_concurrent_replies)
        self.generation = ReplyGeneration(services)
        # conversations whose reply is written and waits for the storage to take it
        self.storage_waiting: set[str] = set()
        # conversation -> its latest user turn submitted: the debounce
        self._arrivals = Bursts()
        # (conversation, album) -> its latest turn submitted: an album's one reply
        self._albums = Bursts()
        # a known party -> their latest message: one answer per burst (bot.known_answers)
        self.party_bursts = Bursts()
        self.group_budget = GroupBudget(services)
        self.member_windows = MemberWindows()

    # -- owner conversations --------------------------------------------------------
    def submit(
        self,
        conversation_id: str,
        turn_number: int,
        text: str,
        target: ReplyTarget,
        sender: str | None = None,
        owner: bool | None = None,
        album: str | None = None,
    ) -> None:
        """Queue the reply to a user turn. ``owner``: whether the sender is the owner, as
        the router established it (ids, aliases); None for a turn recorded without it.
        ``album``: the turn is one item of an album (Telegram's ``media_group_id``),
        which gets one reply, to its last item, with every caption in its context."""
        if self.debounce(target.channel) and owner is not False:
            self._arrivals.note(conversation_id, turn_number)
        if album:
            self._albums.note((conversation_id, album), turn_number)
        self.queue.submit(
            conversation_id,
            lambda: self._reply(conversation_id, turn_number, text, target, sender, owner, album),
            # Under a flood, a reply to someone else than the owner waits for it to pause
            # (the owner's never does): storing what arrives goes first.
            wait=self.s.incoming.pause if owner is False else None,
        )

    def hold_bursts(self) -> None:
        """The channels are starting (bot/daemon.py): the replies resumed before them
        wait, however long that takes, so that what a channel delivers first (what came
        while we were down) can join their burst (the debounce, an album; a known
        party's, :mod:`bot.known_answers`)."""
        self._arrivals.hold()
        self._albums.hold()
        self.party_bursts.hold()

    def release_bursts(self) -> None:
        """The channels have started: held replies wait out their pause from now."""
        self._arrivals.release()
        self._albums.release()
        self.party_bursts.release()

    def cancel(self, conversation_id: str) -> bool:
        """Stop the generation in progress (dashboard "stop"); keeps what was produced."""
        return self.generation.cancel(conversation_id)

    @property
    def retry_interval(self) -> float:
        """Seconds between two attempts while the model is unreachable."""
        return self.generation.retry_interval

    @retry_interval.setter
    def retry_interval(self, seconds: float) -> None:
        self.generation.retry_interval = seconds

    async def _reply(
        self,
        conv_id: str,
        turn: int,
        text: str,
        target: ReplyTarget,
        sender: str | None,
        owner: bool | None = None,
        album: str | None = None,
    ) -> None:
        # An album is answered once no more of it has come, in groups too; before, at
        # its first photo, and the other captions reached only the next reply.
        if album and await self._merged(conv_id, turn, self._albums, (conv_id, album)):
            return
        rec = await self.s.conversations.require(conv_id)
        group = rec.identity_key is not None and ":group:" in rec.identity_key
        if owner is None:
            # A turn recorded before "fromOwner" was: the sender as stored is all there is.
            owner = sender is None or self.s.identities.match(target.channel, sender) is not None
        profile: Profile = "restricted" if group and not owner else "owner"
        if group:
            self._arrivals.forget(conv_id)  # a group is never merged (submit noted it)
            if not owner and self.s.brain.name == "offline":
                await self._record_unanswered(conv_id, turn)
                return
            # A member's answer is a paid call the group could make without end.
            if not owner and not await self.group_budget.allows(rec, turn):
                return
        elif (
            profile == "owner"
            and self.debounce(target.channel)
            and await self._merged(conv_id, turn, self._arrivals, conv_id, target.channel)
        ):
            return
        history: tuple[HistoryTurn, ...] = ()
        if profile == "restricted" and getattr(self.s.brain, "uses_history", True):
            history = await self._group_history(conv_id, turn)
        if profile == "restricted":
            # a member's words that imitate the owner's mark are flagged, and one written
            # long before it came says when (before session 42 it was answered as just
            # said, where the owner's and a known contact's were labelled)
            path = self.s.conversations.store.path(conv_id)
            text = await self.member_windows.message(path, turn, text)
        # For the owner's reply only: a member's restricted reply never shows them,
        # and taking them there lost them (the split offer was never made).
        notes = tuple(self.s.conversations.take_notes(conv_id)) if profile == "owner" else ()
        # (not where others read the reply: recall reaches this conversation alone there)
        private = profile == "owner" and not group and not self._others_read(target)
        left = await note_for(self.s, conv_id, turn) if private else None
        request = BrainRequest(
            profile=profile,
            channel=target.channel,
            text=text,
            model_alias=rec.model or self.s.config.models.default,
            conversation_id=conv_id if profile == "owner" else None,
            turn_number=turn,
            party_name=sender,
            scope=self.s.config.trust.known_scope if profile == "restricted" else None,
            history=history,
            # (the conversation /new just left is named, never put back: it is not taken)
            notes=(*notes, left) if left else notes,
            # Every member reads the owner's reply in a group, and the other recipients
            # read a reply-all mail: what it recalls comes from this conversation, never
            # the owner's private ones (a "what did we say about my salary?" there
            # posted the salary to the group, or mailed it to the owner's Cc).
            recall_scope=conv_id if group or self._others_read(target) else None,
        )
        delivered = False
        try:
            reply = await self.generation.generate(
                conv_id, turn, request, target, f"{conv_id}:{turn}"
            )
            await self._store_retrying(conv_id, turn, reply, target)
            delivered = answered(reply)
        finally:
            if not delivered:
                # a failed, stopped or unstored reply did not say them: the next one does
                self.s.conversations.restore_notes(conv_id, notes)
        if notes and delivered:
            await self.s.bus.emit("notes_delivered", conversation_id=conv_id, notes=notes)
        await forget_dropped_model(self.s, conv_id, reply)

    async def _record_unanswered(self, conv_id: str, turn: int) -> None:
        """A group member's message while no model is configured: recorded, not
        answered. Before session 40 each one got the offline brain's notice ("Your
        message has been recorded and the owner can read it"), posted into the group
        once per message: four messages, four identical notices, read by every member
        (the owner is in the group and reads the messages anyway). A ``reply_refused``
        event names the turn, so recovery does not answer it after a restart either."""
        log.info("%s turn %d: a group member's message, not answered (offline)", conv_id, turn)
        await self.s.conversations.append_event(
            conv_id, "reply_refused", turnNumber=turn, reason="offline"
        )

    def _others_read(self, target: ReplyTarget) -> bool:
        """Whether someone besides the owner reads the reply (a reply-all mail's other
        recipients, as the channel lists them); the owner's own other addresses, in Cc
        so that the answer reaches their work inbox too, are not someone else."""
        readers = target.metadata.get("readers") or ()
        return any(self.s.identities.match(target.channel, str(r)) is None for r in readers)

    def debounce(self, channel: str) -> float:
        """The pause that ends a burst on ``channel`` (``brain.debounce_seconds``; 0: off)."""
        return self.s.config.brain.debounce_seconds.get(channel, 0.0)

    async def _merged(
        self, conv_id: str, turn: int, bursts: Bursts, key: Hashable, channel: str | None = None
    ) -> bool:
        """Whether a later turn of this burst answers this one, once the burst paused:
        for ``brain.debounce_seconds`` of ``channel`` (the owner's messages in this
        conversation), else :data:`ALBUM_SETTLE_SECONDS` (an album's items). The reply to
        the last turn of a burst sees every turn before it in its context, so one reply
        answers them all; each merged turn is marked with a ``reply_merged`` event, which
        tells recovery it expects no reply of its own."""
        pause = self.debounce(channel) if channel else ALBUM_SETTLE_SECONDS
        latest = await bursts.answered_by(key, turn, pause)
        if latest is None:
            return False
        await self.s.conversations.append_event(
            conv_id, "reply_merged", turnNumber=turn, into=latest
        )
        log.debug("%s turn %d is answered with turn %d", conv_id, turn, latest)
        return True

    async def _group_history(self, conv_id: str, turn: int) -> tuple[HistoryTurn, ...]:
        """The group's own recent messages that the member was there for (from their
        first message on: :mod:`bot.brain.restricted_window`), each labelled by whose it
        is as the router established it (the transcript's ``fromOwner``): the index's
        sender is a display name, and a member named like the owner read as the owner
        (:mod:`bot.brain.restricted_group`)."""
        path = self.s.conversations.store.path(conv_id)
        return await self.member_windows.history(conv_id, path, turn)
