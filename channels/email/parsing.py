"""MIME -> text, attachments and headers, tolerant of whatever arrives in a mailbox.

:func:`parse_message` never raises: malformed headers, broken transfer encodings, unknown
or missing charsets all degrade to the best readable text. text/plain is preferred;
HTML-only mail is converted to text (:mod:`channels.email.html`), attachments are reduced
to :class:`bot.events.Attachment` metadata (the channel names them in the turn with
:func:`attachment_lines`); their bytes never reach the text.
"""

from __future__ import annotations

import codecs
import email
import email.header
import email.utils
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import Message

from bot.events import Attachment
from channels.email.html import html_to_text

log = logging.getLogger("my_agent.email.parsing")

# Charsets mail clients declare that Python knows under another (or a wider) name.
_CHARSET_ALIASES = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "x-gbk": "gb18030",
    "ks_c_5601-1987": "cp949",
    "iso-8859-8-i": "iso-8859-8",
    "windows-874": "cp874",
    "unknown-8bit": "utf-8",
    "x-unknown": "utf-8",
    "us-ascii": "utf-8",  # ASCII mislabels are common; utf-8 is a strict superset
    "ascii": "utf-8",
    "utf8": "utf-8",
}
_MSGID_RE = re.compile(r"<[^<>\s]+>")
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", re.IGNORECASE)
# A boundary delimiter line (RFC 2046 bchars, without the space).
_BOUNDARY_LINE = re.compile(rb"^--([0-9A-Za-z'()+_,./:=?-]{1,70})\r?$", re.MULTILINE)
# What follows a guessed boundary line in a real body part: one of its MIME headers. A
# divider the sender typed ("------") is followed by text, and must not be guessed.
_PART_HEADER = re.compile(rb"\r?\ncontent-[a-z-]+[ \t]*:", re.IGNORECASE)
# The notice mailers put before the first part, for clients without MIME: not the text.
_MIME_NOTICE = re.compile(
    r"(?i)\s*this is a (multi-?part message in mime format|mime-encapsulated message)\.?\s*"
)
_SIGNATURE_TYPES = {"application/pgp-signature", "application/pkcs7-signature"}
# Boundaries guessed per mail (_Walker._unsplit): each parses the rest of the body again
_MAX_BOUNDARY_GUESSES = 16


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


def decode_bytes(data: bytes, charset: str | None = None) -> str:
    """Decode ``data`` with the declared charset, else utf-8, else cp1252, never failing."""
    tried: list[str] = []
    for candidate in (_normalise_charset(charset), "utf-8", "cp1252"):
        if candidate is None or candidate in tried:
            continue
        tried.append(candidate)
        try:
            return data.decode(candidate)
        except (UnicodeDecodeError, LookupError):
            continue
    # latin-1 maps every byte: the last resort can not fail.
    return data.decode("latin-1")


def _normalise_charset(charset: str | None) -> str | None:
    if not charset:
        return None
    name = charset.strip().strip("\"'").lower()
    name = _CHARSET_ALIASES.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode_header_value(value: str) -> str:
    """RFC 2047-decode a raw header value (``=?utf-8?q?...?=``), tolerating garbage."""
    if not value:
        return ""
    value = re.sub(r"\r?\n[ \t]*", " ", value)
    try:
        parts = email.header.decode_header(value)
    except Exception:  # malformed encoded words: keep the raw text
        return _unfold(value)
    out: list[str] = []
    for chunk, charset in parts:
        if isinstance(chunk, bytes):
            out.append(decode_bytes(chunk, charset))
        else:
            out.append(chunk)
    return _unfold("".join(out))


def _unfold(value: str) -> str:
    # Raw 8-bit header bytes arrive as surrogate escapes: decode them like a body.
    value = decode_bytes(value.encode("utf-8", "surrogateescape"))
    # Any line break left (an encoded CR, U+2028...) would make the value unusable in a
    # header of our reply, and is no part of a one-line subject or name anyway.
    return " ".join(part.strip() for part in value.splitlines() if part.strip())


def _raw_header(msg: Message, name: str) -> list[str]:
    """Every raw value of header ``name``, never parsed by the policy (which may raise)."""
    values: list[str] = []
    for key, value in msg.raw_items():
        if key.lower() == name.lower():
            values.append(str(value))
    return values


def _header(msg: Message, name: str) -> str:
    values = _raw_header(msg, name)
    return decode_header_value(values[0]) if values else ""


def _addresses(msg: Message, name: str) -> list[tuple[str, str]]:
    """(display name, lower-cased address) pairs of an address header."""
    # Split the raw value first: a decoded display name may contain commas.
    raw = [_unfold(v) for v in _raw_header(msg, name)]
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


def _msgids(value: str) -> list[str]:
    ids = _MSGID_RE.findall(value)
    if not ids and value.strip() and " " not in value.strip():
        ids = [f"<{value.strip().strip('<>')}>"]  # a bare id without brackets
    return ids


def _date(msg: Message) -> datetime | None:
    value = _header(msg, "Date")
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _content_type(part: Message) -> str:
    try:
        return part.get_content_type()
    except Exception:
        return "text/plain"


def _filename(part: Message) -> str | None:
    try:
        name = part.get_filename()
    except Exception:
        name = None
    if name is None:
        try:
            name = part.get_param("name")  # type: ignore[assignment]
        except Exception:
            name = None
    if isinstance(name, tuple):  # RFC 2231 triple from compat code paths
        name = email.utils.collapse_rfc2231_value(name)
    return decode_header_value(str(name)) if name else None


def _is_attachment(part: Message) -> bool:
    try:
        disposition = (part.get_content_disposition() or "").lower()
    except Exception:
        disposition = ""
    return disposition == "attachment" or (
        _filename(part) is not None and _content_type(part) not in ("text/plain", "text/html")
    )


def _payload_bytes(part: Message) -> bytes:
    try:
        payload = part.get_payload(decode=True)
    except Exception:
        payload = None
    if isinstance(payload, bytes):
        return payload
    raw = part.get_payload()
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogateescape")
    return b""


def _part_text(part: Message) -> str:
    try:
        charset = part.get_content_charset()
    except Exception:
        charset = None
    data = _payload_bytes(part)
    if charset is None and _content_type(part) == "text/html":
        # An HTML body may name its charset only in a <meta> tag; without it a
        # windows-1251 or Shift_JIS mail came out as cp1252 mojibake.
        meta = _META_CHARSET.search(data[:4096])
        charset = meta.group(1).decode("ascii") if meta else None
    text = decode_bytes(data, charset)
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _Walker:
    """Collects text and attachments from a MIME tree, choosing plain over HTML."""

    def __init__(self) -> None:
        self.attachments: list[Attachment] = []
        self.guesses = 0  # boundaries guessed (_unsplit)

    def attach(self, part: Message) -> None:
        ctype = _content_type(part)
        name = _filename(part)
        if ctype == "message/rfc822" and name is None:
            name = self._embedded_subject(part)
        self.attachments.append(
            Attachment(kind="file", name=name, mime_type=ctype, size=self._size(part))
        )

    @staticmethod
    def _size(part: Message) -> int:
        if part.is_multipart():
            return len(part.as_bytes()) if hasattr(part, "as_bytes") else 0
        return len(_payload_bytes(part))

    @staticmethod
    def _embedded_subject(part: Message) -> str | None:
        inner = part.get_payload()
        if isinstance(inner, list) and inner and isinstance(inner[0], Message):
            subject = _header(inner[0], "Subject")
            return f"{subject}.eml" if subject else None
        return None

    def text(self, part: Message) -> str:
        """Readable text of ``part``; attachments under it are recorded on the way."""
        ctype = _content_type(part)
        if ctype.startswith("multipart/") and not part.is_multipart():
            return self._unsplit(part, ctype)
        if ctype == "message/rfc822" or (not part.is_multipart() and _is_attachment(part)):
            self.attach(part)
            return ""
        if part.is_multipart():
            children = [c for c in part.get_payload() if isinstance(c, Message)]
            if ctype == "multipart/alternative":
                return self._alternative(children)
            if ctype == "multipart/signed" and children:
                for extra in children[1:]:
                    if _content_type(extra) not in _SIGNATURE_TYPES:
                        self.attach(extra)
                return self.text(children[0])
            texts = [self.text(child) for child in children]
            return "\n\n".join(t.strip("\n") for t in texts if t.strip())
        if ctype == "text/plain" or ctype == "text":
            return _part_text(part)
        if ctype == "text/html":
            return html_to_text(_part_text(part))
        if ctype.startswith("text/") and ctype not in ("text/calendar", "text/x-vcard"):
            return _part_text(part)
        if ctype in _SIGNATURE_TYPES:
            return ""
        self.attach(part)
        return ""

    def _unsplit(self, part: Message, ctype: str) -> str:
        """A multipart the parser could not split: its header names no boundary, or one
        the body never uses (broken mailers, hand-made mail). The body's first boundary
        line followed by a part's header is tried instead (a divider the sender typed,
        "------", is none: the text above it was lost as a preamble); without one the
        body is read as text. It used to be recorded as an attachment only, and the
        mail's text was lost."""
        body = _payload_bytes(part)
        found = next(
            (m for m in _BOUNDARY_LINE.finditer(body) if _PART_HEADER.match(body, m.end())),
            None,
        )
        # Each guess parses the rest of the body again: a bounded number of them, so a
        # mail nesting thousands of such parts costs linear time, not quadratic.
        self.guesses += 1
        if found is not None and self.guesses <= _MAX_BOUNDARY_GUESSES:
            boundary = found.group(1).decode("ascii")
            header = f'Content-Type: {ctype}; boundary="{boundary}"\n\n'
            rebuilt = email.message_from_bytes(header.encode() + body, policy=policy.default)
            if rebuilt.is_multipart():
                # No header declared what comes before the first part a preamble, and a
                # client shows it: the sender's words there are kept, the notice is not.
                above = self._plain(body[: found.start()]).strip("\n")
                if _MIME_NOTICE.fullmatch(above):
                    above = ""
                below = self.text(rebuilt)
                return "\n\n".join(t.strip("\n") for t in (above, below) if t.strip())
        return self._plain(body)

    @staticmethod
    def _plain(body: bytes) -> str:
        text = decode_bytes(body, None).replace("\r\n", "\n").replace("\r", "\n")
        return html_to_text(text) if re.search(r"(?i)<(html|body|div|p)[\s>]", text) else text

    def _alternative(self, children: list[Message]) -> str:
        # Prefer text/plain, then HTML, then whatever nested structure carries text.
        # Attachments inside the unchosen alternatives are not recorded (they are the
        # same inline images in another rendering).
        by_pref = sorted(
            children,
            key=lambda c: {"text/plain": 0, "text/html": 1}.get(_content_type(c), 2),
        )
        for child in by_pref:
            sub = _Walker()
            sub.guesses = self.guesses  # one budget for the whole mail
            text = sub.text(child)
            self.guesses = sub.guesses
            if text.strip():
                self.attachments.extend(sub.attachments)
                return text
        return ""


def parse_message(raw: bytes) -> ParsedMail:
    """Parse a raw RFC 5322 message. Never raises; missing pieces come back empty."""
    msg: Message
    try:
        msg = email.message_from_bytes(raw, policy=policy.default)
    except Exception:  # pragma: no cover - the parser is itself tolerant
        log.warning("unparseable message (%d bytes), reading it as plain text", len(raw))
        msg = email.message_from_bytes(b"\n\n" + raw)
    walker = _Walker()
    try:
        text = walker.text(msg)
    except Exception:  # a defect the walker did not foresee: fall back to the raw body
        log.warning("could not walk the MIME tree, using the raw body", exc_info=True)
        text = decode_bytes(raw.split(b"\n\n", 1)[-1])
    sender = _addresses(msg, "From")
    in_reply = _msgids(_header(msg, "In-Reply-To"))
    message_ids = _msgids(_header(msg, "Message-ID"))
    return ParsedMail(
        message_id=message_ids[0] if message_ids else None,
        in_reply_to=in_reply[0] if in_reply else None,
        references=tuple(_msgids(" ".join(_raw_header(msg, "References")))),
        subject=_header(msg, "Subject"),
        from_addr=sender[0][1] if sender else None,
        from_name=(sender[0][0] or None) if sender else None,
        to=tuple(a for _, a in _addresses(msg, "To")),
        cc=tuple(a for _, a in _addresses(msg, "Cc")),
        reply_to=tuple(a for _, a in _addresses(msg, "Reply-To")),
        date=_date(msg),
        text=text.strip("\n"),
        attachments=tuple(walker.attachments),
        auth_results=tuple(_unfold(v) for v in _raw_header(msg, "Authentication-Results")),
        auto_submitted=_is_automatic(msg, sender[0][1] if sender else None),
    )


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
        lines.append(f"[{what}: {name}{size}]")
    return lines


def _is_automatic(msg: Message, sender: str | None) -> bool:
    """RFC 3834 auto-replies, bounces and bulk mail (answering them risks mail loops)."""
    auto = _header(msg, "Auto-Submitted").lower()
    if auto and auto != "no":
        return True
    if _header(msg, "Precedence").lower() in ("bulk", "junk", "list", "auto_reply"):
        return True
    if any(_raw_header(msg, name) for name in ("List-Id", "X-Autoreply", "X-Autorespond")):
        return True
    # A null envelope sender (RFC 5321: bounces, and the auto-replies of servers that
    # follow RFC 3834) and delivery/read reports (multipart/report) want no answer.
    if _header(msg, "Return-Path").replace(" ", "") == "<>":
        return True
    if _content_type(msg) == "multipart/report":
        return True
    local = (sender or "").split("@", 1)[0]
    return local in ("mailer-daemon", "postmaster", "noreply", "no-reply", "donotreply")
