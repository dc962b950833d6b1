"""MIME -> text, attachments and headers, tolerant of whatever arrives in a mailbox.

:func:`parse_message` never raises: malformed headers, broken transfer encodings, unknown
or missing charsets all degrade to the best readable text. text/plain is preferred;
HTML-only mail is converted to text (:mod:`channels.email.html`), attachments are reduced
to :class:`bot.events.Attachment` metadata (the channel names them in the turn with
:func:`attachment_lines`); their bytes never reach the text. The body is walked in
:mod:`channels.email.mime`, charsets and encoded words decoded in
:mod:`channels.email.decoding`.
"""

from __future__ import annotations

import email
import email.parser
import email.utils
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import Message
from typing import TypeVar

from bot.events import Attachment
from bot.mail_subjects import is_forward_subject
from channels.email.automatic import is_automatic
from channels.email.calendar import calendar_answer
from channels.email.decoding import (
    addresses_in,
    decode_bytes,
    decode_header_value,
    header_value,
    raw_header,
    unfold,
)
from channels.email.dsn import Bounce, read_bounce
from channels.email.mime import Walker
from channels.email.receipts import ReadReceipt, read_receipt
from channels.email.thread_index import read_thread_index

log = logging.getLogger("my_agent.email.parsing")
_T = TypeVar("_T")

_MSGID_RE = re.compile(r"<([^<>]*)>")
_HEADER_END = re.compile(rb"\r?\n\r?\n")  # the blank line that ends the header block
_COMMENT = re.compile(r"\([^()]*\)")
# A MIME boundary line and a part's MIME header field (the scaffolding of a mail read as
# text because the parser gave up on it)
_BOUNDARY = re.compile(r"^--[0-9A-Za-z'()+_,./:=?-]{1,70}(--)?\s*$")
_PART_FIELD = re.compile(r"(?i)^(content-[a-z-]+|mime-version)\s*:")
_TOO_DEEP = "[This mail is nested too deeply to be read as MIME: its text is shown as found.]"
# Headers naming the mailboxes a mail has passed through on its way (loop markers):
# Exchange's forwarding rules, procmail, Sieve and ticket systems (X-Loop), Mailman,
# and a redirect (Resent-From). Our own address in one: the mail came back round.
_LOOP_HEADERS = ("X-MS-Exchange-Inbox-Rules-Loop", "X-Loop", "X-Been-There", "Resent-From")


@dataclass(frozen=True)
class ParsedMail:
    """Everything the channel needs from one raw message."""

    message_id: str | None
    in_reply_to: str | None
    references: tuple[str, ...]  # oldest first, as in the header
    subject: str
    from_addr: str | None  # lower-cased address
    from_name: str | None
    to: tuple[str, ...]
    cc: tuple[str, ...]
    reply_to: tuple[str, ...]
    date: datetime | None
    text: str  # the whole body as text (quotes and signature still in it)
    attachments: tuple[Attachment, ...]
    auth_results: tuple[str, ...]  # raw Authentication-Results values, top first
    auto_submitted: bool  # bounce, auto-reply, mailing-list bulk: never acknowledge these
    # lower-cased addresses in loop markers (X-Loop, X-MS-Exchange-Inbox-Rules-Loop, ...):
    # whether one is ours is for the channel, which knows its address, to say
    loop_addresses: tuple[str, ...] = ()
    bounce: Bounce | None = None  # what a delivery report says (channels.email.dsn)
    # From addresses in the mail (headers and mailboxes): more than one, and which of
    # them the receiving server's verdict was about is unknown (channels.email.inbound)
    from_count: int = 1
    mailing_list: bool = False  # a list's copy (List-Id): the owner may have Cc'd us too
    receipt: ReadReceipt | None = None  # a read receipt's reading (channels.email.receipts)
    # a calendar's answer to an invitation, as lines (channels.email.calendar)
    calendar_answer: str | None = None
    # Outlook's Thread-Index, decoded (its first 22 bytes name the thread), or None
    thread_index: bytes | None = None


def _addresses(msg: Message, name: str) -> list[tuple[str, str]]:
    """(display name, lower-cased address) pairs of an address header."""
    # Split the raw value first: a decoded display name may contain commas.
    raw = [unfold(v) for v in raw_header(msg, name)]
    try:
        pairs = email.utils.getaddresses(raw)
    except Exception:
        return []
    out: list[tuple[str, str]] = []
    for display, addr in pairs:
        addr = addr.strip().lower()
        if "@" in addr and " " not in addr:
            out.append((decode_header_value(display).strip().strip('"'), addr))
    return out


def _unencoded(value: str) -> str:
    """A References value as ids: a mailer that folds it as free text (the email
    package, this channel before session 28) writes a long id as RFC 2047 encoded
    words, read as one broken id (the thread's older ids lost with it)."""
    return decode_header_value(value) if "=?" in value else value


def _msgids(value: str) -> list[str]:
    """The ids in a Message-ID, In-Reply-To or References value, in order.

    Real mailers send malformed ones, which were taken for none (the mail then keyed by
    its raw bytes, a reply naming it threaded under nothing): whitespace inside the
    brackets is dropped (RFC 5322's obsolete syntax lets folding white space into an
    id, no part of it; a mailer folding a long id in its middle leaves a space there);
    without brackets, the one word with an ``@`` is the id (or the only word), a
    comment is none, a lost closing bracket is restored. An empty ``<>`` is no id: it
    made one thread of every mail carrying it."""
    ids = [f"<{inner}>" for inner in ("".join(m.split()) for m in _MSGID_RE.findall(value))]
    ids = [i for i in ids if i != "<>"]
    if ids:
        return ids
    words = [w.strip("<>,;") for w in _COMMENT.sub(" ", value).split()]
    words = [w for w in words if w]
    if len(words) > 1:
        words = [w for w in words if "@" in w]
    return [f"<{words[0]}>"] if len(words) == 1 else []


def _raw_body(raw: bytes) -> str:
    """What follows the header block, as text. (It was split at ``\\n\\n``, which a
    CRLF mail, any an IMAP server hands over, does not have: the text began with
    every header of the mail.)"""
    parts = _HEADER_END.split(raw, maxsplit=1)
    return decode_bytes(parts[-1]).replace("\r\n", "\n")


def _unparsed_text(raw: bytes) -> str:
    """The body of a mail Python's parser gave up on (MIME nested thousands deep), its
    MIME scaffolding left out: the boundary lines and the part headers after them
    (``Content-Type: ...``). It used to be the turn as it was, 60 KB of them for a
    mail a thousand levels deep, and its few words of text somewhere at the bottom.
    The turn says why it reads so (a label for what could not be read)."""
    kept: list[str] = []
    in_part_header = False
    for line in _raw_body(raw).split("\n"):
        if _BOUNDARY.match(line):
            in_part_header = True  # the part's own header block follows, to a blank line
            continue
        if in_part_header:
            if line.strip() and (_PART_FIELD.match(line) or line[:1] in " \t"):
                continue
            in_part_header = False
            if not line.strip():
                continue
        kept.append(line)
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")
    return f"{_TOO_DEEP}\n\n{text}" if text else _TOO_DEEP


def _date(msg: Message) -> datetime | None:
    value = header_value(msg, "Date")
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        # A date at the calendar's edge ("31 Dec 9999 23:59 -1200") has no UTC time:
        # every stored timestamp is UTC, and the mail failed at each delivery until it
        # was passed over. Such a Date says nothing; the mail is kept without it.
        parsed.astimezone(UTC)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return parsed


def parse_message(raw: bytes) -> ParsedMail:
    """Parse a raw RFC 5322 message. Never raises; missing pieces come back empty."""
    msg: Message
    walker = Walker()
    try:
        msg = email.message_from_bytes(raw, policy=policy.default)
    except Exception:  # the parser's own limits: a MIME tree nested thousands deep
        # The headers alone still parse: the sender, its Message-ID and its subject
        # are kept (reading the whole mail as a body lost them), the body is text.
        log.warning("unparseable MIME (%d bytes): headers kept, the body read as text", len(raw))
        try:
            msg = email.parser.BytesParser(policy=policy.default).parsebytes(raw, headersonly=True)
        except Exception:  # pragma: no cover - the header parser is itself tolerant
            msg = email.message_from_bytes(b"\n\n" + raw)
        text = _unparsed_text(raw)
    else:
        try:
            text = walker.text(msg)
        except Exception:  # a defect the walker did not foresee: fall back to the raw body
            log.warning("could not walk the MIME tree, using the raw body", exc_info=True)
            text = _raw_body(raw)
    sender = _addresses(msg, "From")
    in_reply = _msgids(header_value(msg, "In-Reply-To"))
    message_ids = _msgids(header_value(msg, "Message-ID"))
    try:
        bounce = read_bounce(msg, _msgids)
    except Exception:  # a report too broken to read is still automatic mail (below)
        log.warning("could not read a delivery report", exc_info=True)
        bounce = None
    receipt = _guarded(lambda: read_receipt(msg, _msgids), "a read receipt")
    subject = header_value(msg, "Subject")
    # An answer the owner forwards ("Fwd: Accepted: Dentist") is a question about it.
    answer = None
    if not is_forward_subject(subject):
        answer = _guarded(lambda: calendar_answer(msg), "a calendar answer")
    automatic = bounce is not None or receipt is not None or answer is not None
    return ParsedMail(
        message_id=message_ids[0] if message_ids else None,
        in_reply_to=in_reply[0] if in_reply else None,
        references=tuple(_msgids(" ".join(map(_unencoded, raw_header(msg, "References"))))),
        subject=subject,
        from_addr=sender[0][1] if sender else None,
        from_name=(sender[0][0] or None) if sender else None,
        to=tuple(a for _, a in _addresses(msg, "To")),
        cc=tuple(a for _, a in _addresses(msg, "Cc")),
        reply_to=tuple(a for _, a in _addresses(msg, "Reply-To")),
        date=_date(msg),
        text=text.strip("\n"),
        attachments=tuple(walker.attachments),
        auth_results=tuple(unfold(v) for v in raw_header(msg, "Authentication-Results")),
        auto_submitted=automatic or is_automatic(msg, sender[0][1] if sender else None),
        loop_addresses=tuple(
            dict.fromkeys(
                found.lower()
                for name in _LOOP_HEADERS
                for value in raw_header(msg, name)
                for found in addresses_in(unfold(value))
            )
        ),
        bounce=bounce,
        from_count=len(sender),
        mailing_list=bool(raw_header(msg, "List-Id")),
        receipt=receipt,
        calendar_answer=answer,
        thread_index=read_thread_index(header_value(msg, "Thread-Index")),
    )


def _guarded(read: Callable[[], _T], what: str) -> _T | None:
    """``read()``, None when it fails: a part too broken to read says nothing (the
    mail is read as text, as any other)."""
    try:
        return read()
    except Exception:
        log.warning("could not read %s", what, exc_info=True)
        return None


def attachment_lines(attachments: tuple[Attachment, ...]) -> list[str]:
    """One placeholder per attachment (``[attachment: invoice.pdf, 12 KB]``), so that the
    transcript, search and the model know what came with a mail whose bytes are not kept
    (as Telegram's ``[document: ...]``)."""
    lines: list[str] = []
    for item in attachments:
        what = "attached mail" if item.mime_type == "message/rfc822" else "attachment"
        name = item.name or item.mime_type or "file"
        size = ""
        if item.size is not None and item.size < 1024:
            size = f", {item.size} bytes"
        elif item.size is not None:
            size = (
                f", {item.size / 1024:.0f} KB"
                if item.size < 1024 * 1024
                else f", {item.size / 1048576:.1f} MB"
            )
        note = f", {item.description}" if item.description else ""
        lines.append(f"[{what}: {name}{size}{note}]")
    return lines
