"""What an Outlook ``winmail.dat`` carries (TNEF, MS-OXTNEF): the names and sizes of
the files inside it.

Outlook sending in its rich-text format wraps every attachment of the mail in one
``application/ms-tnef`` part named ``winmail.dat``: the owner mails a report and the
assistant was told of "[attachment: winmail.dat, 84 KB]" alone, the report's name
found nowhere (not by the model, not by search). The stream is a signature, a key,
then attributes (level, id, length, data, checksum); an attachment's title and data
are two of them. Only those are read; the bytes are never kept, as for any attachment.
"""

from __future__ import annotations

import struct

TNEF_SIGNATURE = 0x223E9F78
ATT_ATTACH_REND_DATA = 0x00069002  # starts an attachment
ATT_ATTACH_TITLE = 0x00018010  # its file name (a zero-terminated string)
ATT_ATTACH_DATA = 0x0006800F  # its bytes
# A stream is read this far at most: its attributes say their own lengths, and a
# damaged one must not have us walk a mail's worth of garbage.
MAX_ATTRIBUTES = 10_000


def is_tnef(data: bytes) -> bool:
    """Whether ``data`` starts like a TNEF stream."""
    return len(data) >= 6 and struct.unpack_from("<I", data)[0] == TNEF_SIGNATURE


def tnef_files(data: bytes) -> list[tuple[str | None, int | None]]:
    """(name, size) of each file in the TNEF stream ``data``, as far as it can be read
    (a cut or damaged stream yields what came before the damage); [] for no TNEF."""
    if not is_tnef(data):
        return []
    files: list[list[str | int | None]] = []
    at = 6  # signature, key
    for _ in range(MAX_ATTRIBUTES):
        if at + 9 > len(data):
            break
        _level, attribute, length = struct.unpack_from("<BII", data, at)
        start, at = at + 9, at + 9 + length + 2  # data, then a 16-bit checksum
        if at > len(data):
            break
        if attribute == ATT_ATTACH_REND_DATA or (not files and attribute == ATT_ATTACH_TITLE):
            files.append([None, None])
        if not files:
            continue
        if attribute == ATT_ATTACH_TITLE:
            title = data[start : start + length].split(b"\0", 1)[0]
            files[-1][0] = title.decode("cp1252", "replace").strip() or None
        elif attribute == ATT_ATTACH_DATA:
            files[-1][1] = length
    return [
        (name if isinstance(name, str) else None, size if isinstance(size, int) else None)
        for name, size in files
        if name is not None or size is not None
    ]
