"""The turns a search may draw its vector candidates from, when that is not every turn.

The vector stage's sign-bit shortlist is taken over every turn of the store. A search
that is filtered (a channel, a date range: the assistant's ``dateRange``, the CLI's
``--from``/``--to``) used to keep only those of the store-wide nearest turns that pass the
filter, and a day whose conversation was not among them came back empty: asked for "what
did we discuss" on a given day, nothing, though a conversation was held that day. So a
filtered search now takes its nearest turns among the turns that pass the filter
(:func:`turn_pool`), and a query that names dates ("yesterday", "on 14 October 2026")
adds the nearest turns of those days as candidates (:func:`dated_filters`): the date
prior can only lift a turn that is a candidate.

The pool is read on the reader thread in the keyword hop (a range of the ``turns_by_time``
index, migration 7; a channel alone through ``conversations_channel``), bounded by
:data:`POOL_CAP` turns: past it the filter keeps so much of the store that the store-wide
shortlist serves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import numpy as np

from bot.db import SyncConn
from bot.named_dates import ANY_YEAR, DateRange, latest_occurrence
from bot.owner_days import day_bound
from bot.search.results import Filters

if TYPE_CHECKING:
    from bot.vectors import VectorIndex

POOL_CAP = 50_000  # turns: the sign bits of 50,000 turns are gathered in ~2 ms
DATED_MAX_DAYS = 92  # a query naming more (a year) gets no dated candidates


@dataclass
class Pool:
    """Turn ids (int64, in the order read: it decides ties at the shortlist's cut) and
    their conversations, as read for one search."""

    turns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    conversations: set[str] = field(default_factory=set)

    def add(self, other: Pool) -> None:
        new = other.turns[~np.isin(other.turns, self.turns)]
        self.turns = np.concatenate([self.turns, new])
        self.conversations |= other.conversations


def narrows(filters: Filters) -> bool:
    """The filter keeps only part of the store (and is not one conversation, whose every
    turn the vector stage scores anyway)."""
    return bool(filters.channel or filters.date_from or filters.date_to) and not (
        filters.conversation_id
    )


def turn_pool(
    conn: SyncConn, filters: Filters, cap: int | None = None, *, conversations: bool = False
) -> Pool | None:
    """The turns passing ``filters`` (and with ``conversations`` the conversations whose
    abbreviations may be listed); None when more than ``cap`` turns pass (or the filter
    does not narrow); ``cap`` defaults to :data:`POOL_CAP`."""
    if not narrows(filters):
        return None
    cap = POOL_CAP if cap is None else cap
    if not (filters.date_from or filters.date_to) and _turns_at_least(conn, filters) > cap:
        # a channel alone: its conversations' turn numbers say it is over the cap without
        # reading cap + 1 turns (30 ms) on every search filtered by a large channel
        return None
    join, where, params = _turns_sql(filters)
    # ids only: read from the index alone (31 ms with each turn's conversation, which is
    # a read of the table per turn), joined into one string by SQLite in the order read:
    # a Python row per turn, and the substr() above, took 10 ms of a month's 16,000
    # turns, 3 ms now (session 17: a dated query cost ~12 ms more than an undated one)
    count, joined = conn.execute(
        f"SELECT count(*), group_concat(id) FROM (SELECT t.id AS id FROM turns t{join} "
        f"WHERE {where} LIMIT ?)",
        [*params, cap + 1],
    ).fetchone()
    if count > cap:
        return None
    ids = np.array(joined.split(","), dtype=np.int64) if joined else np.zeros(0, np.int64)
    pool = Pool(ids)
    if conversations:
        pool.conversations = _conversations(conn, filters)
    return pool


def _turns_sql(filters: Filters) -> tuple[str, str, list[Any]]:
    """The join, conditions and parameters over ``turns t`` of the turns passing
    ``filters``, the dates as a range of the ``turns_by_time`` index."""
    where, params = filters.sql("t", prefix_end=False)
    if filters.date_to:
        # the same end as the filter's prefix comparison, in a form the `turns_by_time`
        # index can stop at ("~" sorts after every character of a timestamp); the
        # prefix comparison itself, a substr() per turn, is left out (Filters.sql)
        where += " AND t.timestamp <= ?"
        params.append(filters.date_to + "~")
    join = " JOIN conversations c ON c.id = t.conversation_id" if filters.channel else ""
    return join, where, params


def _turns_at_least(conn: SyncConn, filters: Filters) -> int:
    """About the fewest turns passing ``filters``: the sum of the conversations' last
    turn numbers (``turn_count``; a number holds the message and its reply, so there are
    at least as many rows), read through the ``conversations_channel`` index."""
    where, params = filters.conversation_sql()
    row = conn.execute(
        f"SELECT coalesce(sum(turn_count), 0) FROM conversations WHERE {where}", params
    ).fetchone()
    return int(row[0])


def _conversations(conn: SyncConn, filters: Filters) -> set[str]:
    """The conversations a filtered search may list by their abbreviation: the same test
    as for the store-wide ones (:func:`accepted`)."""
    where, params = filters.conversation_sql()
    return {str(r[0]) for r in conn.execute(f"SELECT id FROM conversations WHERE {where}", params)}


def dated_filters(
    ranges: Sequence[DateRange],
    filters: Filters,
    zone: ZoneInfo | None,
    today: date | None = None,
) -> list[Filters]:
    """``filters`` narrowed to each of the owner's day ranges a query names, as UTC
    bounds; none when the filter already has dates or is one conversation, or when
    together they exceed :data:`DATED_MAX_DAYS`. A range in every year
    (:data:`~bot.named_dates.ANY_YEAR`: "on 3 November", "in June") is its latest
    occurrence up to ``today`` (the owner's; none without it): such a day's
    conversation was no candidate, and "what did we discuss on 3 November?" listed it
    37th, while the date prior still lifts that day of every year among the candidates."""
    if filters.date_from or filters.date_to or filters.conversation_id or not ranges:
        return []
    if any(start.year == ANY_YEAR for start, _ in ranges):
        if today is None:
            return []
        ranges = [latest_occurrence(r, today) if r[0].year == ANY_YEAR else r for r in ranges]
    if sum((end - start).days + 1 for start, end in ranges) > DATED_MAX_DAYS:
        return []
    zone = zone or ZoneInfo("UTC")
    return [
        replace(
            filters,
            date_from=day_bound(start.isoformat(), "date_from", zone),
            date_to=day_bound(end.isoformat(), "date_to", zone, end=True),
        )
        for start, end in ranges
    ]


def pool_of(conn: SyncConn, many: Sequence[Filters], cap: int | None = None) -> Pool | None:
    """The union of :func:`turn_pool` over ``many`` filters (None if there are none or
    any is over ``cap``)."""
    if not many:
        return None
    total = Pool()
    for one in many:
        pool = turn_pool(conn, one, cap)
        if pool is None:
            return None
        total.add(pool)
    return total


def first_turns(conn: SyncConn, many: Sequence[Filters], limit: int) -> list[int]:
    """The first turn, inside the days of ``many`` (:func:`dated_filters`), of each
    conversation held then: at most ``limit`` conversations, in the order their first
    turn there was said. A keyword-only search's candidates for the dates a query names:
    without vectors there are no nearest turns of those days to add, and "what did we
    talk about yesterday?" found nothing of yesterday, whose conversations shared no
    word with it. Read in time order through ``turns_by_time``, stopping at ``limit``
    conversations (grouping a month's 16,000 turns by conversation took 10 ms)."""
    found: dict[str, int] = {}
    for one in many:
        join, where, params = _turns_sql(one)
        turns = conn.execute(
            f"SELECT t.id, t.conversation_id FROM turns t{join} WHERE {where} "
            "ORDER BY t.timestamp LIMIT ?",
            [*params, POOL_CAP],
        )
        for turn_id, conv in turns:
            found.setdefault(conv, int(turn_id))
            if len(found) >= limit:
                return list(found.values())
    return list(found.values())


async def scoped_candidates(
    vectors: VectorIndex, query: np.ndarray, depth: int, pool: Pool | None, abbreviations: bool
) -> tuple[list[int], dict[str, float]]:
    """The sign-bit shortlist and the nearest abbreviations among ``pool`` (a filtered
    search's turns and conversations); store-wide when the pool was over its cap."""
    shortlist = vectors.turn_shortlist(query, depth, among=pool.turns if pool else None)
    among = pool.conversations if pool else None
    abbr = await vectors.knn_abbreviations(query, depth, among) if abbreviations else {}
    return shortlist, abbr


def accepted(conn: SyncConn, scores: dict[str, float], filters: Filters) -> dict[str, float]:
    """Keep the conversations that pass ``filters`` (their turns' span for dates)."""
    ids = list(scores)
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT id, channel, created, updated FROM conversations WHERE id IN ({marks})", ids
    ).fetchall()
    keep = {
        str(conv)
        for conv, channel, created, updated in rows
        if filters.accepts(str(conv), str(channel), str(updated or ""))
        and not (filters.date_to and str(created or "")[: len(filters.date_to)] > filters.date_to)
    }
    return {c: v for c, v in scores.items() if c in keep}
