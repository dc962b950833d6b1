"""A Bloom filter over the channel message ids already recorded (``message_refs``).

Every inbound message is first checked for being a redelivery (a Telegram update or an
IMAP message seen again after a restart). Asking ``message_refs`` costs a hop to the
reader thread, which may be busy with a search for a reply, and almost every answer is
"new". The filter answers "certainly new" in memory; only a possible hit (a real
duplicate, or a false positive at about 1 %) goes to the database.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

# fewer than this many refs recorded: the filter is sized for it anyway (1.2 MB)
MIN_CAPACITY = 1 << 20
ERROR_RATE = 0.01
LOAD_CHUNK = 20_000  # refs hashed per numpy pass at start


def line_refs(line: Mapping[str, Any], default_channel: str) -> list[tuple[str, str, str]]:
    """The (channel, ref, direction) pairs a transcript line records in ``message_refs``."""
    if line.get("type") == "turn":
        meta = line.get("metadata")
        if not isinstance(meta, Mapping):
            return []
        channel = line.get("channel") or default_channel
        refs = (meta.get("messageId"), meta.get("messageRef"))
        return [(channel, ref, "in") for ref in dict.fromkeys(refs) if isinstance(ref, str) and ref]
    if line.get("type") == "event" and line.get("event") == "message_ref":
        ref = line.get("ref")
        if isinstance(ref, str) and ref:
            return [(line.get("channel") or default_channel, ref, line.get("direction", "out"))]
    return []


class RefFilter:
    """Bloom filter of ``(channel, ref)``; :meth:`might_contain` never misses an added key."""

    def __init__(self, capacity: int = MIN_CAPACITY) -> None:
        self.capacity = max(1, capacity)
        self.bits = max(64, int(-self.capacity * math.log(ERROR_RATE) / math.log(2) ** 2))
        self.hashes = max(1, round(self.bits / self.capacity * math.log(2)))
        self._array = bytearray((self.bits + 7) // 8)
        self.count = 0

    @classmethod
    def from_index(cls, conn: Any) -> RefFilter:
        """Every ref in ``message_refs``, with room for as many again.

        Runs at every daemon start over every ref ever recorded (hundreds of thousands
        after a year): read in chunks (a list of them all held 27 MB the process kept),
        each hashed in one pass and its bits set with numpy. Adding them one by one took
        2 s at 150,000 refs (docs/benchmarks.md, "scale (session 19)"); the bits are the
        same.
        """
        count = int(conn.execute("SELECT count(*) FROM message_refs").fetchone()[0])
        refs = cls(max(MIN_CAPACITY, 2 * count))
        cursor = conn.execute("SELECT channel, ref FROM message_refs")
        while rows := cursor.fetchmany(LOAD_CHUNK):
            refs.add_many(rows)
        return refs

    def add_many(self, keys: Iterable[tuple[str, str]]) -> None:
        """:meth:`add` for many keys at once (the same bits, set in bulk)."""
        digests = b"".join(_digest(str(channel), str(ref)) for channel, ref in keys)
        if not digests:
            return
        pairs = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
        bits = np.uint64(self.bits)
        # (first + i * second) % bits as in _positions, reduced first so that nothing
        # overflows 64 bits (bits and hashes are far below 2**32)
        first = pairs[:, 0] % bits
        second = (pairs[:, 1] | np.uint64(1)) % bits
        steps = np.arange(self.hashes, dtype=np.uint64)
        positions = ((first[:, None] + steps[None, :] * second[:, None]) % bits).ravel()
        array = np.frombuffer(self._array, dtype=np.uint8)  # a view: set in place
        masks = np.left_shift(np.uint8(1), (positions & np.uint64(7)).astype(np.uint8))
        np.bitwise_or.at(array, (positions >> np.uint64(3)).astype(np.intp), masks)
        self.count += len(pairs)

    @property
    def full(self) -> bool:
        """Past its capacity the error rate climbs: the caller stops trusting it."""
        return self.count > self.capacity

    def _positions(self, channel: str, ref: str) -> Iterable[int]:
        digest = _digest(channel, ref)
        first = int.from_bytes(digest[:8], "little")
        second = int.from_bytes(digest[8:], "little") | 1
        return ((first + i * second) % self.bits for i in range(self.hashes))

    def add(self, channel: str, ref: str) -> None:
        for bit in self._positions(channel, ref):
            self._array[bit >> 3] |= 1 << (bit & 7)
        self.count += 1

    def might_contain(self, channel: str, ref: str) -> bool:
        array = self._array
        return all(array[bit >> 3] & (1 << (bit & 7)) for bit in self._positions(channel, ref))


def _digest(channel: str, ref: str) -> bytes:
    return hashlib.blake2b(f"{channel}\x00{ref}".encode(), digest_size=16).digest()
