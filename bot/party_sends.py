"""What is sent to a third party.

The outbound half of the stranger flow (:class:`bot.strangers.StrangerFlow` is built on
:class:`PartySends`): a message to a party is recorded in their file, then queued in the
outbox (:meth:`PartySends.send_to_party`). What the owner is told about a party (an
escalation, an edit's notice) is :mod:`bot.party_escalations`. Apart from the inbound
flow, which decides by tier what a message gets: these are the ways it is given, also
used by the owner's ``/reply`` and by a restart (:mod:`bot.party_resume`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from bot.events import TO_ALL, TO_PARTY_ALONE, Attachment, InboundMessage, OutboundMessage
from bot.parties import PartyRecord
from bot.turn_recorder import reply_target

if TYPE_CHECKING:
    from bot.services import Services

OutboundKind = Literal["reply", "command", "escalation", "acknowledgement", "notice"]


class PartySends:
    """Messages to a party (a base of :class:`bot.known_answers.KnownAnswers` and so
    of :class:`bot.strangers.StrangerFlow`)."""

    s: Services

    async def send_to_party(
        self,
        party: PartyRecord,
        text: str,
        *,
        kind: OutboundKind = "reply",
        dedup: str | None = None,
        answering: InboundMessage | None = None,
        files: Sequence[Attachment] = (),
        answers: str | None = None,
        alone: bool = False,
        to_all: bool = False,
        spent: Mapping[str, Any] | None = None,
    ) -> None:
        """Record and queue a message to a third party (reply, acknowledgement, /reply).

        ``answering``: the message of theirs it answers, whose threading it takes
        (:meth:`queue_to_party`); without one (the owner's ``/reply``, an answer to a
        command) it goes under the party's last message, so a mail client shows it in
        the same thread. ``files``: attachments the party's channel sends on after the
        words, by their ``ref`` (the owner's Telegram photo to a Telegram party);
        ``answers``: the ref of their message the model's reply answers (kept in their
        file, for a restart); ``alone``: the owner's own words, which go to the party
        alone (:data:`~bot.events.TO_PARTY_ALONE`), never to the others their message
        went to, unless ``to_all`` (the owner's ``/replyall``: to them and everyone
        their message went to, :data:`~bot.events.TO_ALL`); ``spent``: the model's
        answer's ``model``, ``usage`` and ``cost`` (:func:`bot.brain.cost.reply_spent`),
        kept on its line in their file."""
        if answering is None:
            answering = await self.s.external.reply_thread(party)
        recorded = " ".join([text, *(f"[{a.name or a.kind}]" for a in files)]).strip()
        await self.s.external.record_outbound(
            party.id, recorded, kind=kind, answers=answers, spent=spent
        )
        await self.queue_to_party(
            party,
            text,
            kind=kind,
            dedup=dedup,
            answering=answering,
            files=files,
            alone=alone,
            to_all=to_all,
        )

    async def queue_to_party(
        self,
        party: PartyRecord,
        text: str,
        *,
        kind: OutboundKind = "reply",
        dedup: str | None = None,
        answering: InboundMessage | None = None,
        files: Sequence[Attachment] = (),
        alone: bool = False,
        to_all: bool = False,
    ) -> None:
        """Queue a message to the party that their file already records
        (:meth:`send_to_party`, or a restart queuing an answer a crash kept from the
        outbox: :mod:`bot.party_resume`), threaded under ``answering`` when given."""
        await self.s.outbox.enqueue(
            self.message_to_party(
                party, text, kind=kind, answering=answering, files=files, alone=alone, to_all=to_all
            ),
            dedup_key=dedup,
        )

    def message_to_party(
        self,
        party: PartyRecord,
        text: str,
        *,
        kind: OutboundKind = "reply",
        answering: InboundMessage | None = None,
        files: Sequence[Attachment] = (),
        alone: bool = False,
        to_all: bool = False,
    ) -> OutboundMessage:
        """The outbox message :meth:`queue_to_party` queues (also what a restart sets
        aside unsent: :mod:`bot.party_resume`)."""
        # threaded as the owner's answers are (In-Reply-To, References, Subject,
        # Reply-To, Outlook's Thread-Index), from the message itself or its line in
        # the party's file (bot.party_lines.answered_message): the same live and
        # after a restart
        target = reply_target(answering) if answering is not None else None
        return OutboundMessage(
            channel=party.channel,
            chat_id=party.chat_id or party.party_key,
            text=text,
            kind=kind,
            party_id=party.id,  # type: ignore[arg-type]
            in_reply_to=target.in_reply_to if target else None,
            thread_refs=target.thread_refs if target else (),
            subject=target.subject if target else None,
            metadata={
                # carried in the outbox row: a send after a restart has it all
                **(dict(target.metadata) if target else {}),
                **(
                    {"files": [{"kind": a.kind, "ref": a.ref, "name": a.name} for a in files]}
                    if files
                    else {}
                ),
                # Before session 40 the owner's /reply to a mail went reply-all (with
                # channels.email.reply_all) to its To and Cc, named nowhere to them.
                # (the owner's /replyall asks for them all, session 41)
                **({TO_ALL: True} if to_all else {TO_PARTY_ALONE: True} if alone else {}),
            },
        )
