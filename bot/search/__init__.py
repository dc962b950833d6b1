"""Conversation search: the one engine behind ``search_conversations``, ``my-agent search``
and ``/search`` (SPEC.md "Search").

- :mod:`bot.search.query`: user text -> safe FTS5 terms (never FTS syntax);
- :mod:`bot.search.keyword`: FTS5 candidates with ``-bm25`` (higher is better), cost-bounded;
- :mod:`bot.vectors`: the semantic candidates;
- :mod:`bot.search.rows`: the candidates' neighbour windows, loaded in one hop;
- :mod:`bot.search.fusion`: normalised fusion and priors;
- :mod:`bot.search.features`, :mod:`bot.search.learned`: the learned re-ordering of the
  best turns (features of each candidate, a linear model shipped as ``ranker.json``);
- :mod:`bot.search.scoring`: the ranking of one query (the two hops);
- :mod:`bot.search.service`: :class:`SearchService`, pages and cursors.
"""

from bot.search.keyword import FREQUENT_FLOOR, FREQUENT_FRACTION, DocFreqs, fts_candidates
from bot.search.query import STOP_WORDS, fts_parts, fts_query, query_terms
from bot.search.results import (
    Filters,
    InvalidCursor,
    InvalidFilter,
    Ranking,
    SearchPage,
    SearchResult,
    TurnHit,
    iso_date,
)
from bot.search.service import SearchService

__all__ = [
    "FREQUENT_FLOOR",
    "FREQUENT_FRACTION",
    "STOP_WORDS",
    "DocFreqs",
    "Filters",
    "InvalidCursor",
    "InvalidFilter",
    "Ranking",
    "SearchPage",
    "SearchResult",
    "SearchService",
    "TurnHit",
    "fts_candidates",
    "fts_parts",
    "fts_query",
    "iso_date",
    "query_terms",
]
