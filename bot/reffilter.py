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

# fewer than this many refs recorded: the filter is sized for it anyway (1.2 MB)
MIN_CAPACITY = 1 << 20
ERROR_RATE = 0.01


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
        """Every ref in ``message_refs``, with room for as many again."""
        count = int(conn.execute("SELECT count(*) FROM message_refs").fetchone()[0])
        refs = cls(max(MIN_CAPACITY, 2 * count))
        for channel, ref in conn.execute("SELECT channel, ref FROM message_refs"):
            refs.add(str(channel), str(ref))
        return refs

    @property
    def full(self) -> bool:
        """Past its capacity the error rate climbs: the caller stops trusting it."""
        return self.count > self.capacity

    def _positions(self, channel: str, ref: str) -> Iterable[int]:
        digest = hashlib.blake2b(f"{channel}\x00{ref}".encode(), digest_size=16).digest()
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
