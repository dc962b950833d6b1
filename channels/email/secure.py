"""Signed and encrypted mail: the text a signature wraps, and a line for what cannot be read.

Three wrappings hid the owner's words or showed the model a block of base64:

- S/MIME's *opaque* signature (``application/pkcs7-mime; smime-type=signed-data``,
  ``smime.p7m``: Outlook's "signed" mail when clear-text signing is off) carries the
  whole MIME entity inside its CMS structure. It was named as a file, and the turn had
  no text. :func:`signed_content` takes the entity out (the signature is not checked:
  the channel trusts the receiving server's verdict, :mod:`channels.email.auth`).
- Inline PGP (``-----BEGIN PGP SIGNED MESSAGE-----``) puts the armour and the signature
  into the text itself: :func:`unwrap_clearsigned` leaves the text that was signed.
- Encrypted mail (PGP/MIME ``multipart/encrypted``, S/MIME ``enveloped-data``) cannot be
  read without the owner's private key: :func:`encrypted_notice` says so, instead of an
  empty turn naming ``application/pgp-encrypted, 10 bytes``.

``multipart/signed`` (detached signatures, PGP/MIME and S/MIME alike) needs none of
this: its first part is the text, its signature part is no attachment
(:mod:`channels.email.mime`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.message import Message

# CMS content types (RFC 5652), DER-encoded object identifiers.
_SIGNED_DATA = bytes.fromhex("2a864886f70d010702")  # 1.2.840.113549.1.7.2
_ENVELOPED_DATA = bytes.fromhex("2a864886f70d010703")  # 1.2.840.113549.1.7.3
_AUTH_ENVELOPED_DATA = bytes.fromhex("2a864886f70d0109100117")  # 1.2.840.113549.1.9.16.1.23
SMIME_TYPES = ("application/pkcs7-mime", "application/x-pkcs7-mime")
# BER nests: a CMS structure is a few levels deep; a crafted one may claim thousands.
_MAX_DEPTH = 32

ENCRYPTED_PGP = (
    "[This mail is encrypted (OpenPGP): it can only be read with the owner's private "
    "key, which the assistant does not have. Its subject and sender are all it shows.]"
)
ENCRYPTED_SMIME = (
    "[This mail is encrypted (S/MIME): it can only be read with the owner's private "
    "key, which the assistant does not have. Its subject and sender are all it shows.]"
)

_CLEARSIGNED = re.compile(
    r"^-----BEGIN PGP SIGNED MESSAGE-----[ \t]*\r?\n"
    r"(?:[A-Za-z]+:[^\n]*\r?\n)*"  # armour headers: "Hash: SHA256"
    r"[ \t]*\r?\n"
    r"(?P<text>.*?)\r?\n"
    r"-----BEGIN PGP SIGNATURE-----.*?-----END PGP SIGNATURE-----[ \t]*(?:\r?\n|$)",
    re.MULTILINE | re.DOTALL,
)


def unwrap_clearsigned(text: str) -> str:
    """``text`` with each inline PGP signed block (RFC 4880 section 7) reduced to the
    text signed: the armour lines and the signature gone, the dash-escaping (``- ``
    before a line starting with a dash) undone. Text around a block is kept."""
    if "-----BEGIN PGP SIGNED MESSAGE-----" not in text:
        return text

    def signed(found: re.Match[str]) -> str:
        lines = found.group("text").split("\n")
        return "\n".join(line[2:] if line.startswith("- ") else line for line in lines) + "\n"

    return _CLEARSIGNED.sub(signed, text)


def encrypted_notice(part: Message, ctype: str, body: bytes | None) -> str | None:
    """The line that stands for ``part`` (of type ``ctype``, ``body`` its decoded bytes
    when it is no multipart) when it is encrypted, else None."""
    if ctype == "multipart/encrypted":
        protocol = str(part.get_param("protocol") or "").lower()
        return ENCRYPTED_SMIME if "pkcs7" in protocol else ENCRYPTED_PGP
    if ctype in SMIME_TYPES and body is not None:
        kind = str(part.get_param("smime-type") or "").lower()
        if kind in ("enveloped-data", "authenveloped-data"):
            return ENCRYPTED_SMIME
        if not kind and _content_type_oid(body) in (_ENVELOPED_DATA, _AUTH_ENVELOPED_DATA):
            return ENCRYPTED_SMIME
    return None


def signed_mail(part: Message, body: bytes) -> bytes | None:
    """The MIME entity ``part`` (an ``application/pkcs7-mime`` leaf, ``body`` its
    decoded bytes) signs, when it is a signed mail: ``smime-type=signed-data`` or named
    ``smime.p7m``, holding a MIME entity. A signed file (Italy's e-invoices,
    ``fattura.xml.p7m``) stays a file: its XML is no text for the turn."""
    kind = str(part.get_param("smime-type") or "").lower()
    name = str(part.get_param("name") or part.get_filename() or "smime.p7m").lower()
    if kind != "signed-data" and name != "smime.p7m":
        return None
    inner = signed_content(body)
    head = (inner or b"")[:8192].replace(b"\r\n", b"\n").split(b"\n\n", 1)[0]
    if inner is None or not re.search(rb"(?im)^content-type:", head):
        return None
    return inner


def signed_content(body: bytes) -> bytes | None:
    """The MIME entity inside an opaque S/MIME signature (the DER or BER bytes of a CMS
    ``ContentInfo`` of ``signedData``), or None when ``body`` is no such thing (an
    encrypted one, a detached signature, damage)."""
    try:
        info = _read(body, 0, 0)
        seq = info.children(body)
        if len(seq) < 2 or seq[0].value(body) != _SIGNED_DATA:
            return None
        [signed] = seq[1].children(body)[:1]  # [0] EXPLICIT SignedData
        fields = signed.children(body)
        # version, digestAlgorithms, encapContentInfo, ...
        encap = fields[2].children(body)
        if len(encap) < 2:
            return None  # no eContent: a detached signature
        [content] = encap[1].children(body)[:1]  # [0] EXPLICIT OCTET STRING
        return content.octets(body)
    except (_Malformed, IndexError, ValueError):
        return None


def _content_type_oid(body: bytes) -> bytes | None:
    try:
        seq = _read(body, 0, 0).children(body)
        return seq[0].value(body) if seq else None
    except (_Malformed, IndexError, ValueError):
        return None


class _Malformed(Exception):
    """Not BER, or nested deeper than any CMS structure."""


@dataclass(frozen=True)
class _Node:
    """One BER element: its tag byte, where its contents lie, where the next begins."""

    tag: int
    start: int
    end: int  # end of the contents (before an end-of-contents marker)
    next: int
    depth: int

    @property
    def constructed(self) -> bool:
        return bool(self.tag & 0x20)

    def value(self, data: bytes) -> bytes:
        return data[self.start : self.end]

    def children(self, data: bytes) -> list[_Node]:
        if not self.constructed:
            raise _Malformed("a primitive element has no children")
        found, pos = [], self.start
        while pos < self.end:
            child = _read(data, pos, self.depth + 1)
            found.append(child)
            pos = child.next
        return found

    def octets(self, data: bytes) -> bytes:
        """An OCTET STRING's bytes, also when BER splits it into pieces (streamed
        signing, as Outlook's is)."""
        if not self.constructed:
            return self.value(data)
        return b"".join(child.octets(data) for child in self.children(data))


def _read(data: bytes, pos: int, depth: int) -> _Node:
    """The element at ``pos`` (definite or indefinite length, low tag numbers)."""
    if depth > _MAX_DEPTH or pos + 2 > len(data):
        raise _Malformed("too deep or cut short")
    tag, first = data[pos], data[pos + 1]
    if tag & 0x1F == 0x1F:
        raise _Malformed("high tag number: no CMS element has one")
    pos += 2
    if first == 0x80:  # indefinite: contents run to the end-of-contents marker
        if not tag & 0x20:
            raise _Malformed("indefinite length on a primitive element")
        start = pos
        while data[pos : pos + 2] != b"\x00\x00":
            pos = _read(data, pos, depth + 1).next
        return _Node(tag, start, pos, pos + 2, depth)
    if first & 0x80:
        count = first & 0x7F
        if count > 4 or pos + count > len(data):
            raise _Malformed("length out of range")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    else:
        length = first
    if pos + length > len(data):
        raise _Malformed("contents cut short")
    return _Node(tag, pos, pos + length, pos + length, depth)
