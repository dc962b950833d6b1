"""What the owner is told about a third party: an escalation, an edit's notice.

The owner-facing half of the stranger flow (:class:`bot.strangers.StrangerFlow` is built
on :class:`PartyEscalations`, beside :class:`bot.party_sends.PartySends`, the messages to
a party): an escalation is recorded, written to the owner's pinned conversation on the
escalation channel (which it may create), which it titles after the parties who
escalated there, and queued with Trust / Block / Reply actions
(:meth:`PartyEscalations.escalate`), within the hourly budget of all parties'
escalations; a party's edit of a message escalated before gets a short notice
(:meth:`PartyEscalations.notice_edit`, :mod:`bot.party_edits`). Also used by a restart
(:mod:`bot.party_resume`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.events import Attachment, InboundMessage, OutboundMessage, iso, utcnow
from bot.graphemes import cut, isolate
from bot.labels import escalated_parties, escalation_title, is_escalation_titled
from bot.owner_notices import notice_due
from bot.parties import NO_VISIBLE_TEXT, PartyRecord, shown_name, shows_nothing, visible
from bot.party_answers import answer_yourself, our_addresses, reply_actions
from bot.party_edits import edit_notice, edited_words, message_key
from bot.party_lines import answered_elsewhere

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

HELD_NOTICE = (
    "More strangers are writing than I pass on here: {count} escalations in the last hour. "
    "The others wait in the dashboard's list of escalations (/status counts them); new ones "
    "come here again once it is quieter."
)


class PartyEscalations:
    """Escalations about a party and notices of their edits (a base of
    :class:`bot.strangers.StrangerFlow`)."""

    s: Services
    # The router's lock per identity key: an escalation that creates the owner's
    # pinned conversation must not race the owner's own first message.
    _contact_lock: Callable[[str], asyncio.Lock]

    async def _escalations_last_hour(self) -> int:
        """All parties' escalations of the last hour (the one just recorded included),
        counted in the index: a restart resets nothing."""
        return await self.s.external.escalations_since(iso(utcnow() - timedelta(hours=1)))

    async def escalations_in_budget(self) -> bool:
        """Whether the escalations of the last hour are within
        ``trust.escalations_per_hour``."""
        return await self._escalations_last_hour() <= self.s.config.trust.escalations_per_hour

    async def _within_budget(self, channel: str, key: str) -> bool:
        """Whether the escalation just recorded may go to the owner's chat: at most
        ``trust.escalations_per_hour`` of all parties' do (counted in the index, so a
        restart resets nothing). Past it the owner is told once an hour (across
        restarts, :mod:`bot.owner_notices`) how many there are; their pinned
        conversation and chat are not flooded by a stranger who takes a new address
        for every message."""
        count = await self._escalations_last_hour()
        if count <= self.s.config.trust.escalations_per_hour:
            return True
        log.warning("%d escalations in the last hour: this one is listed, not sent", count)
        rec = await self.s.conversations.pinned_for(key)
        chat_id = (rec.channel_meta.get("chatId") if rec else None) or (
            self.s.identities.address_for(channel)
        )
        if chat_id and await notice_due(self.s.state, "escalations_held"):
            await self.s.outbox.enqueue(
                OutboundMessage(
                    channel=channel,
                    chat_id=str(chat_id),
                    text=HELD_NOTICE.format(count=count),
                    kind="notice",
                    conversation_id=rec.id if rec else None,
                )
            )
        return False

    async def escalate(
        self,
        party: PartyRecord,
        text: str,
        standing: str = "not a known contact",
        *,
        said: InboundMessage,
        attachments: Sequence[Attachment] | None = None,
        refs: Sequence[str] | None = None,
    ) -> None:
        """Tell the owner, on the configured channel, with Trust / Block / Reply actions
        (no Trust for a known party);
        ``standing``: what the party is to the owner, as the message says it; ``said``:
        their message escalated (the last, for an album), where a /reply goes;
        ``attachments``: what came with it (an album's, else ``said``'s): photos follow
        the escalation on Telegram (:func:`shown_files`); ``refs``: the messages it
        quotes (an album's, else ``said``), whose edits the owner is told of
        (:mod:`bot.party_edits`)."""
        quoted = quoted_words(text)
        elsewhere = answered_elsewhere(party, said)
        goes = (
            f"\nTheir message asks for answers at {_listed(elsewhere)}, not the address it"
            " came from: a /reply goes there."
            if elsewhere
            else ""
        )
        channel = self.s.config.escalation_channel()
        files, files_said = shown_files(
            said.attachments if attachments is None else attachments,
            said.channel == channel == "telegram",
        )
        # A known party is trusted already: "/trust to let me answer them" offered what
        # they have (their mail not verified, a bounce, no model configured; session 41).
        trust = party.tier != "known"
        body = (
            f"Message from {_sender(party)}, {standing} (id {party.id}):\n"
            f"{quoted}{goes}{files_said}\n"
            + (f"/trust {party.id} to let me answer them, " if trust else "")
            + f"/block {party.id} to ignore them, "
            # /replyall beside /reply for a mail that went to others too (session 41)
            + answer_yourself(party, said, our_addresses(self.s.config))
        )
        quotes = list(refs) if refs is not None else [message_key(said)]
        await self.s.external.add_escalation(party, body, refs=quotes)
        actions = (
            *((("Trust", f"/trust {party.id}"),) if trust else ()),
            ("Block", f"/block {party.id}"),
            # and a Reply all button beside Reply (session 42)
            *reply_actions(party, said, our_addresses(self.s.config)),
        )
        await self._tell_owner(party, body, actions, files)

    async def notice_edit(self, party: PartyRecord, msg: InboundMessage) -> None:
        """Tell the owner that ``party`` edited a message of theirs escalated before
        (``msg``, the edit; :mod:`bot.party_edits`), as an escalation goes: recorded,
        then sent within the hourly budget of all parties'. It names ``/replyall`` (and
        has its button) as the escalation does: before session 42 only ``/reply``."""
        ourselves = our_addresses(self.s.config)
        answer = answer_yourself(party, msg, ourselves)
        body = edit_notice(_sender(party), party.id, quoted_words(edited_words(msg)), answer)
        await self.s.external.add_escalation(party, body, refs=[message_key(msg)], edit=True)
        await self._tell_owner(party, body, reply_actions(party, msg, ourselves), [])

    async def _tell_owner(
        self,
        party: PartyRecord,
        body: str,
        actions: tuple[tuple[str, str], ...],
        files: list[dict[str, str | None]],
    ) -> None:
        """Write an escalation recorded in ``party``'s file to the owner's pinned
        conversation on the escalation channel (created if need be) and queue it there,
        within the hourly budget."""
        channel = self.s.config.escalation_channel()
        if channel == "web" or channel not in self.s.channels:
            return  # the dashboard shows pending escalations
        owner = self.s.identities.first(channel)
        if owner is None:
            log.warning("no owner identity on %s to escalate to", channel)
            return
        key = f"{channel}:{owner}"
        address = self.s.identities.address_for(channel)
        if not await self._within_budget(channel, key):
            return  # recorded and pending (above): listed, not sent
        async with self._contact_lock(key):
            rec = await self.s.conversations.pinned_for(key)
            if rec is None:
                if address is None:
                    log.warning("cannot reach the owner on %s yet (no numeric id)", channel)
                    return
                rec = await self.s.conversations.create(
                    channel,
                    identity_key=key,
                    pinned=True,
                    participants=[owner],
                    # Whose chat it is, as the router records for one the owner starts:
                    # without it the dashboard labelled it with the owner's bare id.
                    channel_meta={"chatId": address, "contact": self.s.config.owner.name},
                    reason="escalation",
                )
            chat_id = rec.channel_meta.get("chatId") or address
            if not chat_id:
                return
            await self.s.conversations.append_event(
                rec.id, "escalation", partyId=party.id, text=body
            )
            # Under the lock: two parties escalating at once would each title the
            # conversation after the escalations it read, and the later one lose one.
            await self._title_escalations(rec.id, party)
        await self.s.outbox.enqueue(
            OutboundMessage(
                channel=channel,
                chat_id=str(chat_id),
                text=body,
                kind="escalation",
                conversation_id=rec.id,
                party_id=party.id,
                actions=actions,
                subject=f"Message from {party.who}",
                metadata={"files": files} if files else {},
            )
        )

    async def _title_escalations(self, conv_id: str, party: PartyRecord) -> None:
        """Name a conversation that holds only escalations after the parties who wrote:
        untitled, the dashboard showed it as "New conversation" beside an id; titled
        after the first party only, it hid everyone who escalated there since.

        The title is an automatic one (``throughTurn`` 0): a manual name always wins,
        and the naming at turn 5 replaces it once the owner talks there."""
        rec = await self.s.conversations.get(conv_id)
        if rec is None or not is_escalation_titled(rec):
            return
        parties = await escalated_parties(self.s, conv_id, known=party)
        title = escalation_title(parties or [party])
        if title != rec.title:
            await self.s.conversations.set_title_topics(conv_id, title, [], 0)


def attachments_of(said: Sequence[InboundMessage]) -> list[Attachment]:
    """What came with a message or an album's photos, in order."""
    return [a for m in said for a in m.attachments]


def quoted_words(text: str) -> str:
    """A party's ``text`` as an escalation quotes it: visible characters only, at most
    500, every line after ``> `` and isolated, in quotation marks."""
    quoted = visible(text.strip())
    quoted = quoted if len(quoted) <= 500 else cut(quoted, 497) + "..."
    # Every line of theirs is marked as quoted: a line of their text ("/trust p..."
    # or "Message from Mom, a known contact") cannot pass for one of ours; and each
    # is isolated, so right-to-left words do not reorder the marks around them.
    if shows_nothing(quoted):
        # Said so, unquoted: not their words. (Their file keeps what they sent.)
        return f"> {NO_VISIBLE_TEXT}"
    lines = [isolate(line) for line in quoted.splitlines()]
    lines[0] = "\u201c" + lines[0]
    lines[-1] += "\u201d"
    return "\n".join(f"> {line}" for line in lines)


def _sender(party: PartyRecord) -> str:
    """Who an escalation says wrote: a Telegram display name is whatever the sender
    typed (the owner's own name, "Mom"), so their account's id stands beside it, as an
    e-mail address does (:attr:`PartyRecord.who`)."""
    if party.channel == "telegram" and party.display_name and party.display_name != party.party_key:
        return f"{isolate(party.who)} (telegram user {party.party_key})"
    return f"{isolate(party.who)} ({party.channel})"  # party.label, its name isolated


def _listed(addresses: list[str], most: int = 3) -> str:
    """Addresses as a sentence names them: the first ``most``, and how many more."""
    shown = ", ".join(isolate(a) for a in addresses[:most])
    more = len(addresses) - most
    return shown + (f" and {more} more" if more > 0 else "")


# The most of a stranger's photos one escalation shows (an album holds up to 10).
SHOWN_PHOTOS = 10


def shown_files(
    attachments: Sequence[Attachment], relay: bool
) -> tuple[list[dict[str, str | None]], str]:
    """The photos an escalation passes on to the owner (by Telegram file id, when both
    the party and the escalation are on Telegram: ``relay``), and the line saying so.
    Before session 40 the owner got "[photo] the damage to your car" and never the
    photo. A document is named, not passed on: sent on by the bot it would look like the
    assistant's own file, under a name the stranger chose ("invoice.pdf.exe")."""
    photos = [a for a in attachments if relay and a.kind == "photo" and a.ref]
    photos = photos[:SHOWN_PHOTOS]
    files = [{"kind": a.kind, "ref": a.ref, "name": a.name} for a in photos]
    said = ""
    if photos:
        said = (
            "\nTheir photo follows."
            if len(photos) == 1
            else f"\nTheir {len(photos)} photos follow."
        )
    documents = [a for a in attachments if a.kind == "document"]
    if documents:
        names = ", ".join(f'"{shown_name(a.name)}"' if a.name else "a document" for a in documents)
        said += (
            f"\nThey sent {names}: not passed on to you (a file from someone you have not"
            " trusted could be anything)."
        )
    return files, said
