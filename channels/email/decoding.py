"""Decoding what mail carries: bodies in whatever charset they declare (or none), and
RFC 2047 header values, never failing (:func:`decode_bytes` ends with latin-1, which
maps every byte)."""

from __future__ import annotations

import binascii
import codecs
import email.header
import re
from email.message import Message

from bot.graphemes import cut as grapheme_cut
from channels.email.iso2022 import decode_iso2022jp, looks_iso2022jp

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


# Western single-byte charsets that mail clients and web forms declare for text they
# send in UTF-8 (a default left in a header template, a form posting UTF-8).
_MISLABELLED_AS = frozenset({"iso8859-1", "iso8859-15", "cp1252"})


def decode_bytes(data: bytes, charset: str | None = None) -> str:
    """Decode ``data`` with the declared charset, else utf-8, else cp1252, never failing.

    Text declared latin-1 or cp1252 that is well-formed UTF-8 with non-ASCII in it is
    read as UTF-8: "Café" sent as UTF-8 under an iso-8859-1 label read as "CafÃ©"
    (before session 24). Real latin-1 text is almost never valid UTF-8: an accented
    letter would have to be followed by one to three bytes from 0x80-0xBF, which are
    controls and rare symbols there."""
    declared = _normalise_charset(charset)
    if looks_iso2022jp(data):
        # Japanese in ISO-2022-JP: with Microsoft's extensions (①, ㈱), which Python's
        # decoder refuses, or under a label lost or wrong (us-ascii, utf-8): it came
        # through as 7-bit ASCII, escape sequences and all (channels.email.iso2022).
        if declared and declared.startswith("iso2022_jp"):
            try:
                return data.decode(declared)
            except UnicodeDecodeError:
                pass
        if (japanese := decode_iso2022jp(data)) is not None:
            return japanese
    if declared == "iso8859-1":
        # What mail calls latin-1 is windows-1252 (so every browser and mail client
        # reads it, WHATWG): its quotes, dashes and euro sign came through as C1
        # control characters. (Its five unassigned bytes fall back below.)
        declared = "cp1252"
    if declared in _MISLABELLED_AS and not data.isascii():
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    tried: list[str] = []
    for candidate in (declared, "utf-8", "cp1252"):
        if candidate is None or candidate in tried:
            continue
        tried.append(candidate)
        try:
            return data.decode(candidate)
        except (UnicodeDecodeError, LookupError):
            if candidate == "utf-8" and (text := _mostly_utf8(data)) is not None:
                return text
            continue
    # latin-1 maps every byte: the last resort can not fail.
    return data.decode("latin-1")


_STRAY = re.compile("[\udc80-\udcff]")  # a byte that is no UTF-8, as surrogateescape keeps it
_WIDE = re.compile("[^\x00-\x7f\udc80-\udcff]")  # a well-formed non-ASCII character


def _mostly_utf8(data: bytes) -> str | None:
    """``data`` as UTF-8 with U+FFFD for its stray bytes, when it holds at least as many
    well-formed non-ASCII characters as stray bytes (text in UTF-8 with a list footer in
    latin-1, a mail cut inside a character), else None (text in another charset). Before
    session 40 one stray byte made the whole body cp1252: "München" was stored, shown to
    the model and indexed as "MÃ¼nchen"."""
    text = data.decode("utf-8", "surrogateescape")
    stray = len(_STRAY.findall(text))
    wide = len(_WIDE.findall(text))
    if not wide or stray > wide:
        return None
    return _STRAY.sub("\ufffd", text)


# A line of base64 as encoders write it: whole 4-character groups, padding at its end.
_B64_LINE = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def padded_base64(data: bytes) -> bytes | None:
    """``data`` decoded line by line when a padded line is followed by more base64 lines
    (mailers that encode each line apart), else None. Python's decoder stops at the
    first padding: "Hi" came through, the lines after it were lost. Lines that are no
    base64 (text a list server appended) end it, as they ended Python's decoder."""
    lines = [line.strip() for line in data.splitlines() if line.strip()]
    out: list[bytes] = []
    padded_inside = False
    for line in lines:
        if not _B64_LINE.fullmatch(line):
            break
        if out and out[-1].endswith(b"="):
            padded_inside = True
        out.append(line)
    if not padded_inside:
        return None
    return b"".join(binascii.a2b_base64(line) for line in out)


def _normalise_charset(charset: str | None) -> str | None:
    if not charset:
        return None
    name = charset.strip().strip("\"'").lower()
    name = _CHARSET_ALIASES.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


# What is decoded of one header value (a subject, a display name, a file name): no
# person writes more, and Python's RFC 2047 decoding takes time quadratic in the number
# of encoded words (a 1.4 MB subject of them held the event loop, and every channel,
# for 12 s; ten times that, for 20 minutes).
MAX_HEADER_CHARS = 8192
# C0 controls other than the line breaks (which unfold joins) and DEL
_CONTROL = re.compile(r"[\x00-\x09\x0b\x0c\x0e-\x1f\x7f]")
# What parts the addresses of a header's free text (a bounce's Final-Recipient, X-Loop)
_ADDRESS_SEPARATORS = re.compile(r"[\s<>,;:\"()\[\]]+")


def decode_header_value(value: str) -> str:
    """RFC 2047-decode a raw header value (``=?utf-8?q?...?=``), tolerating garbage;
    a value longer than :data:`MAX_HEADER_CHARS` is cut to it (between words)."""
    if not value:
        return ""
    value = re.sub(r"\r?\n[ \t]*", " ", value)
    if len(value) > MAX_HEADER_CHARS:
        cut = value[: MAX_HEADER_CHARS + 1]
        value = (
            cut.rsplit(None, 1)[0] if " " in cut.strip() else grapheme_cut(cut, MAX_HEADER_CHARS)
        )
    try:
        parts = email.header.decode_header(value)
    except Exception:  # malformed encoded words: keep the raw text
        return unfold(value)
    out: list[str] = []
    for chunk, charset in parts:
        if isinstance(chunk, bytes):
            out.append(decode_bytes(chunk, charset))
        else:
            out.append(chunk)
    return unfold("".join(out))


def unfold(value: str) -> str:
    """``value`` decoded like a body and put on one line."""
    # Raw 8-bit header bytes arrive as surrogate escapes: decode them like a body.
    value = decode_bytes(value.encode("utf-8", "surrogateescape"))
    # Control characters (a NUL, which RFC 5322 forbids anywhere, a terminal escape)
    # are no part of a subject or a name: they went raw into the turn, the transcript
    # and the dashboard.
    value = _CONTROL.sub("", value.replace("\t", " "))
    # Any line break left (an encoded CR, U+2028...) would make the value unusable in a
    # header of our reply, and is no part of a one-line subject or name anyway.
    return " ".join(part.strip() for part in value.splitlines() if part.strip())


def raw_header(msg: Message, name: str) -> list[str]:
    """Every raw value of header ``name``, never parsed by the policy (which may raise)."""
    values: list[str] = []
    for key, value in msg.raw_items():
        if key.lower() == name.lower():
            values.append(str(value))
    return values


def header_value(msg: Message, name: str) -> str:
    """The first value of header ``name``, decoded (empty when it is missing)."""
    values = raw_header(msg, name)
    return decode_header_value(values[0]) if values else ""


def addresses_in(text: str) -> list[str]:
    """The mail addresses in free text, as written: each run of characters between
    separators (spaces, ``<>,;:"()[]``) with an ``@`` inside it. Before session 30 three
    modules found them with ``[^...]+@[^...]+``, which tried every start in a run without
    an ``@``: a header of 30,000 letters took 6 s to read, a megabyte hours (any sender
    writes an X-Loop header, a bounce's Final-Recipient). One split reads it in one pass,
    with the same result."""
    return [run for run in _ADDRESS_SEPARATORS.split(text) if "@" in run[1:-1]]
