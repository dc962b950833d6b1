"""Outlook's ``Thread-Index``: the thread a mail belongs to when its References are gone.

Outlook and Exchange give every mail a ``Thread-Index`` (base64 of the conversation
index, MS-OXOMSG 2.2.1.3): a 22-byte header block naming the thread (a reserved byte,
five bytes of the time the thread began, a GUID), then five bytes per reply. A gateway
that drops ``References`` and ``In-Reply-To`` (some do, on the way in or out of a
company) leaves it, and the owner's Outlook reply started a new conversation. The channel
hands the thread over as a reference of its own, ``thread-index:<sender>:<root>``,
after the mail's real ones: the core joins the conversation it was recorded for, when we
answered that sender in that thread. The sender is part of it: anyone can copy a
Thread-Index (a forward keeps it), and a thread is one person's with the assistant.
Our replies carry the thread's block plus one of their own, so that the owner's answer
to them keeps the thread too.
"""

from __future__ import annotations

import base64
import binascii
import os
import time

ROOT_BYTES = 22  # the header block: the thread
_CHILD_BYTES = 5  # one per reply
_MAX_BYTES = 22 + 5 * 200  # a thread hundreds of replies deep; beyond it, no Thread-Index
REF_PREFIX = "thread-index:"
# 100 ns intervals between 1601-01-01 (FILETIME's epoch) and 1970-01-01
_FILETIME_EPOCH = 116444736000000000


def read_thread_index(value: str) -> bytes | None:
    """The decoded ``Thread-Index`` header ``value``, or None when it is none: not
    base64, or not a header block followed by whole reply blocks."""
    value = "".join(value.split())
    if not value or len(value) > 2 * _MAX_BYTES:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) < ROOT_BYTES or (len(raw) - ROOT_BYTES) % _CHILD_BYTES:
        return None
    return raw


def thread_ref(sender: str, index: bytes) -> str:
    """The reference naming the thread of ``index`` between us and ``sender``."""
    root = base64.urlsafe_b64encode(index[:ROOT_BYTES]).decode().rstrip("=")
    return f"{REF_PREFIX}{sender.strip().lower()}:{root}"


def root_of(ref: str) -> bytes | None:
    """The header block a :func:`thread_ref` names, or None when ``ref`` is none."""
    if not ref.startswith(REF_PREFIX):
        return None
    encoded = ref.rpartition(":")[2]
    try:
        root = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        return None
    return root if len(root) == ROOT_BYTES else None


def reply_index(root: bytes, now: float | None = None) -> str:
    """The ``Thread-Index`` of a reply in the thread ``root`` names: its header block and
    one reply block (MS-OXOMSG: a flag bit, 31 bits of the time since the thread began,
    four random bits, a four-bit sequence), base64."""
    # the thread's start: the top 48 bits of a FILETIME (the first of them, 0x01 for any
    # date since 1665, is what the spec calls its reserved byte)
    started = int.from_bytes(root[:6] + b"\0\0", "big")
    filetime = int((time.time() if now is None else now) * 10_000_000) + _FILETIME_EPOCH
    delta = max(0, filetime - started)
    # bits 18..48 of the difference while it fits (about 1.7 years), else bits 23..53
    if delta < 1 << 49:
        bits = (delta >> 18) & 0x7FFFFFFF
    else:
        bits = 0x80000000 | (delta >> 23) & 0x7FFFFFFF
    child = bits.to_bytes(4, "big") + bytes([os.urandom(1)[0] & 0xF0])
    return base64.b64encode(root + child).decode()
