"""The keyword tail: conversations a search's words match beyond its ranked candidates.

The ranking reads the best ``candidates`` turns of each source (:mod:`bot.search.keyword`,
:mod:`bot.vectors`). A word found in more turns than that ranks the best of them, and
paging with the cursor used to end there, with ``total`` counting only those: a
conversation that holds the words but not among the best 50 turns could not be reached.
When the keyword source was cut at its limit (:attr:`Listing.saturated`), the pages after
the ranked list go on with every other conversation the same keyword query matches,
ordered by its best turn's ``-bm25`` (:func:`keyword_tail`), so that nothing holding the
words is out of reach. The tail is read once, when a page first needs it, and served from
the same cache as the ranking; ``total`` is a lower bound until then
(:attr:`Listing.total_exact`).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from bot.db import SyncConn
from bot.search.fusion import Ranked, Scored
from bot.search.results import Filters

# Conversations the tail lists at most: more than anyone pages through; past it, a
# narrower query (or a date or channel filter) finds the rest.
TAIL_LIMIT = 1000
# Tail scores stay below the last ranked conversation's, so the scores of a paged
# listing never go up.
_TAIL_SCALE = 0.99


@dataclass
class Listing:
    """A ranking and what paging past it needs (one cache entry of a query)."""

    scored: Scored
    match: str = ""  # the FTS5 query of the keyword stage
    saturated: bool = False  # the keyword stage returned as many turns as it asked for
    tail: list[Ranked] | None = None  # read on demand: None until a page needs it
    tail_complete: bool = True

    @property
    def known(self) -> int:
        """Conversations listed so far: the ranking, plus the tail once it is read."""
        return len(self.scored.conversations) + len(self.tail or ())

    @property
    def total_exact(self) -> bool:
        return not self.saturated or (self.tail is not None and self.tail_complete)

    def needs_tail(self, shown: Container[str], limit: int) -> bool:
        """Whether the next ``limit`` conversations after ``shown`` (ids) reach past the
        ranked ones into an unread tail."""
        if not self.saturated or self.tail is not None:
            return False
        left = 0  # counted only up to ``limit``: a first page has thousands unlisted
        for conv, _ in self.scored.conversations:
            if conv not in shown:
                left += 1
                if left >= limit:
                    return False
        return True

    def order(self) -> list[str]:
        """Every conversation listed so far, in listing order: the ranking, then the tail."""
        ranked = [c for c, _ in self.scored.conversations]
        return ranked + [item.conversation_id for item in self.tail or ()]

    def page(self, shown: Container[str], limit: int) -> tuple[list[Ranked], bool]:
        """The first ``limit`` conversations of the ranking, then of the tail, that are
        not in ``shown`` (ids), and whether any other is left (an unread tail counts as
        more)."""
        items: list[Ranked] = []
        for conv, score in self.scored.conversations:
            if conv in shown:
                continue
            if len(items) == limit:
                return items, True
            items.append(self.scored.conversation(conv, score))
        for item in self.tail or ():
            if item.conversation_id in shown:
                continue
            if len(items) == limit:
                return items, True
            items.append(item)
        return items, self.saturated and self.tail is None


def keyword_tail(
    conn: SyncConn, match: str, filters: Filters, listed: set[str], floor: float
) -> tuple[list[Ranked], bool]:
    """The conversations ``match`` finds that are not in ``listed``, best turn first.

    Returns the items (at most :data:`TAIL_LIMIT`) and whether that is all of them.
    ``floor`` is the last ranked score: tail scores stay below it, in ``-bm25`` order.
    """
    where, params = filters.sql("t")
    join = " JOIN conversations c ON c.id = t.conversation_id" if filters.channel else ""
    # bm25() cannot be aggregated directly: the MATCH is materialised first. The bare
    # columns of a max() aggregate come from the row that holds the maximum (SQLite).
    rows = conn.execute(
        "WITH m AS MATERIALIZED (SELECT rowid, -bm25(turns_fts) AS s FROM turns_fts "
        "WHERE turns_fts MATCH ?) "
        "SELECT t.conversation_id, max(m.s), t.turn_number, t.content, t.timestamp "
        f"FROM m JOIN turns t ON t.id = m.rowid{join} WHERE {where} "
        "GROUP BY t.conversation_id ORDER BY 2 DESC, 1 LIMIT ?",
        [match, *params, TAIL_LIMIT + len(listed) + 1],
    ).fetchall()
    found = [r for r in rows if str(r[0]) not in listed]
    complete = len(found) <= TAIL_LIMIT
    found = found[:TAIL_LIMIT]
    if not found:
        return [], complete
    best = max(float(found[0][1]), 1e-9)
    top = max(0.0, floor) * _TAIL_SCALE
    items = []
    for conv, score, number, content, when in found:
        value = top * max(0.0, float(score)) / best
        turns = [(int(number), value)]
        items.append(Ranked(str(conv), value, turns, str(content), [int(number)], str(when or "")))
    return items, complete
