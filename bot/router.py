"""The router: identity check -> slash commands -> conversation flow | external flow.

Implements :class:`bot.channel.ChannelHost`. ``deliver`` returns once the message is
durable; replies are produced afterwards by the :class:`~bot.replies.ReplyEngine`.
Seed 000 "Flow 3" and SPEC.md "Routing and trust". Here: duplicates, the choice of flow
(owner, group, third party) and storage trouble; the conversation a message belongs to is
found by bot/resolver.py, recorded by bot/turn_recorder.py, a slash command is run by
bot/command_flow.py and a third party's message handled by bot/strangers.py; a message
the disk refuses is held by bot/spool.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bot.channel import DeliveryError
from bot.channel_alerts import ChannelAlerts
from bot.command_flow import CommandFlow
from bot.command_runs import CommandRuns
from bot.commands import Commands, is_detached, parse_command
from bot.conversations import ConversationNotFound
from bot.events import InboundMessage, scrubbed
from bot.forwards import own_words
from bot.identity import anonymous_sender
from bot.index import ConversationRecord
from bot.index_rescue import is_storage_refusal
from bot.parties import normalise_identity, party_handle
from bot.party_tiers import tier_now
from bot.resolver import THREADED_CHANNELS, ConversationResolver, ReadOnlyConversation
from bot.spool import HeldForRetry, InboundSpool
from bot.strangers import StrangerFlow
from bot.tasks import spawn
from bot.transcript import UnreadableTranscript
from bot.turn_recorder import TurnRecorder, reply_target
from bot.username_bindings import UsernameBindings

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

STORAGE_RETRIES = (0.1, 0.5, 1.5)


class Router:
    """The core's :class:`~bot.channel.ChannelHost`: every inbound message comes here.

    Holds the flows a message can take: the owner's (here), the owner's groups (here),
    third parties' (:class:`~bot.strangers.StrangerFlow`) and slash commands
    (:class:`~bot.command_flow.CommandFlow`).
    """

    def __init__(self, services: Services) -> None:
        self.s = services
        self.commands = Commands(services)
        self.runs = CommandRuns(services.state)
        self.accepting = True
        self._storage_alerted = False
        self._unreadable_alerted: set[str] = set()  # transcripts the owner was told of
        # (channel, message_id) being routed -> [lock, users]: a redelivery racing the
        # original waits for it and is then recognised as a duplicate.
        self._arriving: dict[tuple[str, str], list[Any]] = {}
        self.spool = InboundSpool(self._route, self._storage_recovered)
        self.alerts = ChannelAlerts(services, self)
        self.resolver = ConversationResolver(services)
        self.turns = TurnRecorder(services)
        self.command_flow = CommandFlow(
            services, self.commands, self.runs, self.turns, self.resolver.contact_lock
        )
        self.usernames = UsernameBindings(services)
        self.strangers = StrangerFlow(services, self.commands, self.resolver.contact_lock)
        self.send_to_party = self.strangers.send_to_party
        self.escalate = self.strangers.escalate

    # -- ChannelHost ---------------------------------------------------------------
    async def deliver(self, message: InboundMessage) -> None:
        if not self.accepting:
            raise DeliveryError("the daemon is shutting down")
        message = scrubbed(message)  # lone surrogates cannot be stored: replaced, not lost
        self.s.incoming.note()
        for attempt, delay in enumerate((*STORAGE_RETRIES, None)):
            try:
                await self._route(message)
                if attempt:
                    log.info("stored %s after %d retries", message.message_id, attempt)
                return
            except ReadOnlyConversation:
                raise DeliveryError(
                    "this conversation belongs to its channel and is read-only here"
                ) from None
            except ConversationNotFound as exc:
                # A dashboard naming a conversation that does not exist (the contract
                # promises channels a DeliveryError, never a stray LookupError).
                raise DeliveryError(f"no conversation {exc}") from None
            except Exception as exc:
                # SQLite's refusal too ("database or disk is full"): it reached the channel
                # as a bug, neither held nor retried, and the owner was not told
                if not (isinstance(exc, OSError) or is_storage_refusal(exc)):
                    raise
                log.error(
                    "cannot store message %s from %s (%s)", message.message_id, message.channel, exc
                )
                if delay is None:
                    self.spool.hold(message)
                    await self._alert_owner_storage(exc)
                    raise HeldForRetry(f"storage failure: {exc}") from exc
                await asyncio.sleep(delay)

    async def get_cursor(self, channel: str, key: str) -> str | None:
        row = await self.s.state.fetchone(
            "SELECT value FROM channel_cursors WHERE channel = ? AND key = ?", (channel, key)
        )
        return str(row[0]) if row else None

    async def set_cursor(self, channel: str, key: str, value: str) -> None:
        from bot.events import iso, utcnow

        await self.s.state.execute(
            "INSERT INTO channel_cursors (channel, key, value, updated) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(channel, key) DO UPDATE SET value = excluded.value, "
            "updated = excluded.updated",
            (channel, key, value, iso(utcnow())),
        )

    async def record_message_ref(self, channel: str, ref: str, conversation_id: str) -> None:
        await self.s.conversations.record_message_ref(conversation_id, channel, ref, "out")

    async def alert_owner(self, channel: str, key: str, problem: str | None) -> None:
        await self.alerts.report(channel, key, problem)

    async def tell_owner(self, channel: str, text: str) -> None:
        log.warning("telling the owner (%s): %s", channel, text)
        # not awaited: the channel's reader does not wait for an SMTP timeout
        spawn(self.s.alert_owner(text), name=f"notice-{channel}")

    async def reachable(self, channel: str) -> None:
        try:
            await self.s.outbox.reachable(channel)
        except asyncio.CancelledError:
            raise
        except Exception:  # the rows go at their backoff's end instead
            log.exception("could not hurry %s's held messages", channel)

    def cancel(self, conversation_id: str) -> bool:
        return self.s.replies.cancel(conversation_id)

    # -- routing ---------------------------------------------------------------------
    async def _route(self, msg: InboundMessage) -> None:
        key = (msg.channel, msg.message_id)
        entry = self._arriving.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                await self._route_once(msg)
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._arriving.pop(key, None)

    async def _route_once(self, msg: InboundMessage) -> None:
        if await self.s.index.conversation_for_ref(msg.channel, msg.message_id):
            log.info("duplicate %s message %s dropped", msg.channel, msg.message_id)
            return
        # A configured @username counts only from the id it was first seen with: the
        # next holder of a username given up is nobody the config names.
        msg = await self.usernames.vetted(msg)
        if msg.channel == "web":
            await self._owner_flow(msg, "web:owner")
            return
        if msg.group_id:
            await self._group_flow(msg)
            return
        owner = self.s.identities.match(msg.channel, msg.sender_id, msg.sender_aliases)
        if owner is not None and msg.identity_verified is not False:
            await self._owner_flow(msg, f"{msg.channel}:{owner}")
            return
        if owner is not None:
            log.warning(
                "%s message claims an owner identity but failed verification: "
                "handled as a third party",
                msg.channel,
            )
        # (An album's photos all come as they are: the party's flow handles an album
        # once, bot/strangers.py.)
        await self.strangers.handle(msg, reply_target(msg))

    async def _owner_flow(self, msg: InboundMessage, identity_key: str) -> None:
        # A mail the owner forwards is not the owner's words (a command's either): its
        # turn keeps it apart, the model is shown it labelled (bot/forwards.py).
        msg = own_words(msg)
        command = parse_command(msg.text) if msg.addressed else None
        if command is not None and is_detached(command[0]):
            # A dashboard tab with no conversation yet, or a mail that starts a thread:
            # /search, /help, /status, the party commands and an unknown one answer
            # without creating an (empty) conversation to record them in.
            if (msg.channel == "web" and msg.conversation_id is None) or (
                msg.channel in THREADED_CHANNELS and await self.resolver.find_thread(msg) is None
            ):
                await self.command_flow.run(msg, None, *command)
                return
        rec = await self._interrupted_new(msg, command) or await self.resolver.owner(
            msg, identity_key
        )
        if command is not None:
            await self.command_flow.run(msg, rec, *command)
            return
        await self.turns.record_and_reply(
            msg, rec, sender=None if msg.channel == "web" else msg.sender_id
        )

    async def _interrupted_new(
        self, msg: InboundMessage, command: tuple[str, str] | None
    ) -> ConversationRecord | None:
        """The conversation a ``/new`` interrupted by a crash was run in: it may have
        unpinned it already without pinning the fresh one, and resolving the message
        afresh would then create a conversation for it (bot/command_runs.py)."""
        if command is None or command[0] != "new":
            return None
        run = await self.runs.find(msg.channel, msg.message_id)
        previous = run.effect.get("previous") if run else None
        return await self.s.conversations.get(previous) if previous else None

    async def _group_flow(self, msg: InboundMessage) -> None:
        rec = await self.resolver.group(msg)
        # an anonymous admin may be anyone of the group's admins: never the owner
        is_owner = (
            None
            if anonymous_sender(msg.metadata)
            else self.s.identities.match(msg.channel, msg.sender_id, msg.sender_aliases)
        )
        if is_owner is None and msg.addressed and await self._blocked(msg):
            # Kept as the group's context, never answered, as /block promises (their
            # mentions were answered in the owner's groups, a paid call each).
            log.info("message of a blocked party in group %s kept, not answered", msg.group_id)
            msg = replace(msg, addressed=False)
        command = parse_command(msg.text) if msg.addressed else None
        if command is not None:
            await self.command_flow.run(msg, rec, *command, owner=is_owner is not None)
            return
        await self.turns.record_and_reply(
            msg, rec, sender=msg.sender_name or msg.sender_id, owner=is_owner is not None
        )

    async def _blocked(self, msg: InboundMessage) -> bool:
        """Whether the sender is a party the owner blocked (or ``trust.contacts`` does);
        not ``trust.default_tier``, which is for strangers writing to us, while the owner
        allowed the group and everyone in it."""
        key = normalise_identity(msg.channel, msg.sender_id)
        party = await self.s.external.current(party_handle(msg.channel, key))
        if party is None:
            configured = self.s.external.configured_tier(msg.channel, key, msg.sender_aliases)
            return configured == "blocked"
        # The tier as it is now (bot.party_tiers): the owner's choice stands, the config
        # as it is now beats their record (taken off the list since, or listed as blocked
        # while their record held the default tier: answered here until their next
        # private message, before session 30).
        tier, source = tier_now(
            self.s.config, msg.channel, key, party.tier, party.tier_source, msg.sender_aliases
        )
        return tier == "blocked" and source != "default"

    def _storage_recovered(self) -> None:
        self._storage_alerted = False  # the next failure alerts the owner again

    async def _alert_owner_storage(self, exc: Exception) -> None:
        if isinstance(exc, UnreadableTranscript):
            # not the disk: one conversation's file, told once per file ("free disk
            # space" sent the owner looking for the wrong thing)
            if str(exc) in self._unreadable_alerted:
                return
            self._unreadable_alerted.add(str(exc))
            await self.s.alert_owner(
                f"Storage problem: {exc}. Its new messages are held in memory; make the "
                "file readable again and restart me to store and answer them."
            )
            return
        if self._storage_alerted:
            return
        self._storage_alerted = True
        reason = getattr(exc, "strerror", None) or exc
        text = (
            f"Storage problem: I cannot write messages to disk ({reason}). "
            "Incoming messages are held (kept across a restart) and retried; please free disk "
            "space."
        )
        await self.s.alert_owner(text)
