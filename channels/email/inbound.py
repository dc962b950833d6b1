"""One fetched mail as the core's :class:`~bot.events.InboundMessage`.

The turn text is what the sender wrote this time (quoted history and signatures
stripped, a forward kept whole and named in the metadata: bot/forwards.py), after a
``Subject: ...`` line when the subject says something the thread has not, followed by
one line per attachment; the sender's ``Authentication-Results`` decide
``identity_verified``; automatic mail (bounces, auto-replies, lists) is handed over
unaddressed, recorded and never answered.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from bot.config.channels import EmailChannelConfig
from bot.events import EMPTY_MESSAGE_LABEL, SENT_AT, InboundMessage, iso
from bot.forwards import FORWARDED
from bot.graphemes import cut
from bot.mail_subjects import capped_subject, is_forward_subject, same_subject
from channels.email.auth import AuthVerdict, verify_sender
from channels.email.compose import answer_addresses, is_reply_subject, one_line, subject_base
from channels.email.dedup import dedup_key
from channels.email.dsn import Bounce
from channels.email.forward_marks import forward_headers
from channels.email.outgoing import reply_all_readers
from channels.email.parsing import ParsedMail, attachment_lines
from channels.email.quotes import body_parts
from channels.email.receipts import ReadReceipt
from channels.email.thread_index import ROOT_BYTES, thread_ref

log = logging.getLogger("my_agent.email")

# The quoted history kept beside the turn (metadata ``quoted``), in characters: the mail
# answered is at its top; a long thread below it is in ``full_body`` anyway.
QUOTED_LIMIT = 8000


def subject_line(subject: str, text: str, thread_subject: str | None) -> str | None:
    """``Subject: ...``, the first line of the turn, when the subject says something the
    text does not (the model sees the turn's text, never the headers: "Trip planning"
    over "Find me a train" lost what the train was for). None for a reply whose subject
    repeats the thread's (``Re:`` the subject of the mail it answers, or of a mail we do
    not know: a repeat, most likely), before a command (it stays what was typed), and
    when the text starts with it already."""
    subject = one_line(subject)
    if not subject_base(subject) or text.lstrip().startswith("/"):
        return None  # none, or a bare "Re:"
    if is_reply_subject(subject) and (
        thread_subject is None or same_subject(subject_base(subject), subject_base(thread_subject))
    ):
        return None
    said, typed = " ".join(text.split()).casefold(), " ".join(subject.split()).casefold()
    if said.startswith(typed) and not (said[len(typed) : len(typed) + 1]).isalnum():
        # the text starts with the subject's words ("Tax" before "Taxi to the
        # airport" is no repeat: the model never saw what the mail was about)
        return None
    # A subject of thousands of characters (spam, a pasted paragraph) filled the
    # escalation's quote of the mail, its words never shown (session 41): cut as ours.
    return f"Subject: {capped_subject(subject)}"


def capped_quote(quoted: str) -> str:
    """``quoted`` within :data:`QUOTED_LIMIT` characters, its start kept (the mail
    answered), with a note of what was left out."""
    if len(quoted) <= QUOTED_LIMIT:
        return quoted
    kept = cut(quoted, QUOTED_LIMIT)
    return f"{kept}\n[... {len(quoted) - len(kept)} more characters of quoted history not kept]"


def bounce_metadata(bounce: Bounce) -> dict[str, object]:
    """A delivery report's reading, kept with the turn."""
    return {
        "action": bounce.action,
        "recipients": list(bounce.recipients),
        "status": bounce.status,
        "diagnostic": bounce.diagnostic,
        "original_id": bounce.original_id,
    }


def receipt_metadata(receipt: ReadReceipt) -> dict[str, object]:
    """A read receipt's reading, kept with the turn."""
    return {
        "reader": receipt.reader,
        "disposition": receipt.disposition,
        "original_id": receipt.original_id,
    }


def to_inbound(
    mail: ParsedMail,
    raw: bytes,
    uid: int,
    validity: str,
    cfg: EmailChannelConfig,
    *,
    legacy_key: bool = False,
    thread_subject: str | None = None,
    owner: Collection[str] = (),
    copy: bool = False,
) -> InboundMessage:
    """``mail`` (fetched as ``raw``, IMAP ``uid`` under ``validity``) for the core;
    ``legacy_key``: it may have been delivered before under its bare Message-ID
    (:mod:`channels.email.dedup`); ``thread_subject``: the subject of the mail it
    answers, when the channel knows it; ``owner``: the owner's addresses (lower case);
    ``copy``: it may be another copy of a mail received (a mailing list's), and joins
    the conversation of the first by its own Message-ID."""
    verdict = verify_sender(
        mail.auth_results,
        mail.from_addr,
        require=cfg.require_auth,
        require_all=cfg.require_all,
        auth_serv_id=cfg.auth_serv_id,
        aligned=cfg.auth_require_alignment,
    )
    if mail.from_count > 1:
        # Two From headers, or two mailboxes in one: the server's "dmarc=pass" may be
        # about the other one (a pass without header.from counts for any From domain),
        # and the first address, the owner's, would have been taken as vouched for.
        verdict = AuthVerdict(False, (), f"{mail.from_count} From addresses")
    sender = mail.from_addr or "unknown@invalid"
    forward = is_forward_subject(mail.subject)
    # A forward is a new topic, whatever it was forwarded from: a client that keeps a
    # forward in its conversation gives it the In-Reply-To/References of the mail
    # forwarded, and "Fwd: Invoice 42" joined the conversation that mail was in (the
    # assistant's own, when its answer is forwarded to ask about it).
    refs = [] if forward else [r or "" for r in (mail.in_reply_to, *reversed(mail.references))]
    if copy and mail.message_id:
        # After a restart, or when the list's copy came first, the channel's memory
        # cannot drop it: by its own id it still joins the other copy's conversation.
        refs.insert(0, mail.message_id)
    # ``forwarded``: a forwarded mail (typed inline or attached) stays in the text,
    # named apart: an owner's turn keeps it out of their words, labelled for the model
    # as others' (bot/forwards.py); a third party's message is all theirs anyway. Before
    # session 41 it was the owner's words to the model, to search and to the notes.
    text, quoted, forwarded = body_parts(mail.text, forward=forward)
    # The body as sent is kept when the text is not all of it (history, a signature
    # stripped); else it was the same megabytes twice in the turn.
    stripped = text.strip() != mail.text.strip()
    # The history quoted below it, apart: when the mail it answers never reached the
    # conversation it joins (the owner brings the assistant into a thread, or answers a
    # third party's mail), the model is shown it, labelled as others' words (the core
    # decides: bot/quoted.py). Before session 39 it was stripped and nothing read it.
    quoted = quoted if stripped else ""
    if not text.strip() and not is_reply_subject(mail.subject):
        # "Subject: Book a table for 8 tonight" and nothing below it: the subject is
        # the whole message, taken as it is (the turn used to be empty). A reply's
        # subject repeats the thread's, and says nothing new.
        text = mail.subject.strip()
    elif label := subject_line(mail.subject, text, thread_subject):
        text = "\n\n".join(part for part in (label, text) if part.strip())
    if mail.calendar_answer and mail.calendar_answer not in text:
        # Outlook's answer has an empty text part beside the calendar, or the comment
        # typed with it: who answered what comes first.
        text = "\n\n".join(part for part in (mail.calendar_answer, text) if part.strip())
    if mail.receipt is not None:
        # Who read which mail, when: the client's boilerplate ("Your message ... was
        # read on ...") says no more, and is kept in full_body. By the id of the mail
        # read it joins that mail's conversation (it named none of its own).
        stripped = stripped or bool(mail.text.strip())
        text = mail.receipt.summary(sender)
        refs.insert(0, mail.receipt.original_id or "")
    if mail.bounce is not None:
        # What failed, to whom and why, first: the escalation quotes the first 500
        # characters, which in a bounce were the reporting server's boilerplate.
        text = "\n\n".join(part for part in (mail.bounce.summary(), text) if part.strip())
        refs.insert(0, mail.bounce.original_id or "")
    if mail.thread_index is not None and len(mail.thread_index) > ROOT_BYTES and not forward:
        # Outlook's reply, its References dropped by a gateway: the thread is still
        # found by its Thread-Index, after every real reference (a new mail, 22 bytes,
        # names none: it would have taken the subject rule to the owner's last thread).
        refs.append(thread_ref(sender, mail.thread_index))
    if mail.attachments and mail.receipt is None and not text.lstrip().startswith("/"):
        # A PDF without a word used to be an empty turn, and the model never knew a
        # file had come with the mail: name what came (the bytes are not kept).
        text = "\n\n".join(
            part for part in (text, "\n".join(attachment_lines(mail.attachments))) if part
        )
    # Who else reads the reply (reply_all): the core then keeps the owner's other
    # conversations out of it (recall_scope), as it does in a group chat.
    readers = reply_all_readers(
        sender, mail.to, mail.cc, (cfg.address or "").lower(), cfg.reply_all
    )
    # Where the mail asks to be answered (Reply-To), when that is not its sender alone:
    # kept with the turn, so that a reply sent after a restart goes there as well; an
    # address there that is not the sender's reads the reply too (unless it is the
    # owner's: the owner writing from work to be answered at home).
    answer_to = answer_addresses(sender, mail.reply_to, owner)
    ignored = [a for a in mail.reply_to if a.lower() not in answer_to]
    if sender in owner and ignored:
        log.warning(
            "the owner's mail %s asks to be answered at %s (Reply-To): not followed, the "
            "owner's answers go to the owner's own addresses only",
            mail.message_id,
            ", ".join(ignored),
        )
    if not text.strip() and verdict.verified and sender.lower() in owner:
        # The owner's mail of no subject and a blank body was an empty turn; Telegram's
        # label says something came. A third party's stays as it came (their file keeps
        # what they sent; the brain shows the model a stand-in for it).
        text = EMPTY_MESSAGE_LABEL
    reply_to = [] if answer_to == [sender] else answer_to
    others = [a for a in reply_to if a != sender and a not in owner and a not in readers]
    readers = [*readers, *others]
    return InboundMessage(
        channel="email",
        sender_id=sender,
        sender_name=mail.from_name,
        chat_id=sender,
        text=text,
        # Message-ID plus a hash of the content: a sender reusing one Message-ID for new
        # content (a cron job) sends a new message each time (it was dropped as a
        # duplicate); a redelivery of the same mail is still dropped.
        message_id=dedup_key(
            mail.message_id,
            raw,
            from_addr=mail.from_addr,
            date=mail.date,
            subject=mail.subject,
            legacy=legacy_key,
        ),
        message_ref=mail.message_id,
        thread_refs=tuple(dict.fromkeys(r for r in refs if r)),
        subject=mail.subject or None,
        identity_verified=verdict.verified,
        # Bounces, auto-replies, list mail: recorded, never answered (mail loops).
        addressed=not (mail.auto_submitted or mail.from_addr is None),
        attachments=mail.attachments,
        metadata={
            **({"full_body": mail.text} if stripped else {}),
            **(
                {"quoted": capped_quote(quoted), "in_reply_to": mail.in_reply_to or None}
                if quoted.strip() and mail.receipt is None and mail.bounce is None
                else {}
            ),
            **(
                {FORWARDED: {"text": forwarded, **forward_headers(forwarded)}}
                if forwarded.strip() and forwarded in text
                else {}
            ),
            "to": list(mail.to),
            "cc": list(mail.cc),
            **({"readers": readers} if readers else {}),
            **({"reply_to": reply_to} if reply_to else {}),
            # Its Outlook thread, kept with the turn: the reply sent after a restart
            # carries the Thread-Index too (the channel's memory of the mail is gone).
            **(
                {"thread_index": thread_ref(sender, mail.thread_index)}
                if mail.thread_index is not None
                else {}
            ),
            "date": iso(mail.date) if mail.date else None,
            # the same, under the key every channel uses: the model is told of an
            # owner's mail that came long after it was written (the daemon was down, a
            # phone sent its outbox late: bot/brain/late_turns.py)
            **({SENT_AT: iso(mail.date)} if mail.date else {}),
            "auth": verdict.reason,
            "auto_submitted": mail.auto_submitted,
            **({"bounce": bounce_metadata(mail.bounce)} if mail.bounce else {}),
            **({"receipt": receipt_metadata(mail.receipt)} if mail.receipt else {}),
            "imap": {"uidvalidity": int(validity), "uid": uid},
        },
    )
