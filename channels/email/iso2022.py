"""Japanese mail in ISO-2022-JP (RFC 1468) as Outlook and Japanese clients send it.

Two things went wrong with it. Python's ``iso2022_jp`` decoder knows JIS X 0208 alone,
and Japanese clients write Microsoft's extension (CP50220/CP50221: the NEC row with
circled numbers ①②, ㈱, Roman numerals) in it: one such character failed the whole
body, which then decoded as ASCII, escape sequences and all (``\\x1b$BL@F|...``), the
owner's Japanese text unreadable and the turn full of control characters. And a part
whose charset label was lost on the way (a gateway, a forward) or says ``us-ascii``
or ``utf-8`` is 7-bit too, and was read the same way. :func:`decode_iso2022jp` maps
each JIS character to its Shift_JIS code and decodes that as ``cp932``, which knows
the extensions.
"""

from __future__ import annotations

import re

# The escape sequences of ISO-2022-JP and its Microsoft form: JIS X 0208 (1978, 1983),
# ASCII, JIS X 0201 Roman and half-width katakana. A terminal escape (ESC [) is none.
_ESCAPE = re.compile(rb"\x1b(?:\$[@B]|\([BJI])")
_MODES = {b"$B": "jis", b"$@": "jis", b"(B": "ascii", b"(J": "ascii", b"(I": "kana"}


def looks_iso2022jp(data: bytes) -> bool:
    """Whether ``data`` is 7-bit text switching to JIS with ISO-2022-JP's escapes."""
    return data.isascii() and b"\x1b" in data and _ESCAPE.search(data) is not None


def _shift_jis(j1: int, j2: int) -> bytes:
    """The Shift_JIS (cp932) code of the JIS X 0208 code ``j1 j2``."""
    s1 = ((j1 + 1) >> 1) + (0x70 if j1 <= 0x5E else 0xB0)
    if j1 % 2:
        s2 = j2 + 0x1F + (1 if j2 >= 0x60 else 0)
    else:
        s2 = j2 + 0x7E
    return bytes((s1, s2))


def decode_iso2022jp(data: bytes) -> str | None:
    """``data`` read as ISO-2022-JP with Microsoft's extensions, or None when it is
    none (an escape it does not know, a JIS code that is none)."""
    out = bytearray()
    mode = "ascii"
    at, size = 0, len(data)
    while at < size:
        byte = data[at]
        if byte == 0x1B:
            mode = _MODES.get(data[at + 1 : at + 3], "")
            if not mode:
                return None  # JIS X 0212, or an escape of no ISO-2022-JP
            at += 3
        elif mode == "jis" and 0x21 <= byte <= 0x7E:
            if at + 1 >= size or not 0x21 <= data[at + 1] <= 0x7E:
                return None
            out += _shift_jis(byte, data[at + 1])
            at += 2
        else:  # ASCII, a line break inside JIS (lenient), half-width katakana
            out.append(byte + 0x80 if mode == "kana" and 0x21 <= byte <= 0x5F else byte)
            at += 1
    try:
        return out.decode("cp932")
    except UnicodeDecodeError:
        return None
