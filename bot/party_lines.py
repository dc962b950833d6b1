"""The lines a third party's message adds to their file (``external/{party_id}.jsonl``).

A message in is written as one ``message`` line, after the party's ``meta`` line when it
is their first, and after a ``tier`` event when ``trust.contacts`` names them with a tier
other than the one their file has (the config beats a default, not the owner's choice),
or no longer names them while their tier is the config's (the default tier again): the
rule of :mod:`bot.party_tiers`.
The writing and the mirroring into the index: :class:`bot.external.ExternalStore`.

A message line keeps what an answer to it threads under (:func:`thread_fields`), and
:func:`answered_message` gives the message back from it: every answer to a party (the
model's, an acknowledgement, a command's, the owner's ``/reply``), made live or after a
restart, takes its threading from that message through the owner's one rule
(:func:`bot.turn_recorder.reply_target`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from bot.events import SENT_AT, InboundMessage, placement
from bot.graphemes import isolate
from bot.parties import PartyRecord
from bot.party_tiers import tier_change
from bot.transcript_lines import Line


def reply_to_of(data: Mapping[str, Any]) -> list[str]:
    """Where a message asks to be answered (an e-mail's Reply-To, as the channel lists
    it): ``reply_to`` in a message's metadata, ``replyTo`` in a line of the party's
    file; empty when it names none (answers go to the sender)."""
    listed = data.get("reply_to", data.get("replyTo"))
    if not isinstance(listed, list | tuple):
        return []
    return [a for a in listed if isinstance(a, str)]


def answered_elsewhere(party: PartyRecord, msg: InboundMessage | None) -> list[str]:
    """The addresses other than the party's own where an answer to ``msg`` goes (an
    e-mail's Reply-To, followed as every mail client follows it). The owner is told:
    a mail "From: Your Bank" asking for answers at an attacker's address had the
    owner's /reply confirmed as "Sent to Your Bank" while it went to the attacker."""
    if msg is None:
        return []
    own = party.party_key.strip().lower()
    named = dict.fromkeys(a.strip().lower() for a in reply_to_of(msg.metadata) if "@" in a)
    return [a for a in named if a != own]


def copied_to(party: PartyRecord, msg: InboundMessage | None) -> list[str]:
    """Who else read ``msg`` and would have had a reply-all answer to it (an e-mail's
    ``readers`` with ``channels.email.reply_all``), but for the party's own address and
    those of :func:`answered_elsewhere`: the owner's ``/reply`` goes to none of them
    (:data:`bot.events.TO_PARTY_ALONE`), and the confirmation says so."""
    if msg is None:
        return []
    listed = msg.metadata.get("readers")
    if not isinstance(listed, list | tuple):
        return []
    skip = {party.party_key.strip().lower(), *answered_elsewhere(party, msg)}
    named = dict.fromkeys(a.strip().lower() for a in listed if isinstance(a, str) and "@" in a)
    return [a for a in named if a not in skip]


def everyone_else(
    party: PartyRecord, msg: InboundMessage | None, ourselves: Collection[str]
) -> tuple[list[str], bool]:
    """Whom else a reply-all answer to ``msg`` reaches, as a mail client's reply-all
    computes it (the owner's ``/replyall``, :data:`bot.events.TO_ALL`): its To and Cc
    (the message's ``to`` and ``cc``) but the party's own address, those of
    :func:`answered_elsewhere` (answered anyway) and ``ourselves`` (the assistant's
    addresses), each once, lower case; and whether ``ourselves`` were openly among its
    recipients (not only blind-copied: then the channel answers the party alone)."""
    if msg is None:
        return [], False
    me = {a.strip().lower() for a in ourselves if a}
    listed = [
        a.strip().lower()
        for key in ("to", "cc")
        if isinstance(msg.metadata.get(key), list | tuple)
        for a in msg.metadata[key]
        if isinstance(a, str) and "@" in a
    ]
    skip = {party.party_key.strip().lower(), *answered_elsewhere(party, msg), *me}
    return [a for a in dict.fromkeys(listed) if a not in skip], bool(me & set(listed))


def sent_to(
    party: PartyRecord,
    answering: InboundMessage | None,
    *,
    to_all: bool = False,
    ourselves: Collection[str] = (),
) -> str:
    """Where the owner's words to ``party`` went, as the owner is told (``/reply``, the
    dashboard's Reply), before any full stop: "Sent to Eve (email)", with where their
    message asked answers to go when that is not their own address
    (:func:`answered_elsewhere`, session 38) and the others it went to, who get nothing
    (:func:`copied_to`, session 40). ``to_all``: the owner's ``/replyall``, which goes
    to those others too (:func:`everyone_else`, with ``ourselves``, session 41)."""
    answer = f"Sent to {party.label}"
    elsewhere = answered_elsewhere(party, answering)
    if elsewhere:
        # where it went, as their Reply-To asked: not the address the label names
        answer += f" at {', '.join(elsewhere[:3])}, the address their message asked for"
    if to_all:
        return answer + _to_all_said(party, answering, ourselves)
    others = copied_to(party, answering)
    if others:
        # Before session 40, with reply_all, these got the owner's words too, while the
        # owner was told of the party alone.
        answer += f" alone, not to {listed(others)}, to whom their message also went"
    return answer


def _to_all_said(
    party: PartyRecord, answering: InboundMessage | None, ourselves: Collection[str]
) -> str:
    """What :func:`sent_to` adds for a reply-all: whom else it went to, or why not."""
    others, openly = everyone_else(party, answering, ourselves)
    if others and openly:
        return f" and to everyone else their message went to: {listed(others, 10)}"
    if others:
        # the channel answers them alone (bot.events.TO_ALL): as a mail client would,
        # the reply-all would have told the others that the owner had the mail
        return (
            f" alone, not to {listed(others)}: I was only blind-copied on their message, "
            "and a reply to all would show them that you had it"
        )
    return ": their message went to no one else" if party.channel == "email" else ""


def listed(addresses: Sequence[str], most: int = 3) -> str:
    """Addresses as the owner is told them: the first ``most``, and how many more."""
    shown = ", ".join(isolate(a) for a in addresses[:most])
    return shown + (f" and {len(addresses) - most} more" if len(addresses) > most else "")


def thread_fields(msg: InboundMessage) -> dict[str, Any]:
    """What an answer to ``msg`` threads under, as its line in the party's file keeps
    it: its reference (``replyRef``, an e-mail's Message-ID), ``subject``, the references
    it points back to (``threadRefs``, nearest first), where it asks to be answered
    (``replyTo``), its Outlook thread (``threadIndex``, the channel's reference), and
    whom else it went to and where (:func:`_answer_fields`).
    Before session 30 the file kept the first three only: an answer made or sent after
    a restart had no References chain and no Thread-Index (the channel's memory of the
    mail, which gave them live, is gone then)."""
    reply_to = reply_to_of(msg.metadata)
    thread_index = msg.metadata.get("thread_index")
    return {
        **({"replyRef": msg.message_ref} if msg.message_ref else {}),
        **({"subject": msg.subject} if msg.subject else {}),
        **({"threadRefs": list(msg.thread_refs)} if msg.thread_refs else {}),
        **({"replyTo": reply_to} if reply_to else {}),
        **({"threadIndex": thread_index} if isinstance(thread_index, str) else {}),
        **_answer_fields(msg.metadata),
    }


# What else of a message's metadata decides where its answer goes, kept on its line
# under the same names: an e-mail's ``to`` and ``cc`` as the mail gave them, and the
# ``readers`` the channel found among them (the channel applies reply-all to them when
# it sends, channels/email/outgoing.py: the mail's own rule, live or after a restart;
# our own address stays in them, or a mail we were openly sent could not be told from
# one we were blind-copied on), and the ``topic`` of a chat with topics. Before session
# 31 the file kept none of them: an answer made after a restart went to the sender alone
# where the live one went to all (and to a chat's general topic). A line without them
# (written before) gives none: the answer goes to the sender, as the live rule does
# for a mail with no other recipients.
_ANSWER_LISTS = ("to", "cc", "readers")


def _answer_fields(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``metadata`` (a message's, or a line of the party's file) that
    :data:`_ANSWER_LISTS` names, and its :func:`~bot.events.placement`."""
    kept: dict[str, Any] = {
        key: [a for a in metadata[key] if isinstance(a, str)]
        for key in _ANSWER_LISTS
        if isinstance(metadata.get(key), list | tuple) and metadata[key]
    }
    return {**kept, **placement(metadata)}


def answered_message(party: PartyRecord, line: Mapping[str, Any]) -> InboundMessage:
    """The party's message as it came, from its ``line`` in their file: its words, its
    sender and chat, and its threading and recipients (:func:`thread_fields`), so that
    an answer to it threads and goes where one made when it came did."""
    refs = line.get("threadRefs")
    thread_index = line.get("threadIndex")
    reply_to = reply_to_of(line)
    return InboundMessage(
        channel=party.channel,
        sender_id=party.party_key,
        text=str(line.get("content", "")),
        message_id=str(line.get("messageRef") or ""),
        chat_id=str(line.get("chatId") or party.chat_id or party.party_key),
        sender_name=line.get("name") or party.display_name,
        message_ref=line.get("replyRef"),
        thread_refs=tuple(r for r in refs if isinstance(r, str)) if isinstance(refs, list) else (),
        subject=line.get("subject"),
        metadata={
            **({"reply_to": reply_to} if reply_to else {}),
            **({"thread_index": thread_index} if isinstance(thread_index, str) else {}),
            **_answer_fields(line),
        },
    )


def inbound_lines(
    party_id: str,
    channel: str,
    party_key: str,
    *,
    now: str,
    existing: PartyRecord | None,
    configured: str | None,
    default_tier: str,
    display_name: str | None,
    chat_id: str,
    text: str,
    message_ref: str,
    kind: str,
    thread: Mapping[str, Any],
    addressed: bool,
    album: str | None,
    handles: Sequence[str],
    attachments: Sequence[Mapping[str, Any]] = (),
    sent_at: str | None = None,
) -> list[Line]:
    """The lines of one message from the party (``existing``: their record, None for a
    first message; ``configured``: the tier ``trust.contacts`` gives them, if any;
    ``now``: the lines' time, ISO 8601, when it came; ``thread``: its
    :func:`thread_fields`; ``sent_at``: when it was written, as the channel says)."""
    lines: list[Line] = []
    # the config changed since their last message (bot.party_tiers): written now
    changed = (
        tier_change(existing.tier, existing.tier_source, configured, default_tier)
        if existing is not None
        else None
    )
    if changed is not None:
        tier, source = changed
        lines.append(
            {"type": "event", "event": "tier", "tier": tier, "source": source, "timestamp": now}
        )
    if existing is None:
        tier = configured or default_tier
        lines.append(
            {
                "type": "meta",
                "id": party_id,
                "channel": channel,
                "party": party_key,
                "name": display_name,
                "chatId": chat_id,
                "tier": tier,
                "tierSource": "config" if configured else "default",
                "created": now,
            }
        )
    lines.append(
        {
            "type": "message",
            "direction": "in",
            "content": text,
            "messageRef": message_ref,
            "kind": kind,
            "timestamp": now,
            "name": display_name,
            "chatId": chat_id,
            # what its answers thread under, for those a restart sends or makes and
            # the owner's later /reply: the channel's copy of the mail is in memory only
            **thread,
            **({} if addressed else {"addressed": False}),
            **({"album": album} if album else {}),
            # the sender's handles as of this message (a Telegram @username), so
            # that the owner can name them: "/trust @eve"
            **({"handles": handles} if handles else {}),
            # what came besides the words (a photo's file id, a document's name): the
            # line kept only "[photo] …", and the file was out of reach (session 39)
            **({"attachments": [dict(a) for a in attachments]} if attachments else {}),
            # when it was written (Telegram's date, a mail's Date), its ``timestamp``
            # being when it came: one that came late is labelled so for the model
            # (bot/party_context.py). Before session 42 the file kept no such time, and a
            # contact's message delivered hours late was answered as if just said.
            **({SENT_AT: sent_at} if sent_at else {}),
        }
    )
    return lines
