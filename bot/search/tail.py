"""The keyword tail: conversations a search's words match beyond its ranked candidates.

The ranking reads the best ``candidates`` turns of each source (:mod:`bot.search.keyword`,
:mod:`bot.vectors`). A word found in more turns than that ranks the best of them, and
paging with the cursor used to end there, with ``total`` counting only those: a
conversation that holds the words but not among the best 50 turns could not be reached.
When the keyword source was cut at its limit (:attr:`Listing.saturated`; a keyword-only
search's notes, and the titles, :mod:`bot.search.titles`), the pages after the ranked
list go on with every other conversation the same keyword query matches, in its turns,
its notes (``notes_fts``) or its title (``titles_fts``), ordered by its best match's
``-bm25`` (:func:`keyword_tail`), so that nothing holding the words is out of reach. Before session
25 the tail read the turns only: a conversation whose notes alone held the words, past
the best ``candidates`` notes, was never listed. The tail is read once, when a page
first needs it, and served from the same cache as the ranking; ``total`` is a lower
bound until then (:attr:`Listing.total_exact`).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from bot.config.model import SearchConfig
from bot.db import SyncConn
from bot.search.fusion import Ranked, Scored
from bot.search.results import Filters
from bot.search.titles import title_matches

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
    saturated: bool = False  # the keyword stage (turns, or keyword-only notes) was cut
    tail: list[Ranked] | None = None  # read on demand: None until a page needs it
    tail_complete: bool = True
    # of the ranked conversations, those only loosely related to the query
    # (:func:`bot.search.pages.loose_count`; the tail's share its words): None until a
    # page first counts them
    loose: int | None = None

    @property
    def known(self) -> int:
        """Conversations listed so far: the ranking, plus the tail once it is read."""
        return len(self.scored.conversations) + len(self.tail or ())

    @property
    def total_exact(self) -> bool:
        return not self.saturated or (self.tail is not None and self.tail_complete)

    def needs_tail(self, shown: Container[str], limit: int) -> bool:
        """Whether the next ``limit`` conversations after ``shown`` (ids), and the one
        after them that says whether a next page exists, reach past the ranked ones into
        an unread tail. Without that one, a page that took the last ranked conversation
        handed out a cursor to an unread tail that could be empty: the next page said
        "no conversation matches" right after the matches were listed."""
        if not self.saturated or self.tail is not None:
            return False
        left = 0  # counted only up to ``limit``: a first page has thousands unlisted
        for conv, _ in self.scored.conversations:
            if conv not in shown:
                left += 1
                if left > limit:
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
    conn: SyncConn,
    match: str,
    filters: Filters,
    listed: set[str],
    floor: float,
    cfg: SearchConfig,
) -> tuple[list[Ranked], bool]:
    """The conversations ``match`` finds that are not in ``listed``, best match first:
    by their turns (``turns_fts``), their notes (``notes_fts``, migration 10) or their
    titles (``titles_fts``, migration 12, of the kinds ``cfg`` weighs).

    Returns the items (at most :data:`TAIL_LIMIT`) and whether that is all of them.
    ``floor`` is the last ranked score: tail scores stay below it. Each source's ``-bm25``
    is divided by its best in the tail, and a conversation found by both takes the higher.
    """
    cap = TAIL_LIMIT + len(listed) + 1
    turns = _turn_matches(conn, match, filters, cap)
    notes = _note_matches(conn, match, filters, cap)
    titles = title_matches(conn, match, filters, cap, cfg)
    complete = len(turns) < cap and len(notes) < cap and len(titles) < cap
    turn_best = max((float(r[1]) for r in turns), default=0.0)
    found: dict[str, tuple[float, tuple[int, str, str] | None]] = {}
    for conv, score, number, content, when in turns:
        if str(conv) not in listed:
            found[str(conv)] = (
                _share(score, turn_best),
                (int(number), str(content), str(when or "")),
            )
    for matches in (notes, titles):
        best = max((score for _, score in matches), default=0.0)
        for conv, score in matches:
            share = _share(score, best)
            if conv not in listed and share > found.get(conv, (-1.0, None))[0]:
                # the notes or the title matched better: the turn stays the snippet
                # (found by them alone: the notes)
                found[conv] = (share, found[conv][1] if conv in found else None)
    ordered = sorted(found.items(), key=lambda item: (-item[1][0], item[0]))
    complete = complete and len(ordered) <= TAIL_LIMIT
    top = max(0.0, floor) * _TAIL_SCALE
    titled = {conv for conv, _ in titles}
    items = []
    for conv, (share, turn) in ordered[:TAIL_LIMIT]:
        value = top * share
        if turn is None:  # found by its notes or title only: listed as the ranking does
            items.append(Ranked(conv, value, [], "", [], in_title=conv in titled))
            continue
        number, content, when = turn
        items.append(
            Ranked(conv, value, [(number, value)], content, [number], when, in_title=conv in titled)
        )
    return items, complete


def _share(score: float, best: float) -> float:
    return max(0.0, float(score)) / max(best, 1e-9)


def _turn_matches(conn: SyncConn, match: str, filters: Filters, cap: int) -> list[Any]:
    """Each conversation's best turn for ``match``: (conversation, -bm25, turn number,
    content, timestamp), best first, at most ``cap``."""
    where, params = filters.sql("t")
    join = " JOIN conversations c ON c.id = t.conversation_id" if filters.channel else ""
    # bm25() cannot be aggregated directly: the MATCH is materialised first. The bare
    # columns of a max() aggregate come from the row that holds the maximum (SQLite).
    return conn.execute(
        "WITH m AS MATERIALIZED (SELECT rowid, -bm25(turns_fts) AS s FROM turns_fts "
        "WHERE turns_fts MATCH ?) "
        "SELECT t.conversation_id, max(m.s), t.turn_number, t.content, t.timestamp "
        f"FROM m JOIN turns t ON t.id = m.rowid{join} WHERE {where} "
        "GROUP BY t.conversation_id ORDER BY 2 DESC, 1 LIMIT ?",
        [match, *params, cap],
    ).fetchall()


def _note_matches(
    conn: SyncConn, match: str, filters: Filters, cap: int
) -> list[tuple[str, float]]:
    """The conversations whose notes match ``match``: (conversation, -bm25), best first,
    at most ``cap``; filtered as the ranking filters its notes (the conversation's last
    activity in the date range and its start not after it:
    :func:`bot.search.pool.accepted`)."""
    cond, params = filters.notes_sql()
    where = f" AND n.conversation_id IN (SELECT id FROM conversations WHERE {cond})" if cond else ""
    rows = conn.execute(
        "SELECT n.conversation_id, -bm25(notes_fts) FROM notes_fts JOIN notes n "
        f"ON n.id = notes_fts.rowid WHERE notes_fts MATCH ?{where} "
        "ORDER BY bm25(notes_fts), 1 LIMIT ?",
        [match, *params, cap],
    ).fetchall()
    return [(str(conv), float(score)) for conv, score in rows]
