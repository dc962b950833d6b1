"""Search cursors of a bounded size that still neither repeat nor skip a conversation.

A cursor has to say which conversations were listed, not a position: the next page may
be cut from a ranking made again (``my-agent search --cursor`` is a new process, the
cached ranking expired) after new turns moved conversations across the page boundary,
and an offset then listed one twice and skipped another (before session 16). Until
session 17 the cursor carried 4 bytes of every listed id, so it grew by ~7 characters
per result: 700 after 100 results, 8 KB after the 1,000 of a keyword tail, past the
request-line limit of the web API's ``GET /api/search?cursor=``.

Now a cursor holds, in 17 bytes plus 4 per exception (:func:`encode`):

- the query's fingerprint;
- ``prefix``: how many of the ranking's leading conversations were all listed, and
  ``prefix_hash``, the XOR of their 64-bit id hashes (:func:`id_hash`);
- ``extra``: 4 bytes of each listed conversation *beyond* that prefix (one that dropped
  below conversations not listed yet; none while the ranking does not change, and each
  leaves again once the pages reach it).

The next page finds the listed set in whatever ranking serves it (:func:`resolve`): the
first ``prefix`` conversations when their hash matches; otherwise the ranking changed
near or across the boundary, and the few conversations that moved in and out are found
from the hash difference (up to :data:`MAX_MOVES` each way: a new turn moves one). When
more moved, the cursor is refused ("search again") rather than guessing. The daemon
also keeps the exact set of its recent cursors (:class:`bot.search.service.SearchService`),
so this matching only serves cursors from another process or an earlier run.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import struct
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import reduce
from operator import xor

from bot.search.results import InvalidCursor

VERSION = 2  # session 16's cursors (JSON) are refused as expired
DIGEST_BYTES = 4  # of an extra conversation's id hash
MAX_MOVES = 2  # conversations moved in and out of the prefix that resolve() finds
_PAIR_WINDOW = 200  # positions each side of the boundary searched for two moves
_HEADER = struct.Struct(">B6sHQ")  # version, fingerprint, prefix, prefix_hash


@dataclass(frozen=True)
class Cursor:
    """What a page continues from (see the module docstring)."""

    fingerprint: bytes
    prefix: int
    prefix_hash: int
    extra: frozenset[bytes]


def id_hash(conversation_id: str) -> int:
    """64 bits of the id's SHA-1: two ids, or two sets' XORs, colliding is negligible."""
    return int.from_bytes(hashlib.sha1(conversation_id.encode()).digest()[:8], "big")


def digest(conversation_id: str) -> bytes:
    return hashlib.sha1(conversation_id.encode()).digest()[:DIGEST_BYTES]


def after(listed: Collection[str], order: Sequence[str], fingerprint: bytes) -> Cursor:
    """The cursor of a listing that showed ``listed``, in the ranking ``order``."""
    prefix = 0
    while prefix < len(order) and order[prefix] in listed:
        prefix += 1
    prefix = min(prefix, 0xFFFF)
    head = reduce(xor, (id_hash(c) for c in order[:prefix]), 0)
    # the listed ones past the prefix (few, near it): the scan stops at the last of them
    wanted = len(listed) - prefix
    found: list[bytes] = []
    for c in itertools.islice(order, prefix, None):
        if len(found) >= wanted:
            break
        if c in listed:
            found.append(digest(c))
    extra = frozenset(found)
    return Cursor(fingerprint, prefix, head, extra)


def encode(cursor: Cursor) -> str:
    raw = _HEADER.pack(VERSION, cursor.fingerprint, cursor.prefix, cursor.prefix_hash)
    raw += b"".join(sorted(cursor.extra))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(text: str, fingerprint: bytes) -> Cursor:
    """The cursor ``text``; :class:`InvalidCursor` when it is malformed, of another
    query, or of an older format."""
    try:
        raw = base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode())
    except (binascii.Error, ValueError, UnicodeError) as exc:
        raise InvalidCursor("malformed search cursor") from exc
    if raw[:1] == b"{" and raw[-1:] == b"}":  # session 16's JSON cursor
        raise InvalidCursor("this search cursor has expired: search again")
    if len(raw) < _HEADER.size or (len(raw) - _HEADER.size) % DIGEST_BYTES:
        raise InvalidCursor("malformed search cursor")
    version, given, prefix, head = _HEADER.unpack_from(raw)
    if version != VERSION:
        raise InvalidCursor("this search cursor has expired: search again")
    if given != fingerprint:
        raise InvalidCursor("this cursor belongs to another search")
    rest = raw[_HEADER.size :]
    extra = frozenset(rest[i : i + DIGEST_BYTES] for i in range(0, len(rest), DIGEST_BYTES))
    return Cursor(given, prefix, head, extra)


def resolve(cursor: Cursor, order: Sequence[str]) -> set[str] | None:
    """The conversations of ``order`` listed before ``cursor``; None when the ranking
    changed more than :data:`MAX_MOVES` conversations in and out of the prefix."""
    m = cursor.prefix
    if m > len(order):
        return None
    hashes = [id_hash(c) for c in order]
    delta = reduce(xor, hashes[:m], 0) ^ cursor.prefix_hash
    listed = set(order[:m])
    if delta:
        moved = _moves(delta, hashes, m)
        if moved is None:
            return None
        gone, came = moved
        listed.difference_update(order[i] for i in gone)
        listed.update(order[i] for i in came)
    if cursor.extra:
        listed.update(c for c in order if digest(c) in cursor.extra)
    return listed


def _moves(delta: int, hashes: list[int], m: int) -> tuple[list[int], list[int]] | None:
    """Positions inside the prefix that were not listed and positions after it that were,
    as many each way, whose hashes XOR to ``delta``."""
    inside = range(m)
    beyond = range(m, len(hashes))
    by_hash = {hashes[j]: j for j in beyond}
    for i in inside:  # one conversation moved in, one out: the usual new turn
        j = by_hash.get(delta ^ hashes[i])
        if j is not None:
            return [i], [j]
    if MAX_MOVES < 2:
        return None
    near_in = inside[-_PAIR_WINDOW:]
    near_out = beyond[:_PAIR_WINDOW]
    pairs = {hashes[a] ^ hashes[b]: (a, b) for a, b in itertools.combinations(near_out, 2)}
    for a, b in itertools.combinations(near_in, 2):
        found = pairs.get(delta ^ hashes[a] ^ hashes[b])
        if found is not None:
            return [a, b], list(found)
    return None
