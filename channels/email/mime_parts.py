"""One MIME part of a mail: its type, file name, bytes and text, however broken its
headers or transfer encoding (the tree walk over the parts is :mod:`channels.email.mime`)."""

from __future__ import annotations

import email.utils
import re
from email.message import Message

from channels.email.decoding import (
    decode_bytes,
    decode_header_value,
    padded_base64,
    raw_header,
)

_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", re.IGNORECASE)
# A parameter in a raw header value: name="..." (quoted) or name=token.
_RAW_PARAM = {
    param: re.compile(rf'(?i)(?:^|;)\s*{param}\s*=\s*("[^"]*"|[^;\s]+)')
    for param in ("filename", "name")
}
# The label of an attachment whose base64 is broken, in place of its size
DAMAGED = "damaged: not valid base64, its contents could not be read"
# The label of a text part whose transfer encoding is broken (shown as sent below it)
UNDECODABLE = "[This part of the mail is not valid base64 and could not be decoded: shown as sent.]"


def content_type(part: Message) -> str:
    try:
        return part.get_content_type()
    except Exception:
        return "text/plain"


def own_parts(part: Message, depth: int = 0) -> list[Message]:
    """``part`` and the parts of its multiparts, not those inside an attached mail: the
    report or calendar parts that say what a mail is (a bounce, a read receipt, a calendar
    reply). One the owner forwards as an attachment ("why did this bounce?") makes theirs
    none; a gateway that wraps a report in a multipart/mixed does not."""
    out = [part]
    if depth < 8 and content_type(part).startswith("multipart/"):
        payload = part.get_payload()
        for child in payload if isinstance(payload, list) else []:
            if isinstance(child, Message):
                out += own_parts(child, depth + 1)
    return out


def filename(part: Message) -> str | None:
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
    if name and "\ufffd" in str(name):
        name = _raw_filename(part) or name
    return decode_header_value(str(name)) if name else None


def _raw_filename(part: Message) -> str | None:
    """The file name as the sender's raw 8-bit header bytes have it (``résumé.pdf`` in
    latin-1, unencoded, as older mailers send it), which the parser turns into U+FFFD:
    the name in the turn and in search came out as ``r�sum�.pdf``."""
    for header, param in (("Content-Disposition", "filename"), ("Content-Type", "name")):
        for value in raw_header(part, header):
            found = _RAW_PARAM[param].search(value)
            if found and "\ufffd" not in found.group(1):
                return found.group(1).strip('"')
    return None


def is_attachment(part: Message) -> bool:
    try:
        disposition = (part.get_content_disposition() or "").lower()
    except Exception:
        disposition = ""
    return disposition == "attachment" or (
        filename(part) is not None and content_type(part) not in ("text/plain", "text/html")
    )


def inline(part: Message) -> bool:
    """True unless ``part`` says it is an attachment (a file to save, not to show)."""
    try:
        return (part.get_content_disposition() or "inline").lower() != "attachment"
    except Exception:
        return True


def payload_bytes(part: Message) -> bytes:
    try:
        payload = part.get_payload(decode=True)
    except Exception:
        payload = None
    raw = part.get_payload()
    if isinstance(payload, bytes):
        if isinstance(raw, str) and _is_base64(part):
            return padded_base64(raw.encode("ascii", "ignore")) or payload
        return payload
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogateescape")
    return b""


def _is_base64(part: Message) -> bool:
    values = raw_header(part, "Content-Transfer-Encoding")
    return bool(values) and values[0].strip().lower() == "base64"


def broken_base64(part: Message) -> bool:
    """Whether ``part`` says base64 but Python's decoder found it is not (a broken
    mailer, a truncated mail): what it "decoded" is not the part's bytes. The decoder
    notes its defects when it decodes: read after :func:`_payload_bytes`."""
    return _is_base64(part) and any(
        type(d).__name__.startswith("InvalidBase64") for d in part.defects
    )


def _garbled(data: bytes, charset: str | None) -> bool:
    """Whether decoded text bytes are no text: invalid in their charset (or UTF-8),
    or in a single-byte charset mostly control characters."""
    try:
        text = data.decode(charset or "utf-8")
    except (LookupError, UnicodeDecodeError):
        return True
    odd = sum(1 for c in text if not (c.isprintable() or c.isspace()))
    return odd * 10 > len(text)


def part_text(part: Message) -> str:
    try:
        charset = part.get_content_charset()
    except Exception:
        charset = None
    data = payload_bytes(part)
    raw = part.get_payload()
    if (
        isinstance(raw, str)
        and broken_base64(part)
        and (_garbled(data, charset) or data.strip() == raw.strip().encode("utf-8", "replace"))
    ):
        # Base64 that is none (a broken mailer, a truncated mail): its "decoded" bytes
        # came into the turn as mojibake (or, past repair, as sent), nothing saying so.
        # The text as sent is kept, labelled: nothing received is lost, and the model
        # knows what it reads.
        return f"{UNDECODABLE}\n\n{raw.strip()}".replace("\r\n", "\n")
    if charset is None and content_type(part) == "text/html":
        # An HTML body may name its charset only in a <meta> tag; without it a
        # windows-1251 or Shift_JIS mail came out as cp1252 mojibake.
        meta = _META_CHARSET.search(data[:4096])
        charset = meta.group(1).decode("ascii") if meta else None
    text = decode_bytes(data, charset)
    return text.replace("\r\n", "\n").replace("\r", "\n")
