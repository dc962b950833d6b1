"""The candidate neighbourhood: turns around the hits, with their vectors.

The keyword hits' spans and the vector hits' spans are read in two statements (on either
side of the query embedding, see :mod:`bot.search.service`) over disjoint spans
(:func:`subtract`); :func:`build_rows` merges them in the order one ordered query gave.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from bot.db import SyncConn
from bot.named_dates import DateRange, query_dates
from bot.owner_days import local_days
from bot.ranking import Neighbourhood
from bot.vector_codec import half_matrix


@dataclass
class Rows:
    """The candidate neighbourhood: turns (+ vectors) in (conversation, number, id) order."""

    ids: list[int]
    conv: list[str]
    number: list[int]
    sender: list[str]
    timestamp: list[str]
    content: list[str]
    channel: list[str]
    matrix: np.ndarray  # (n, dims) float32, zero rows where a turn has no vector yet
    has: np.ndarray  # bool: the row has a vector
    codes: np.ndarray  # int conversation codes (same code = same conversation)
    role: list[str] = field(default_factory=list)  # "user" / "assistant" (may be absent)
    # the owner's time zone: a date the query names is a day of the owner's calendar
    zone: ZoneInfo | None = None
    # the dates the ranked query names, as the search read them (on the owner's today:
    # "yesterday", "last week"); None: read from the query by :meth:`named_dates`
    dates: list[DateRange] | None = None
    _speakers: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _days: list[date | None] | None = field(default=None, init=False, repr=False, compare=False)
    _hood: Neighbourhood | None = field(default=None, init=False, repr=False, compare=False)

    def hood(self) -> Neighbourhood:
        """The rows' :class:`~bot.ranking.Neighbourhood`, one per ranking: the fusion,
        soft coverage and the learned features share its computed shifts."""
        if self._hood is None:
            self._hood = Neighbourhood(self.codes, np.asarray(self.number, dtype=np.int64))
        return self._hood

    def named_dates(self, query: str) -> list[DateRange]:
        """The dates ``query`` names: :attr:`dates` as the search read them once per
        ranking (the fusion's prior, the learned ranker's feature and the conversation
        list's date term all ask), else :func:`~bot.named_dates.query_dates` without a
        today (rows built outside a search)."""
        if self.dates is None:
            self.dates = query_dates(query)
        return self.dates

    def days(self) -> list[date | None]:
        """Each row's day in the owner's calendar (:attr:`zone`; the stored timestamps
        are UTC: an evening turn west of UTC is dated the next day there, and missed a
        question naming its own day). Computed once per ranking, on the first use (only
        queries that name a date read it)."""
        if self._days is None:
            self._days = local_days(self.timestamp, self.zone)
        return self._days

    def speakers(self) -> np.ndarray | None:
        """Int codes of who spoke each row (role and sender), or None when the roles are
        not loaded: consecutive rows by the same speaker do not answer each other.
        Computed once per ranking (the fusion and the learned features both read it)."""
        if len(self.role) != len(self.ids):
            return None
        if self._speakers is None:
            pairs = list(zip(self.role, self.sender, strict=True))
            self._speakers = dense_codes(pairs)
        return self._speakers


def turn_positions(conn: SyncConn, ids: list[int]) -> dict[int, tuple[str, int]]:
    """turn id -> (conversation, turn number) for the ``ids`` that exist."""
    out: dict[int, tuple[str, int]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for turn_id, conv, number in conn.execute(
            f"SELECT id, conversation_id, turn_number FROM turns WHERE id IN ({marks})", chunk
        ):
            out[int(turn_id)] = (str(conv), int(number))
    return out


def fetch_spans(
    conn: SyncConn,
    ranges: dict[str, list[tuple[int, int]]],
    want_vectors: bool,
    channels: bool = True,
) -> list[tuple[Any, ...]]:
    """The raw rows of the turns in ``ranges`` (unordered; :func:`build_rows` sorts):
    (id, conversation, number, sender, timestamp, content, channel, float16 vector, role).
    Readouts (``turns.recall = 0``) are not loaded: they are nobody's neighbour.
    ``channels=False``: the channel is "" (only a filtered ranking reads it; the join
    to ``conversations`` was ~10% of the statement)."""
    values: list[Any] = []
    for conv in sorted(ranges):
        for lo, hi in merge(ranges[conv]):
            values.extend((conv, lo, hi))
    vector = "v.vector" if want_vectors else "NULL"
    vector_join = " LEFT JOIN turn_vectors v ON v.turn_id = t.id" if want_vectors else ""
    channel = "c.channel" if channels else "''"
    channel_join = " JOIN conversations c ON c.id = t.conversation_id" if channels else ""
    rows: list[Any] = []
    step = 300  # ranges per statement, far below SQLite's host-parameter limit
    for start in range(0, len(values), step * 3):
        chunk = values[start : start + step * 3]
        spec = ",".join(["(?, ?, ?)"] * (len(chunk) // 3))
        # no ORDER BY: sorting ~1,000 wide rows (content + 768-byte vectors) in a temp
        # B-tree cost more than the rest of the statement; Python sorts the tuples instead
        rows.extend(
            conn.execute(
                f"WITH r(c, lo, hi) AS (VALUES {spec}) "
                "SELECT t.id, t.conversation_id, t.turn_number, t.sender, t.timestamp, "
                f"t.content, {channel}, {vector}, t.role FROM r JOIN turns t "
                "ON t.conversation_id = r.c "
                f"AND t.turn_number BETWEEN r.lo AND r.hi AND t.recall = 1{vector_join}"
                f"{channel_join}",
                chunk,
            ).fetchall()
        )
    return rows


# (conversation, turn number, id): the order an ``ORDER BY`` gave (a C-level key: the
# Python function it replaces cost ~0.2 ms of a ranking's ~700 rows)
_order = operator.itemgetter(1, 2, 0)


def build_rows(
    raw: list[tuple[Any, ...]],
    want_vectors: bool,
    dims: int,
    zone: ZoneInfo | None = None,
    dates: list[DateRange] | None = None,
) -> Rows:
    """:class:`Rows` from :func:`fetch_spans` rows (of one or several calls over disjoint
    spans), in (conversation, turn number, id) order, duplicates dropped; ``zone``: the
    owner's time zone (:meth:`Rows.days`); ``dates``: those the query names
    (:meth:`Rows.named_dates`)."""
    rows = sorted({r[0]: r for r in raw}.values(), key=_order)
    n = len(rows)
    columns: list[Any] = list(zip(*rows, strict=True)) if n else [()] * 9
    ids, conv, number, sender, timestamp, content, channel, vectors, role = columns
    if want_vectors and n:
        # C-level loops (map over the column, one join): the generators they replace
        # ran a Python frame per row, ~0.5 ms of a ranking's ~700 rows
        has = np.fromiter(map(operator.is_not, vectors, itertools.repeat(None)), bool, n)
        blob = b"".join(vectors) if has.all() else b"".join(v or bytes(2 * dims) for v in vectors)
        matrix = half_matrix(blob, n, dims)
    else:
        has = np.zeros(n, dtype=bool)
        matrix = np.zeros((n, dims if want_vectors else 0), dtype=np.float32)
    codes = dense_codes(conv)
    return Rows(
        ids=list(ids),
        conv=list(conv),
        number=list(number),
        sender=[s or "" for s in sender] if None in sender else list(sender),
        timestamp=[t or "" for t in timestamp] if None in timestamp else list(timestamp),
        content=list(content),
        channel=list(channel),
        matrix=matrix,
        has=has,
        codes=codes,
        role=list(role),
        zone=zone,
        dates=dates,
    )


def dense_codes(keys: Sequence[Hashable]) -> np.ndarray:
    """int64 codes of ``keys``: 0 for the first distinct key, 1 for the next..., in the
    order they first appear (the conversation codes index per-conversation arrays).
    A dict of the few distinct keys, then one C-level ``map`` over the rows: a
    ``setdefault`` per row in a generator cost ~0.3 ms of a ranking's ~700 rows."""
    code_of = {key: code for code, key in enumerate(dict.fromkeys(keys))}
    return np.fromiter(map(code_of.__getitem__, keys), np.int64, len(keys))


def subtract(
    ranges: dict[str, list[tuple[int, int]]], covered: dict[str, list[tuple[int, int]]]
) -> dict[str, list[tuple[int, int]]]:
    """The parts of ``ranges`` outside ``covered`` (both inclusive, per conversation)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for conv, spans in ranges.items():
        holes = merge(covered.get(conv, []))
        for lo, hi in merge(spans):
            for c_lo, c_hi in holes:
                if c_hi < lo or c_lo > hi:
                    continue
                if c_lo > lo:
                    out.setdefault(conv, []).append((lo, c_lo - 1))
                lo = c_hi + 1
                if lo > hi:
                    break
            if lo <= hi:
                out.setdefault(conv, []).append((lo, hi))
    return out


def merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
