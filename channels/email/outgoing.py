"""What a mail we send says in its headers: whom it threads under, who gets it, its
subject, whether it is marked automatic, and a Message-ID that a retry keeps.

:func:`compose_outgoing` works out a :class:`~channels.email.compose.ComposedMail` from
an :class:`OutboundMessage` and what the channel remembers of the mail it answers;
:class:`channels.email.adapter.EmailChannel` sends it and does the bookkeeping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence

from bot.config.channels import EmailChannelConfig
from bot.events import TO_ALL, TO_PARTY_ALONE, OutboundMessage
from bot.mail_subjects import OWN_ID_PREFIX, bare_subject, capped_subject
from channels.email.compose import (
    ComposedMail,
    answer_addresses,
    compose,
    one_line,
    references_chain,
    render_actions,
    reply_recipients,
    reply_subject,
)
from channels.email.parsing import ParsedMail
from channels.email.thread_index import ROOT_BYTES, reply_index, root_of, thread_ref

# What marks a mail no person wrote: RFC 3834's header, and Exchange's own, which its
# out-of-office assistant and inbox rules honour (MS-OXCMAIL 2.2.3.2.14; not for
# delivery reports: a bounce of ours still tells us an address is dead).
AUTOMATIC_HEADERS = {
    "Auto-Submitted": "auto-replied",
    "X-Auto-Response-Suppress": "OOF, AutoReply",
}

# The longest id a reply names: after "In-Reply-To: " it fits a line of 998 characters
# (RFC 5322 section 2.1.1; ids are written whole, channels.email.id_folding). No mailer's
# comes near; a stranger's mail may carry anything, and is acknowledged under its id.
MAX_MSGID = 960


def is_msgid(value: str | None) -> bool:
    """Whether ``value`` is a Message-ID in its brackets, short enough to name."""
    return (
        value is not None
        and len(value) <= MAX_MSGID
        and value.startswith("<")
        and value.endswith(">")
        and "@" in value
    )


def answers_automatically(message: OutboundMessage) -> bool:
    """Whether ``message`` answers a third party with no person writing it: an
    acknowledgement, the answer to their command, the model's reply to a known contact
    (keyed ``<channel>:<their message>:reply`` by the core). RFC 3834 wants such mail
    marked ``Auto-Submitted: auto-replied``, which keeps their auto-responder from
    answering it (a mail loop). The owner's own words (``/reply``) and the replies to
    the owner are no such mail."""
    if message.kind == "acknowledgement":
        return True
    if message.party_id is None:
        return False
    if message.kind == "command":
        return True
    return message.kind == "reply" and (message.send_key or "").endswith(":reply")


def stable_message_id(message: OutboundMessage, text: str, address: str) -> str | None:
    """A Message-ID that stays the same when the outbox retries the same entry, so a
    retry after a lost SMTP answer is recognised as the same mail by the receiver,
    and is never that of another mail: it comes from the entry's ``send_key`` (its
    transcript turn or received message, else a random token kept with it), not from
    its row id, which a lost state.db hands out again from 1."""
    domain = address.rpartition("@")[2] or "localhost"
    if message.send_key:
        digest = hashlib.sha256(
            f"{message.send_key}\0{message.conversation_id}\0{text}".encode()
        ).hexdigest()[:32]
        return f"{OWN_ID_PREFIX}{digest}@{domain}>"
    if message.outbox_id is None:
        return None
    # an entry queued by a daemon before session 15 (no send_key): as it was then
    digest = hashlib.sha256(
        f"{message.outbox_id}\0{message.conversation_id}\0{text}".encode()
    ).hexdigest()[:20]
    return f"{OWN_ID_PREFIX}{message.outbox_id}.{digest}@{domain}>"


def reply_all_readers(
    sender: str, to: Sequence[str], cc: Sequence[str], address: str, reply_all: bool
) -> list[str]:
    """Who besides ``sender`` a reply-all reply to a mail (To ``to``, Cc ``cc``) reaches:
    nobody without ``reply_all`` or when we were blind-copied (in neither To nor Cc:
    answering all would show the others the reply, and that we were there at all)."""
    openly = address.lower() in {a.lower() for a in (*to, *cc)}
    if not (reply_all and openly):
        return []
    first, second = reply_recipients(sender, to, cc, [address, sender], True)
    return [*first, *second]


def reply_to_of(message: OutboundMessage, parent: ParsedMail | None, recipient: str) -> list[str]:
    """The Reply-To of the mail ``message`` answers: from the core's reply target (the
    turn keeps it, so a reply sent after a restart has it too), else from the mail as
    the channel remembers it (an acknowledgement, a third party's answer). As asked:
    :func:`~channels.email.compose.answer_addresses` decides how far it is followed."""
    listed = message.metadata.get("reply_to")
    if isinstance(listed, list | tuple):
        return [a for a in listed if isinstance(a, str)]
    if parent is not None and parent.from_addr == recipient:
        return list(parent.reply_to)
    return []


def thread_root(message: OutboundMessage, recent: Mapping[str, ParsedMail]) -> bytes | None:
    """The Outlook thread (a ``Thread-Index`` header block) of the mail ``message``
    answers: from that mail, when the channel remembers it, else from the thread's
    reference the core keeps with the turn (:mod:`channels.email.thread_index`): among
    its thread references (a reply in the thread), or as its ``thread_index`` (the
    mail that began it: a new mail names no thread reference, and its reply sent after
    a restart had no Thread-Index before session 29), when it is the recipient's. None
    for anything that answers no Outlook mail."""
    recipient = message.chat_id.strip().lower()
    parent = recent.get(message.in_reply_to or "") if is_msgid(message.in_reply_to) else None
    if parent is not None and parent.thread_index is not None:
        return parent.thread_index[:ROOT_BYTES] if parent.from_addr == recipient else None
    kept = message.metadata.get("thread_index")
    for ref in (*message.thread_refs, *([kept] if isinstance(kept, str) else [])):
        root = root_of(ref)
        if root is not None and ref == thread_ref(recipient, root):
            return root
    return None


def compose_outgoing(
    message: OutboundMessage,
    text: str,
    subject_given: str | None,
    *,
    address: str,
    cfg: EmailChannelConfig,
    recent: Mapping[str, ParsedMail],
    last_from: Mapping[str, str],
    owner: Collection[str] = (),
) -> tuple[ComposedMail, str]:
    """The mail for ``message`` (its ``text`` and ``subject_given`` made well formed)
    and its subject. ``recent``: the mails we received lately by Message-ID (the one
    answered gives the thread, subject and recipients); ``last_from``: each sender's
    latest Message-ID (an acknowledgement threads under it); ``owner``: the owner's
    addresses (lower case), whose mail is answered at them alone, whatever its
    Reply-To asks. Raises what composing raises (the caller makes that a permanent
    failure)."""
    recipient = message.chat_id.strip().lower()
    in_reply_to = message.in_reply_to if is_msgid(message.in_reply_to) else None
    if in_reply_to is None and message.kind == "acknowledgement":
        in_reply_to = last_from.get(recipient)  # thread the ack under their mail
    parent = recent.get(in_reply_to) if in_reply_to else None
    refs = [r for r in message.thread_refs if is_msgid(r)]
    if parent is not None and not refs:
        refs = list(parent.references)
    subject = subject_given or (parent.subject if parent else None)
    if in_reply_to or (subject and message.kind in ("reply", "command", "acknowledgement")):
        # an answer, also to a mail that had no Message-ID to answer under: it went out
        # under the mail's own subject, without the "Re:" every other answer has
        subject = reply_subject(subject)
    elif not subject:
        subject = f"Message from {cfg.display_name}"
    # within MAX_SUBJECT, as a reply's is: what we write, and the subject the channel
    # remembers of the mail sent (session 41: a 5,000-character one was echoed whole)
    subject = capped_subject(one_line(subject))
    meta = message.metadata
    original_to = list(meta.get("to", parent.to if parent else ()))
    original_cc = list(meta.get("cc", parent.cc if parent else ()))
    # The owner's own words to a third party go to them alone (bot.events.TO_PARTY_ALONE),
    # or to everyone when the owner asks (TO_ALL: /replyall, whatever reply_all says);
    # the model's answer to a known contact and the owner's own mail are answered to all
    # with reply_all. Never to all when we were only blind-copied (reply_all_readers).
    to_all = bool(meta.get(TO_ALL))
    answer_all = bool(
        message.kind == "reply"
        and (to_all or not meta.get(TO_PARTY_ALONE))
        and reply_all_readers(recipient, original_to, original_cc, address, cfg.reply_all or to_all)
    )
    # An answer to a mail goes where it asks (its Reply-To); an escalation or a notice
    # answers no mail of the recipient's and goes to them.
    answered = (
        answer_addresses(recipient, reply_to_of(message, parent, recipient), owner)
        if in_reply_to and message.kind != "escalation"
        else [recipient]
    )
    to, cc = reply_recipients(answered, original_to, original_cc, [address], answer_all)
    headers = dict(AUTOMATIC_HEADERS) if answers_automatically(message) else {}
    root = thread_root(message, recent) if in_reply_to else None
    if root is not None:
        # Outlook files the owner's answer by it, and its Thread-Index then names the
        # thread even when a gateway drops References (channels.email.thread_index).
        headers["Thread-Index"] = reply_index(root)
        headers["Thread-Topic"] = bare_subject(subject)
    composed = compose(
        from_addr=address,
        display_name=cfg.display_name,
        to=to or [recipient],
        cc=cc,
        subject=subject,
        text=render_actions(text, message.actions),
        in_reply_to=in_reply_to,
        references=references_chain(refs, in_reply_to),
        message_id=stable_message_id(message, text, address),
        extra_headers=headers,
        literal=message.as_written,  # an escalation, a command's answer, a readout
    )
    return composed, subject
