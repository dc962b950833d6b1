"""The conversation list: best turn, plus query-word coverage and the abbreviation.

Conversations used to be listed by their best turn alone (whose fused score already
holds the conversation prior). A question whose facts are spread over a conversation
("What activities has Melanie done with her family?") has no single turn that matches
all of it; the conversation that holds its words across several turns is the one asked
for. Two additions re-order the conversation list only (the turn ranking is untouched):

- **coverage**: the share of the query's content words (participant names excluded)
  that start a word somewhere in the conversation's candidate turns (the keyword and
  vector hits and the neighbours loaded around them): ``coverage_weight`` x share;
- **abbreviation**: the min-max normalised similarity of the query to the
  conversation's abbreviation, ``abbreviation_rank_weight`` x it (the notes summarise the
  whole conversation, a turn only itself).

Scores are divided by the best one again (the first conversation scores 1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from bot.config.model import SearchConfig
from bot.ranking import minmax
from bot.search.query import query_terms
from bot.search.rows import Rows


def content_terms(query: str, names: dict[str, str]) -> list[str]:
    """The query's words without stop words and participant names."""
    return [t for t in query_terms(query) if t not in names]


def candidate_texts(rows: Rows, order: np.ndarray) -> dict[str, list[str]]:
    """conversation -> the contents of its ranked candidate turns."""
    texts: dict[str, list[str]] = {}
    for i in order.tolist():
        texts.setdefault(rows.conv[i], []).append(rows.content[i])
    return texts


def word_starts(terms: list[str]) -> list[re.Pattern[str]]:
    """One pattern per term, matching it at the start of a word."""
    return [re.compile(r"\b" + re.escape(t)) for t in terms]


def coverage(texts: Iterable[str], patterns: list[re.Pattern[str]]) -> float:
    """Share of the terms (:func:`word_starts`) that begin a word in ``texts``
    ("paint" covers "painting"; "art" does not cover "start")."""
    if not patterns:
        return 0.0
    text = "\n".join(texts).lower()
    return sum(1 for p in patterns if p.search(text)) / len(patterns)


def rank_conversations(
    cfg: SearchConfig,
    terms: list[str],
    texts: dict[str, list[str]],
    conversations: list[tuple[str, float]],
    abbreviations: dict[str, float],
) -> list[tuple[str, float]]:
    """``conversations`` (id, best-turn score) re-scored with coverage and abbreviation
    similarity, best first, the best at 1. ``texts``: each conversation's candidate
    turns; ``terms``: the query's content words without participant names."""
    if not conversations or not (cfg.coverage_weight or cfg.abbreviation_rank_weight):
        return conversations
    abbr: dict[str, float] = {}
    if cfg.abbreviation_rank_weight and abbreviations:
        norm = minmax(np.asarray(list(abbreviations.values()), dtype=np.float64))
        abbr = dict(zip(abbreviations, norm.tolist(), strict=True))
    patterns = word_starts(terms) if cfg.coverage_weight else []
    scored = []
    for conv, score in conversations:
        if patterns and conv in texts:
            score += cfg.coverage_weight * coverage(texts[conv], patterns)
        score += cfg.abbreviation_rank_weight * abbr.get(conv, 0.0)
        scored.append((conv, score))
    top = max(s for _, s in scored) or 1.0
    scored = [(c, s / top) for c, s in scored]
    scored.sort(key=lambda r: (-r[1], r[0]))
    return scored
