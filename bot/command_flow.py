"""A slash command from the owner's side: recorded, run at most once, answered.

The router hands over every command written in an owner conversation or the owner's
group (a third party's own commands go through bot/strangers.py). Separate from the
router because running a command exactly once across crashes and redeliveries (the
outbox dedup key, the claims of bot/command_runs.py) is its own protocol.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from bot.command_runs import CommandRun, CommandRuns, has_effects
from bot.command_syntax import first_message, parse_command
from bot.commands import GROUP_MEMBER_HELP, CommandResult, Commands
from bot.events import InboundMessage, OutboundMessage, placement
from bot.index import ConversationRecord
from bot.parties import PartyRecord
from bot.resolver import THREADED_CHANNELS
from bot.transcript_lines import new_conversation_id
from bot.turn_recorder import TurnRecorder, reply_target

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

RECORDED_KEPT = 1024  # commands recorded and not answered yet, remembered at most


class CommandFlow:
    """Runs the owner's (and the owner's group members') slash commands."""

    def __init__(
        self,
        services: Services,
        commands: Commands,
        runs: CommandRuns,
        turns: TurnRecorder,
        contact_lock: Callable[[str], asyncio.Lock],
    ) -> None:
        self.s = services
        self.commands = commands
        self.runs = runs
        self.turns = turns
        # The router's lock per identity key (bot/resolver.py), held by /new between
        # unpinning the conversation and pinning the fresh one.
        self._contact_lock = contact_lock
        # Commands recorded in their conversation whose claim or answer state.db has not
        # taken yet (channel, message id, conversation): a retry records them no more.
        self._recorded: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    async def run(
        self,
        msg: InboundMessage,
        rec: ConversationRecord | None,
        name: str,
        args: str,
        owner: bool = True,
    ) -> None:
        """Record ``/name args`` in ``rec`` (None: a command needing no conversation),
        run it unless it ran already, queue its answer; ``owner``: False for another
        member of the owner's group."""
        dedup = f"{msg.channel}:{msg.message_id}:command"
        # "/new" then a message ("/new" on the first line of a mail, the request below
        # it): the text is the fresh conversation's first message, not dropped.
        # A mail's closing alone ("Thanks,\nOlivia") is no first message (first_message).
        first = first_message(msg.channel, args) if name == "new" and owner else ""
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
        recorded = (msg.channel, msg.message_id, rec.id if rec is not None else "")
        # Recorded once per message: while state.db refused the claim (or the answer) and
        # the transcripts took writes, every retry (the router's, then each round of the
        # spool's, for as long as the outage lasted) recorded the command again before
        # session 39, and one /rename showed as dozens of commands.
        if rec is not None and run is None and recorded not in self._recorded:
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
            self._note_recorded(recorded)
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
        if owner and name == "new" and rec is not None and rec.identity_key:
            # No pinned conversation for a moment: an escalation to the owner (from a
            # party on another channel) that came then created one of its own, and the
            # owner had two, the escalation in the one no longer pinned.
            async with self._contact_lock(rec.identity_key):
                rec = await self._still_pinned(rec, run)
                result = await self.commands.run_owner(name, args, msg, rec, run)
        elif owner:
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
        target = reply_target(msg)
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
                    **placement(msg.metadata),
                    "command": name,
                    **({"switchedTo": result.switched_to.id} if result.switched_to else {}),
                },
            ),
            dedup_key=dedup,
        )
        # The answer's row now records that the command ran: the claim goes with it.
        await self.s.state.run(answer if run is None else self.runs.release_unit(run, answer))
        self._recorded.pop(recorded, None)
        self.s.outbox.wake(msg.channel)
        if first and result.switched_to is not None:
            await self._first_message(msg, first, result.switched_to)

    async def _record_first_message(self, msg: InboundMessage, text: str, dedup: str) -> None:
        """The first message of a redelivered ``/new <text>``, in the conversation that
        the command's queued answer names (:meth:`_first_message`)."""
        conv_id = await self.s.outbox.conversation_for_key(dedup)
        fresh = await self.s.conversations.get(conv_id) if conv_id else None
        if fresh is None:
            log.warning(
                "first message of %s /new %s: its conversation is gone", msg.channel, msg.message_id
            )
            return
        log.info("recording the first message of %s /new %s", msg.channel, msg.message_id)
        await self._first_message(msg, text, fresh)

    async def _still_pinned(
        self, rec: ConversationRecord, run: CommandRun | None
    ) -> ConversationRecord:
        """The contact's pinned conversation as it is now that /new holds its lock:
        ``rec`` was looked up before, and a /new that came at the same moment may have
        unpinned it since; both then started a conversation, and the contact had several
        pinned (before session 39). A resumed run keeps the one it was claimed in."""
        if (run is not None and run.resumed) or not rec.identity_key:
            return rec
        now = await self.s.conversations.get(rec.id)
        if now is not None and now.pinned:
            return now
        return await self.s.conversations.pinned_for(rec.identity_key) or now or rec

    async def _first_message(
        self, msg: InboundMessage, text: str, fresh: ConversationRecord
    ) -> None:
        """The first message of ``/new text`` in the fresh conversation: recorded and
        answered, or, when it is a command itself ("/new /model haiku"), run there; it
        was a message to the model, which was asked (and paid) to answer "/model haiku"
        (before session 39)."""
        then = replace(msg, text=text, message_id=f"{msg.message_id}:then")
        command = parse_command(text)
        if command is not None:
            await self.run(then, fresh, *command)
            return
        await self.turns.record_and_reply(
            replace(msg, text=text), fresh, sender=None if msg.channel == "web" else msg.sender_id
        )

    def _note_recorded(self, key: tuple[str, str, str]) -> None:
        """Remember that the command ``key`` names is recorded until its answer is
        queued; the oldest forgotten past :data:`RECORDED_KEPT` (a restart forgets all:
        a redelivery then records it again, as a crash before the claim always did)."""
        self._recorded[key] = None
        while len(self._recorded) > RECORDED_KEPT:
            self._recorded.popitem(last=False)


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
