"""Outlook's winmail.dat (channels/email/tnef.py): the files inside are named in the
turn. Before session 24 the owner's "see the report" from Outlook reached the model as
"[attachment: winmail.dat, ...]" alone, the report's name found nowhere."""

from __future__ import annotations

import base64
import struct

from channels.email.parsing import attachment_lines, parse_message
from channels.email.tnef import (
    ATT_ATTACH_DATA,
    ATT_ATTACH_REND_DATA,
    ATT_ATTACH_TITLE,
    TNEF_SIGNATURE,
    tnef_files,
)


def _attribute(level: int, attribute: int, data: bytes) -> bytes:
    checksum = sum(data) & 0xFFFF
    return struct.pack("<BII", level, attribute, len(data)) + data + struct.pack("<H", checksum)


def winmail(*files: tuple[str, bytes]) -> bytes:
    """A TNEF stream as Outlook writes one: message attributes, then per file its
    rendering, title and data."""
    out = struct.pack("<IH", TNEF_SIGNATURE, 0x0102)
    out += _attribute(1, 0x00089006, b"\x01\x00\x00\x00")  # attTnefVersion
    out += _attribute(1, 0x00078008, b"IPM.Microsoft Mail.Note\0")  # attMessageClass
    for name, content in files:
        out += _attribute(2, ATT_ATTACH_REND_DATA, b"\x01\x00" + b"\xff" * 12)
        out += _attribute(2, ATT_ATTACH_TITLE, name.encode("cp1252") + b"\0")
        out += _attribute(2, ATT_ATTACH_DATA, content)
    return out


def outlook_mail(tnef: bytes, body: str = "Here is the report.") -> bytes:
    encoded = base64.encodebytes(tnef)
    return (
        b"From: Owner <owner@example.org>\r\nSubject: Report\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="T"\r\n\r\n--T\r\n'
        b"Content-Type: text/plain; charset=us-ascii\r\n\r\n" + body.encode() + b"\r\n--T\r\n"
        b'Content-Type: application/ms-tnef; name="winmail.dat"\r\n'
        b'Content-Disposition: attachment; filename="winmail.dat"\r\n'
        b"Content-Transfer-Encoding: base64\r\n\r\n" + encoded + b"\r\n--T--\r\n"
    )


def test_the_files_inside_winmail_dat_are_named() -> None:
    tnef = winmail(("Q3 report.pdf", b"%PDF" + bytes(3000)), ("Café menu.docx", b"PK" * 10))
    mail = parse_message(outlook_mail(tnef))
    assert mail.text == "Here is the report."
    assert attachment_lines(mail.attachments) == [
        "[attachment: Q3 report.pdf, 3 KB, sent inside Outlook's winmail.dat]",
        "[attachment: Café menu.docx, 20 bytes, sent inside Outlook's winmail.dat]",
    ]


def test_a_damaged_or_foreign_winmail_dat_is_named_as_it_is() -> None:
    whole = winmail(("a.pdf", bytes(100)), ("b.pdf", bytes(100)))
    # Cut in the middle of the second file: the first is still named.
    assert tnef_files(whole[: len(whole) - 50]) == [("a.pdf", 100), ("b.pdf", None)]
    assert tnef_files(b"not tnef at all") == []
    assert tnef_files(whole[:8]) == []
    mail = parse_message(outlook_mail(b"garbage bytes, no TNEF"))
    assert attachment_lines(mail.attachments) == ["[attachment: winmail.dat, 22 bytes]"]
    # A stream whose lengths run past its end stops there, without an error.
    huge = struct.pack("<IH", TNEF_SIGNATURE, 1) + struct.pack("<BII", 2, ATT_ATTACH_TITLE, 1 << 31)
    assert tnef_files(huge) == []
