"""Second keyword pass over the turns of the one person a query names.

"What activities does Melanie partake in?" drops the name from the keyword query (it
would match every "Melanie:" line) and puts a prior on her turns, but the global top
``candidates`` FTS hits are shared by every speaker: the named person's turns that only
match the rarer words rank below the cut and never reach the fusion. This pass runs the
same MATCH restricted to that sender and merges its best hits into the keyword
candidates. The scores come from the same FTS query (same idf), so they mix with the
global hits without rescaling.
"""

from __future__ import annotations

from bot.db import SyncConn
from bot.search.results import Filters

Hit = tuple[int, str, int, float]  # (turn id, conversation, turn number, -bm25)


def sender_candidates(
    conn: SyncConn, match: str, filters: Filters, sender: str, limit: int
) -> list[Hit]:
    """Top ``limit`` turns of ``sender`` for ``match``: (turn id, conversation, number, -bm25)."""
    if limit <= 0:
        return []
    where, params = filters.sql("t")
    join = " JOIN conversations c ON c.id = t.conversation_id" if filters.channel else ""
    sql = (
        "SELECT t.id, t.conversation_id, t.turn_number, -bm25(turns_fts) AS s "
        f"FROM turns_fts JOIN turns t ON t.id = turns_fts.rowid{join} "
        f"WHERE turns_fts MATCH ? AND t.sender = ? AND {where} "
        "ORDER BY bm25(turns_fts) LIMIT ?"
    )
    rows = conn.execute(sql, [match, sender, *params, limit]).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]


def merge_hits(hits: list[Hit], extra: list[Hit]) -> list[Hit]:
    """``hits`` followed by the ``extra`` hits they do not hold, best score first (a
    stable sort: ties keep FTS5's order, the global hits before the extra ones)."""
    if not extra:
        return hits
    seen = {h[0] for h in hits}
    merged = hits + [h for h in extra if h[0] not in seen]
    return sorted(merged, key=lambda h: -h[3])
