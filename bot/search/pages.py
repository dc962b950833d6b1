"""A ranked page as :class:`~bot.search.results.SearchResult` items: the conversations'
rows (title, channel, abbreviation, topics) joined to their ranked turns."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from bot.db import SyncConn
from bot.search.fusion import Ranked, Scored, snippet
from bot.search.query import query_terms
from bot.search.results import SearchResult, closeness


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


def loose_count(scored: Scored) -> int:
    """How many of the ranked conversations are only loosely related to the query: the
    ``match`` each would get as a result (:meth:`Scored.conversation`) is "loose", none
    of its turns or its title sharing a word, none said on a date the query names and
    none of its windows or notes coming close in meaning. ``total`` counts them too (the
    vector stage lists the nearest whatever they are), and "5 of 57 shown" read as 57
    conversations on the subject.
    Counted over the kept rows in numpy, per conversation code (not a result built for
    each of them)."""
    if scored.method != "hybrid" or not scored.conversations:
        return 0
    rows, kept = scored.rows, scored.order
    size = int(rows.codes.max()) + 1 if len(rows.codes) else 0
    words, near, dated = np.zeros(size), np.zeros(size), np.zeros(size)
    codes = rows.codes[kept]
    np.maximum.at(words, codes, scored.kw_raw[kept])
    np.maximum.at(near, codes, scored.vec_raw[kept])
    inside = scored.inside_dates()[kept]
    if inside.any():  # (a query naming no date: nothing to spread, on every search)
        np.maximum.at(dated, codes, inside)
    code_of = {rows.conv[i]: int(rows.codes[i]) for i in kept.tolist()}
    loose = 0
    for conv, _ in scored.conversations:
        code = code_of.get(conv)
        shared = max(float(words[code]) if code is not None else 0.0, scored.titles.get(conv, 0.0))
        close = max(
            float(near[code]) if code is not None else 0.0, scored.abbreviations.get(conv, 0.0)
        )
        on_date = bool(dated[code]) if code is not None else False
        loose += closeness(scored.method, shared, close, on_date) == "loose"
    return loose
