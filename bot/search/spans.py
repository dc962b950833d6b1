"""Which turns around the hits are loaded: turn-number spans of the keyword hits and of
the vector hits (:mod:`bot.search.service` reads them with :func:`bot.search.rows.fetch_spans`).
"""

from __future__ import annotations

from bot.db import SyncConn
from bot.search.rows import turn_positions

Hit = tuple[int, str, int, float]  # keyword hit: (turn id, conversation, turn number, -bm25)
Spans = dict[str, list[tuple[int, int]]]  # conversation -> inclusive turn-number spans


def keyword_spans(keyword: list[Hit], radius: int, expand: int) -> Spans:
    """Turn-number spans around the keyword hits: the best ``expand`` bring +-``radius``
    neighbours (their windows compete too), the rest only themselves."""
    spans: Spans = {}
    for rank, (_, conv, number, _) in enumerate(keyword):
        r = radius if rank < expand else 0
        spans.setdefault(conv, []).append((max(1, number - r), number + r))
    return spans


def vector_spans(
    conn: SyncConn, keyword: list[Hit], knn: dict[int, float], near: int, expand: int
) -> Spans:
    """Spans of the vector hits that are not keyword hits: the best ``expand`` with
    +-``near`` neighbours (for the window centroids), the rest alone."""
    found = {k[0] for k in keyword}
    ordered = sorted(knn, key=lambda t: -knn[t])
    near_ids = {t for t in ordered[:expand] if t not in found}
    spans: Spans = {}
    for turn_id, (conv, number) in turn_positions(
        conn, [t for t in ordered if t not in found]
    ).items():
        r = near if turn_id in near_ids else 0
        spans.setdefault(conv, []).append((max(1, number - r), number + r))
    return spans
