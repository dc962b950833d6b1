"""The router: identity check -> slash commands -> conversation flow | external flow.

Implements :class:`bot.channel.ChannelHost`. ``deliver`` returns once the message is
durable; replies are produced afterwards by the :class:`~bot.replies.ReplyEngine`.
Seed 000 "Flow 3" and SPEC.md "Routing and trust".
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from bot.channel import DeliveryError
from bot.command_runs import CommandRuns, has_effects
from bot.commands import (
    DETACHED_COMMANDS,
    GROUP_MEMBER_HELP,
    CommandResult,
    Commands,
    parse_command,
)
from bot.conversations import ConversationNotFound
from bot.events import InboundMessage, OutboundMessage, scrubbed
from bot.index import ConversationRecord
from bot.parties import PartyRecord
from bot.replies import ReplyTarget
from bot.strangers import StrangerFlow
from bot.transcript import new_conversation_id

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

THREADED_CHANNELS = {"email"}
_SUBJECT_PREFIX = re.compile(r"^\s*((re|fw|fwd|aw|sv|wg)(\[\d+\])?\s*:\s*)+", re.I)
_REPLY_SUBJECT = re.compile(r"^\s*(re|aw|sv)(\[\d+\])?\s*:", re.I)  # not forwards: new topics
STORAGE_RETRIES = (0.1, 0.5, 1.5)


class ReadOnlyConversation(Exception):
    """A pinned channel conversation cannot be written to from the dashboard."""


def recipients(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The original To/Cc of a message (e-mail reply-all needs them after a restart too)."""
    return {k: list(metadata[k]) for k in ("to", "cc") if isinstance(metadata.get(k), list)}


def normalise_subject(subject: str | None) -> str:
    return " ".join(_SUBJECT_PREFIX.sub("", subject or "").lower().split())


class Router:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.commands = Commands(services)
        self.runs = CommandRuns(services.state)
        self.accepting = True
        self._storage_alerted = False
        # (channel, message_id) being routed -> [lock, users]: a redelivery racing the
        # original waits for it and is then recognised as a duplicate.
        self._arriving: dict[tuple[str, str], list[Any]] = {}
        # identity key -> lock held while finding or creating its pinned conversation, so
        # racing first messages (or an escalation) never create two.
        self._contact_locks: dict[str, asyncio.Lock] = {}
        self.strangers = StrangerFlow(services, self.commands, self._contact_lock)
        self.send_to_party = self.strangers.send_to_party
        self.escalate = self.strangers.escalate

    def _contact_lock(self, key: str) -> asyncio.Lock:
        lock = self._contact_locks.get(key)
        if lock is None:
            lock = self._contact_locks[key] = asyncio.Lock()
        return lock

    # -- ChannelHost ---------------------------------------------------------------
    async def deliver(self, message: InboundMessage) -> None:
        if not self.accepting:
            raise DeliveryError("the daemon is shutting down")
        message = scrubbed(message)  # lone surrogates cannot be stored: replaced, not lost
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
            except OSError as exc:
                log.error(
                    "cannot store message %s from %s (%s)", message.message_id, message.channel, exc
                )
                if delay is None:
                    self.s.spool(message)
                    await self._alert_owner_storage(exc)
                    raise DeliveryError(f"storage failure: {exc}") from exc
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
        if msg.metadata.get("album_part"):
            # A third party's album keeps one answer, at its first photo: their flow
            # answers each message it is handed (the owner's albums are merged instead).
            msg = replace(msg, addressed=False)
        await self.strangers.handle(msg, self._target(msg))

    async def _resolve(self, msg: InboundMessage, identity_key: str) -> ConversationRecord:
        manager = self.s.conversations
        if msg.channel == "web":
            if msg.conversation_id:
                rec = await manager.require(msg.conversation_id)
                if rec.pinned and rec.channel != "web":
                    raise ReadOnlyConversation(rec.id)
                return rec
            async with self._contact_lock(identity_key):
                return await manager.most_recent("web") or await manager.create("web")
        if msg.channel in THREADED_CHANNELS:
            return await self._resolve_thread(msg)
        async with self._contact_lock(identity_key):
            rec = await manager.pinned_for(identity_key)
            if rec is None:
                rec = await manager.create(
                    msg.channel,
                    identity_key=identity_key,
                    pinned=True,
                    participants=[msg.sender_name or msg.sender_id],
                    channel_meta={
                        "chatId": msg.chat_id,
                        "contact": msg.sender_name or msg.sender_id,
                    },
                    reason="first_contact",
                )
        return rec

    async def _resolve_thread(self, msg: InboundMessage) -> ConversationRecord:
        """The thread's conversation (:meth:`_find_thread`), else a new one."""
        rec = await self._find_thread(msg)
        if rec is not None:
            return rec
        root = msg.message_ref or msg.message_id
        return await self.s.conversations.create(
            msg.channel,
            identity_key=f"{msg.channel}-thread:{root}",
            pinned=True,
            participants=[msg.sender_name or msg.sender_id],
            channel_meta={
                "chatId": msg.chat_id,
                "subject": msg.subject or "",
                "contact": msg.sender_name or msg.sender_id,
            },
            reason="first_contact",
        )

    async def _find_thread(self, msg: InboundMessage) -> ConversationRecord | None:
        """E-mail: In-Reply-To, then References, then (bounded) subject + sender."""
        manager = self.s.conversations
        for ref in msg.thread_refs:
            conv_id = await self.s.index.conversation_for_ref(msg.channel, ref)
            if conv_id:
                rec = await manager.require(conv_id)
                if not rec.pinned and rec.identity_key:  # /new moved the thread on
                    rec = await manager.pinned_for(rec.identity_key) or rec
                return rec
        subject = normalise_subject(msg.subject)
        # A reply whose references we never saw, or that came without any (some phone
        # and web clients drop In-Reply-To and References but keep "Re:").
        if subject and (msg.thread_refs or _REPLY_SUBJECT.match(msg.subject or "")):
            window = self.s.config.channels.email.subject_thread_window_days
            for rec in await manager.list(channel=msg.channel, limit=50, pinned=True):
                if (
                    normalise_subject(rec.channel_meta.get("subject")) == subject
                    and rec.channel_meta.get("chatId") == msg.chat_id
                    and _age_days(rec.updated) <= window
                ):
                    return rec
        return None

    def _turn_metadata(self, msg: InboundMessage) -> dict[str, Any]:
        meta: dict[str, Any] = {"messageId": msg.message_id, "chatId": msg.chat_id}
        if msg.message_ref and msg.message_ref != msg.message_id:
            meta["messageRef"] = msg.message_ref
        if msg.thread_refs:
            meta["threadRefs"] = list(msg.thread_refs)
        if msg.subject:
            meta["subject"] = msg.subject
        if msg.attachments:
            meta["attachments"] = [asdict(a) for a in msg.attachments]
        meta.update(msg.metadata)
        return meta

    def _target(self, msg: InboundMessage) -> ReplyTarget:
        refs = tuple(reversed(msg.thread_refs))
        if msg.message_ref:
            refs = (*refs, msg.message_ref)
        return ReplyTarget(
            channel=msg.channel,
            chat_id=msg.chat_id,
            in_reply_to=msg.message_ref or msg.message_id,
            thread_refs=tuple(dict.fromkeys(refs)),
            subject=msg.subject,
            metadata=recipients(msg.metadata),
        )

    async def _owner_flow(self, msg: InboundMessage, identity_key: str) -> None:
        command = parse_command(msg.text) if msg.addressed else None
        if command is not None and command[0] in DETACHED_COMMANDS:
            # A dashboard tab with no conversation yet, or a mail that starts a thread:
            # /search, /help, /status answer without creating an (empty) conversation to
            # record them in.
            if (msg.channel == "web" and msg.conversation_id is None) or (
                msg.channel in THREADED_CHANNELS and await self._find_thread(msg) is None
            ):
                await self._run_command(msg, None, *command)
                return
        rec = await self._interrupted_new(msg, command) or await self._resolve(msg, identity_key)
        if command is not None:
            await self._run_command(msg, rec, *command)
            return
        await self._record_and_reply(
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

    async def _record_and_reply(
        self,
        msg: InboundMessage,
        rec: ConversationRecord,
        sender: str | None,
        owner: bool | None = None,
    ) -> None:
        """``owner``: in a group, whether the sender is the owner (by id and aliases; the
        display name proves nothing); None elsewhere (the owner's own conversations)."""
        extra: dict[str, Any] = {}
        if not msg.addressed:
            extra["awaitReply"] = False
        if owner is not None:
            extra["fromOwner"] = owner  # read again when a pending reply is resumed
        rec, line = await self.s.conversations.append_turn(
            rec.id,
            "user",
            msg.text,
            channel=msg.channel,
            sender=sender,
            metadata=self._turn_metadata(msg),
            **extra,
        )
        if (
            msg.channel != "web"
            and rec.channel_meta.get("chatId") != msg.chat_id
            and rec.channel == msg.channel
        ):
            await self.s.conversations.set_channel_meta(rec.id, chatId=msg.chat_id)
        if msg.addressed:
            self.s.replies.submit(
                rec.id,
                line["turnNumber"],
                msg.text,
                self._target(msg),
                sender=sender,
                owner=True if owner is None else owner,
                album=msg.metadata.get("media_group"),
            )

    async def _run_command(
        self,
        msg: InboundMessage,
        rec: ConversationRecord | None,
        name: str,
        args: str,
        owner: bool = True,
    ) -> None:
        dedup = f"{msg.channel}:{msg.message_id}:command"
        # "/new" then a message ("/new" on the first line of a mail, the request below
        # it): the text is the fresh conversation's first message, not dropped.
        first = args if name == "new" and owner and args else ""
        if await self.s.outbox.has_key(dedup):
            # A redelivered command (its answer is queued already): never run it twice,
            # a second /new would create a second conversation.
            if first:
                # Its first message was not recorded (recorded, its id would have made
                # this a duplicate message): the write failed after the answer was
                # queued. It goes to the conversation that /new made, not lost.
                await self._record_first_message(msg, first, dedup)
                return
            log.info("duplicate %s command %s dropped", msg.channel, msg.message_id)
            return
        effects = owner and has_effects(name, args)
        # A claim left by a crash: the command was recorded and may have taken effect.
        run = await self.runs.find(msg.channel, msg.message_id) if effects else None
        if rec is not None and run is None:
            await self.s.conversations.append_event(
                rec.id,
                "command",
                command=f"/{name}",
                args=args or None,
                channel=msg.channel,
                sender=msg.sender_id,
                # (a photo answering Telegram's Reply prompt: what came, though not sent)
                metadata={"messageId": msg.message_id}
                | (
                    {"attachments": [asdict(a) for a in msg.attachments]} if msg.attachments else {}
                ),
            )
        if effects and run is None:
            # Claimed (synced) after its record and before any effect: a redelivery
            # after a crash before the answer below finds the claim and completes the
            # command instead of running it again (a second /new made a second
            # conversation). A crash before the claim records the command twice, never
            # not at all.
            effect = {"conversation": new_conversation_id()} if name == "new" else {}
            if name == "new" and rec is not None:
                effect["previous"] = rec.id
            run = await self.runs.claim(msg.channel, msg.message_id, name, effect)
        if owner:
            result = await self.commands.run_owner(name, args, msg, rec, run)
        elif name == "new":
            # Another member of the owner's group: the group conversation is the owner's
            # record, and /search would show the owner's conversations. Only /help.
            result = CommandResult("That command is not available here.")
        elif name == "help":
            result = CommandResult(GROUP_MEMBER_HELP)  # not a stranger's "/new - start over"
        else:
            result = await self.commands.run_stranger(name, args, _no_party(msg))
        if result.switched_to is not None and msg.channel in THREADED_CHANNELS and not first:
            # (with a first message, its turn records the mail's refs: recorded here, a
            # failure to write that turn made the redelivery a duplicate, the text lost)
            await self.s.conversations.record_message_ref(
                result.switched_to.id, msg.channel, msg.message_ref or msg.message_id, "in"
            )
        target = self._target(msg)
        answer = self.s.outbox.insert_unit(
            OutboundMessage(
                channel=msg.channel,
                chat_id=msg.chat_id,
                text=result.text,
                kind="command",
                conversation_id=getattr(result.switched_to or rec, "id", None),
                in_reply_to=target.in_reply_to,
                thread_refs=target.thread_refs,
                subject=msg.subject,
                metadata={
                    **result.extra,
                    "command": name,
                    **({"switchedTo": result.switched_to.id} if result.switched_to else {}),
                },
            ),
            dedup_key=dedup,
        )
        # The answer's row now records that the command ran: the claim goes with it.
        await self.s.state.run(answer if run is None else self.runs.release_unit(run, answer))
        self.s.outbox.wake(msg.channel)
        if first and result.switched_to is not None:
            await self._record_and_reply(
                replace(msg, text=first),
                result.switched_to,
                sender=None if msg.channel == "web" else msg.sender_id,
            )

    async def _record_first_message(self, msg: InboundMessage, text: str, dedup: str) -> None:
        """Record the first message of a redelivered ``/new <text>`` in the conversation
        that the command's queued answer names."""
        conv_id = await self.s.outbox.conversation_for_key(dedup)
        rec = await self.s.conversations.get(conv_id) if conv_id else None
        if rec is None:
            log.warning(
                "first message of %s /new %s: its conversation is gone", msg.channel, msg.message_id
            )
            return
        log.info("recording the first message of %s /new %s", msg.channel, msg.message_id)
        await self._record_and_reply(
            replace(msg, text=text), rec, sender=None if msg.channel == "web" else msg.sender_id
        )

    async def _group_flow(self, msg: InboundMessage) -> None:
        key = f"{msg.channel}:group:{msg.group_id}"
        async with self._contact_lock(key):
            rec = await self.s.conversations.pinned_for(key)
            if rec is None:
                rec = await self.s.conversations.create(
                    msg.channel,
                    identity_key=key,
                    pinned=True,
                    participants=[],
                    channel_meta={
                        "chatId": msg.chat_id,
                        "groupId": msg.group_id,
                        "contact": msg.group_title or msg.group_id,
                    },
                    reason="first_contact",
                )
        is_owner = self.s.identities.match(msg.channel, msg.sender_id, msg.sender_aliases)
        command = parse_command(msg.text) if msg.addressed else None
        if command is not None:
            await self._run_command(msg, rec, *command, owner=is_owner is not None)
            return
        await self._record_and_reply(
            msg, rec, sender=msg.sender_name or msg.sender_id, owner=is_owner is not None
        )

    async def _alert_owner_storage(self, exc: OSError) -> None:
        if self._storage_alerted:
            return
        self._storage_alerted = True
        text = (
            f"Storage problem: I cannot write messages to disk ({exc.strerror or exc}). "
            "Incoming messages are held in memory and retried; please free disk space."
        )
        await self.s.alert_owner(text)


def _age_days(timestamp: str) -> float:
    from datetime import datetime

    from bot.events import utcnow

    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (utcnow() - then).total_seconds() / 86400


def _no_party(msg: InboundMessage) -> PartyRecord:
    return PartyRecord(
        id="",
        channel=msg.channel,
        party_key=msg.sender_id,
        display_name=None,
        chat_id=msg.chat_id,
        tier="known",
        tier_source="group",
        created="",
        updated="",
    )
