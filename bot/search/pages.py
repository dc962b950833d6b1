"""A ranked page as :class:`~bot.search.results.SearchResult` items: the conversations'
rows (title, channel, abbreviation, topics) joined to their ranked turns."""

from __future__ import annotations

import json
from typing import Any

from bot.db import SyncConn
from bot.search.fusion import Ranked, snippet
from bot.search.query import query_terms
from bot.search.results import SearchResult


def search_results(
    page: list[Ranked], query: str, meta: dict[str, tuple[Any, ...]]
) -> list[SearchResult]:
    """The results of ``page``, with each conversation's row from ``meta``
    (:func:`conversation_rows`); a conversation deleted meanwhile is left out."""
    terms = query_terms(query)
    results = []
    for item in page:
        row = meta.get(item.conversation_id)
        if row is None:  # deleted between ranking and loading
            continue
        numbers = sorted(item.matched[:10])
        if len(numbers) > 1:
            turn_range = f"turns {numbers[0]}-{numbers[-1]}"
        else:
            turn_range = f"turn {numbers[0]}" if numbers else ""
        try:
            topics = [str(t) for t in json.loads(row[5] or "[]")]
        except ValueError:
            topics = []
        results.append(
            SearchResult(
                conversation_id=item.conversation_id,
                title=row[1],
                channel=str(row[2]),
                abbreviation=row[3],
                matched_turns=numbers,
                # when the matched words were said (a long conversation's last message
                # may be months later); its last activity when only its notes matched
                timestamp=item.when or str(row[4]),
                score=float(item.score),
                topics=topics,
                snippet=snippet(item.text or str(row[3] or ""), terms),
                turn_range=turn_range,
                turn_scores=list(item.turns),
                match=item.match,
                in_title=item.in_title,
            )
        )
    return results


def conversation_rows(conn: SyncConn, conv_ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """id -> (id, title, channel, abbreviation, updated, topics) of ``conv_ids``."""
    if not conv_ids:
        return {}
    marks = ",".join("?" * len(conv_ids))
    return {
        str(r[0]): r
        for r in conn.execute(
            "SELECT id, title, channel, abbreviation, updated, topics "
            f"FROM conversations WHERE id IN ({marks})",
            conv_ids,
        )
    }
