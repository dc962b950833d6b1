"""Which owner conversation an inbound message belongs to.

The router's owner and group flows ask here: the dashboard's named (or most recent)
conversation, a contact's or a group's pinned conversation (created at first contact),
or an e-mail thread's (found by its references, else by subject and sender). Separate
from the router because finding a thread is a set of rules of its own, and because the
per-contact locks held while a pinned conversation is found or created are shared with
the stranger flow (an escalation can create the owner's pinned conversation too).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bot.events import InboundMessage
from bot.index import ConversationRecord
from bot.mail_subjects import is_reply_subject, own_message_id, same_subject, thread_subject
from bot.record_cache import keyed_locks

if TYPE_CHECKING:
    from bot.services import Services

THREADED_CHANNELS = {"email"}
# The subjects a thread's conversation keeps beside its first (channelMeta "subjects"):
# the latest ones, each once.
KEPT_SUBJECTS = 8


class ReadOnlyConversation(Exception):
    """A pinned channel conversation cannot be written to from the dashboard."""


def normalise_subject(subject: str | None) -> str:
    """A mail subject without its reply and forward prefixes (any language, also behind
    a gateway's tag: :mod:`bot.mail_subjects`), case-folded, spaces collapsed."""
    return thread_subject(subject)


class ConversationResolver:
    """Finds or creates the owner-side conversation of a message."""

    def __init__(self, services: Services) -> None:
        self.s = services
        # identity key -> lock held while finding or creating its pinned conversation, so
        # racing first messages (or an escalation) never create two.
        self._contact_locks = keyed_locks()  # held or waited for only (bounded)

    def contact_lock(self, key: str) -> asyncio.Lock:
        """The lock of one identity key (created on first use)."""
        lock = self._contact_locks.get(key)
        if lock is None:
            lock = self._contact_locks[key] = asyncio.Lock()
        return lock

    async def owner(self, msg: InboundMessage, identity_key: str) -> ConversationRecord:
        """The owner's conversation for ``msg``: the dashboard's, the thread's or the
        contact's pinned one. Raises :class:`ReadOnlyConversation` for a dashboard write
        to another channel's pinned conversation."""
        manager = self.s.conversations
        if msg.channel == "web":
            if msg.conversation_id:
                rec = await manager.require(msg.conversation_id)
                if rec.pinned and rec.channel != "web":
                    raise ReadOnlyConversation(rec.id)
                return rec
            async with self.contact_lock(identity_key):
                return await manager.most_recent("web") or await manager.create("web")
        if msg.channel in THREADED_CHANNELS:
            return await self.thread(msg)
        async with self.contact_lock(identity_key):
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

    async def group(self, msg: InboundMessage) -> ConversationRecord:
        """The pinned conversation of the group ``msg`` was written in."""
        key = f"{msg.channel}:group:{msg.group_id}"
        async with self.contact_lock(key):
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
        return rec

    async def thread(self, msg: InboundMessage) -> ConversationRecord:
        """The thread's conversation (:meth:`find_thread`), else a new one."""
        rec = await self.find_thread(msg)
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

    async def find_thread(self, msg: InboundMessage) -> ConversationRecord | None:
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
        if subject and self._subject_rule_applies(msg):
            window = self.s.config.channels.email.subject_thread_window_days
            for rec in await manager.list(channel=msg.channel, limit=50, pinned=True):
                if (
                    _has_had(rec, subject)
                    and rec.channel_meta.get("chatId") == msg.chat_id
                    and _age_days(rec.updated) <= window
                ):
                    return rec
        return None

    def _subject_rule_applies(self, msg: InboundMessage) -> bool:
        """Whether ``msg`` may join a conversation by its subject: a reply that came
        without references (some phone and web clients drop In-Reply-To and References
        but keep "Re:"), or whose references we lost although they are our own mails',
        read by nobody but the owner and the assistant.

        Before session 39 any mail whose references were all unknown took the rule: the
        owner's reply-all to a stranger's thread "Invoice" (references we never saw),
        the assistant in Cc, joined the owner's private "Invoice" conversation of last
        week, and its answer, written with that conversation in context, went to the
        stranger too."""
        if self._others_addressed(msg):
            return False
        refs = [r for r in msg.thread_refs if r.startswith("<")]
        if not refs:
            # (a reference that is no Message-ID, the e-mail channel's Outlook thread,
            # ``thread-index:...``, names no mail: a gateway dropped the real ones)
            return is_reply_subject(msg.subject)
        address = self.s.config.channels.email.address
        return any(own_message_id(ref, address) for ref in refs)

    def _others_addressed(self, msg: InboundMessage) -> bool:
        """Whether ``msg`` was sent (To, Cc) to anyone besides the assistant and the
        owner's own addresses: a thread of theirs too, which no conversation of the
        owner's with the assistant is (unless its references say so)."""
        assistant = (self.s.config.channels.email.address or "").strip().lower()
        for address in (*msg.metadata.get("to", ()), *msg.metadata.get("cc", ())):
            address = str(address).strip().lower()
            if address and address != assistant:
                if self.s.identities.match(msg.channel, address) is None:
                    return True
        return False


def thread_subjects(rec: ConversationRecord) -> list[str]:
    """The subjects ``rec``'s thread has had: the one it started with (``channelMeta``
    ``subject``, which names it) and the later ones of its mails (``subjects``)."""
    later = rec.channel_meta.get("subjects")
    found = [rec.channel_meta.get("subject"), *(later if isinstance(later, list) else ())]
    return [s for s in found if isinstance(s, str) and s]


def _has_had(rec: ConversationRecord, subject: str) -> bool:
    """Whether ``rec``'s thread has had ``subject`` (normalised): also as our answers
    write it, cut to :data:`bot.mail_subjects.MAX_SUBJECT` (session 41)."""
    return any(same_subject(subject, normalise_subject(s)) for s in thread_subjects(rec))


def new_subjects(rec: ConversationRecord, msg: InboundMessage) -> list[str] | None:
    """``rec``'s ``subjects`` with ``msg``'s added, when the thread has not had it (a mail
    that changed the subject, "Re: Trip - now Porto"); None when it has, or has none.

    Before session 39 the subject rule compared with the subject a conversation started
    with only: the phone's reply without references to "Re: Trip - now Porto" (our
    answers follow the new subject) started a new conversation."""
    subject = normalise_subject(msg.subject)
    if not subject or _has_had(rec, subject):
        return None
    later = rec.channel_meta.get("subjects")
    kept = [s for s in (later if isinstance(later, list) else ()) if isinstance(s, str)]
    return [*kept, str(msg.subject)][-KEPT_SUBJECTS:]


def _age_days(timestamp: str) -> float:
    from bot.events import utcnow
    from bot.moments import parse_moment

    then = parse_moment(timestamp)
    if then is None:
        return float("inf")
    return (utcnow() - then).total_seconds() / 86400
