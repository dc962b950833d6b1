"""The keyword stage: FTS5 candidates with ``-bm25`` scores, cost-bounded.

FTS5's ``bm25()`` is lower-is-better (negative); it is negated once, in SQL, and every
score from there on is higher-is-better.
"""

from __future__ import annotations

import time

from bot.db import SyncConn
from bot.search.pool import accepted
from bot.search.query import or_terms
from bot.search.results import Filters

# Cost bound of the keyword stage. FTS5 computes bm25() for every row that matches the
# OR query before ORDER BY ... LIMIT can cut, so one word found in most turns makes a
# query scan (and score) most of the index: 100-300 ms at 200,000 turns, where the
# selective words alone take a few ms. Such a word also carries almost no bm25 weight
# (its idf is near 0), so it leaves the MATCH when the query has a rarer word. "Frequent"
# = found in more than FREQUENT_FRACTION of the turns AND more than FREQUENT_FLOOR turns:
# small stores (a person's few thousand turns) always run the exact query.
FREQUENT_FRACTION = 0.02
FREQUENT_FLOOR = 2000
_DF_TTL = 600.0  # seconds a cached document frequency is trusted
_TOTAL_TTL = 60.0  # seconds before the turns added since are counted
_TOTAL_RESCAN = 600.0  # seconds between full counts of the turns


class DocFreqs:
    """Capped document frequencies of FTS phrases, cached (thread-safe enough: plain
    dict assignments from the one reader thread)."""

    def __init__(self) -> None:
        # (checked, last full count, turns counted, highest turn id counted)
        self._total: tuple[float, float, int, int] | None = None
        self._df: dict[str, tuple[float, int, int]] = {}  # phrase -> (time, cap, count)

    def total(self, conn: SyncConn) -> int:
        """Turns in the index: the turns added since are counted once a minute (a rowid
        range), all of them every 10 minutes (a full count: 50 ms at 2,000,000 turns;
        until then deleted turns are still counted)."""
        now = time.monotonic()
        cached = self._total
        if cached is not None and now - cached[0] <= _TOTAL_TTL:
            return cached[2]
        row = conn.execute("SELECT max(id) FROM turns").fetchone()
        top = int(row[0]) if row and row[0] is not None else 0
        if cached is None or now - cached[1] > _TOTAL_RESCAN:
            row = conn.execute("SELECT count(*) FROM turns WHERE id <= ?", (top,)).fetchone()
            self._total = (now, now, int(row[0]) if row else 0, top)
        else:
            row = conn.execute(
                "SELECT count(*) FROM turns WHERE id > ? AND id <= ?", (cached[3], top)
            ).fetchone()
            added = int(row[0]) if row else 0
            self._total = (now, cached[1], cached[2] + added, max(top, cached[3]))
        return self._total[2]

    def capped(self, conn: SyncConn, phrase: str, cap: int) -> int:
        """Turns matching ``phrase``, counted up to ``cap + 1`` (a bounded rowid scan)."""
        now = time.monotonic()
        hit = self._df.get(phrase)
        if hit is not None and hit[1] == cap and now - hit[0] < _DF_TTL:
            return hit[2]
        row = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM turns_fts WHERE turns_fts MATCH ? LIMIT ?)",
            (or_terms([phrase]), cap + 1),
        ).fetchone()
        count = int(row[0]) if row else 0
        if len(self._df) > 50_000:
            self._df.clear()
        self._df[phrase] = (now, cap, count)
        return count

    def selective(self, conn: SyncConn, parts: list[str]) -> list[str]:
        """``parts`` without the frequent ones (all of them if every one is frequent)."""
        if len(parts) < 2:
            return parts
        total = self.total(conn)
        cap = max(FREQUENT_FLOOR, int(FREQUENT_FRACTION * total))
        if total <= cap:
            return parts
        kept = [p for p in parts if self.capped(conn, p, cap) <= cap]
        return kept or parts


def fts_candidates(
    conn: SyncConn, match: str, filters: Filters, limit: int
) -> list[tuple[int, str, int, float]]:
    """Top ``limit`` turns for ``match``: (turn id, conversation, turn number, -bm25)."""
    if not filters.active:
        # rank inside FTS5 first, then join only the ``limit`` winners (joining before the
        # sort looked up every matching row in ``turns``: twice the cost)
        sql = (
            "SELECT t.id, t.conversation_id, t.turn_number, f.s FROM (SELECT rowid, "
            "-bm25(turns_fts) AS s FROM turns_fts WHERE turns_fts MATCH ? "
            "ORDER BY bm25(turns_fts) LIMIT ?) f JOIN turns t ON t.id = f.rowid ORDER BY f.s DESC"
        )
        rows = conn.execute(sql, [match, limit]).fetchall()
        return [(int(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]
    where, params = filters.sql("t")
    join = " JOIN conversations c ON c.id = t.conversation_id" if filters.channel else ""
    sql = (
        "SELECT t.id, t.conversation_id, t.turn_number, -bm25(turns_fts) AS s "
        f"FROM turns_fts JOIN turns t ON t.id = turns_fts.rowid{join} "
        f"WHERE turns_fts MATCH ? AND {where} ORDER BY bm25(turns_fts) LIMIT ?"
    )
    rows = conn.execute(sql, [match, *params, limit]).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]


def note_candidates(
    conn: SyncConn, match: str, filters: Filters, limit: int
) -> tuple[dict[str, float], bool]:
    """Top ``limit`` conversations whose notes match ``match`` (``notes_fts``, migration
    10): conversation -> -bm25. A keyword-only search's stand-in for the notes' vectors;
    filtered like the vector stage's notes (:func:`bot.search.pool.accepted`).

    The flag says the match was cut at ``limit`` (before the filter): more notes hold the
    words, and paging past the ranking lists them (:func:`bot.search.tail.keyword_tail`).
    """
    only = " AND n.conversation_id = ?" if filters.conversation_id else ""
    rows = conn.execute(
        "SELECT n.conversation_id, -bm25(notes_fts) FROM notes_fts JOIN notes n "
        f"ON n.id = notes_fts.rowid WHERE notes_fts MATCH ?{only} "
        "ORDER BY bm25(notes_fts) LIMIT ?",
        [match, *([filters.conversation_id] if only else []), limit],
    ).fetchall()
    hits = {str(r[0]): float(r[1]) for r in rows}
    if hits and (filters.channel or filters.date_from or filters.date_to):
        hits = accepted(conn, hits, filters)
    return hits, len(rows) >= limit
