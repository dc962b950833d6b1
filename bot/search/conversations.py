"""The conversation list: best turn, plus query-word coverage and the abbreviation.

Conversations used to be listed by their best turn alone (whose fused score already
holds the conversation prior). A question whose facts are spread over a conversation
("What activities has Anna done with her family?") has no single turn that matches
all of it; the conversation that holds its words across several turns is the one asked
for. Two additions re-order the conversation list only (the turn ranking is untouched):

- **coverage**: the share of the query's content words (participant names excluded)
  that start a word somewhere in the conversation's candidate turns (the keyword and
  vector hits and the neighbours loaded around them): ``coverage_weight`` x share;
- **abbreviation**: the min-max normalised similarity of the query to the
  conversation's abbreviation, ``abbreviation_rank_weight`` x it (the notes summarise the
  whole conversation, a turn only itself).

Two more (docs/search.md "Sixth pass: conversations"), both read from the candidate
turns the ranking already holds:

- **date**: when the query names a date ("in October 2023", "on 9 May, 2022"), the best
  :func:`bot.named_dates.date_match` of the conversation's candidate turns' days,
  ``date_rank_weight`` x it. The turns get the same prior, but a conversation held on
  that date may have no turn that also matches the words well ("What was Dave doing in
  the first weekend of October 2023?"), and the list is where the date says most;
- **participant**: ``participant_rank_weight`` when one of its candidate turns is by a
  person the query names (in a store of many people's conversations, the others'
  conversations that match the words are distractors);
- **perspective** (:mod:`bot.search.perspective`, session 35): ``perspective_rank_weight``
  x the min-max score of its best turn spoken in the first person among the first
  ``perspective_depth`` candidates (someone telling of their own life, not reacting to
  the other's).

And the **title** (:mod:`bot.search.titles`): ``title_rank_weight`` x the part of the
query's words the conversation's title holds, when the owner gave it
(``auto_title_rank_weight`` for the naming's); a conversation found by its title alone
is listed too (the owner renamed it "Homelab storage saga"; its turns say "NAS").

Scores are divided by the best one again (the first conversation scores 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import date
from typing import TYPE_CHECKING

import numpy as np

from bot.config.model import SearchConfig
from bot.named_dates import date_match
from bot.ranking import minmax
from bot.search.perspective import perspective
from bot.search.query import query_terms
from bot.search.rows import Rows

if TYPE_CHECKING:
    from bot.search.fusion import Scored


def content_terms(query: str, names: dict[str, str]) -> list[str]:
    """The query's words without stop words and participant names."""
    return [t for t in query_terms(query) if t not in names]


def candidate_texts(rows: Rows, order: np.ndarray) -> dict[str, list[str]]:
    """conversation -> the contents of its ranked candidate turns."""
    texts: dict[str, list[str]] = {}
    for i in order.tolist():
        texts.setdefault(rows.conv[i], []).append(rows.content[i])
    return texts


def starts_word(text: str, term: str) -> bool:
    """Whether ``term`` begins a word of ``text`` ("paint" in "painting", not "art" in
    "start"). ``str.find`` instead of a regular expression: a ``\\b`` pattern has no
    literal prefix to search for and scanned every character (30 ms for 300
    conversations' candidate turns, against well under 1 ms)."""
    at = text.find(term)
    while at >= 0:
        before = text[at - 1] if at else " "
        if not (before.isalnum() or before == "_"):
            return True
        at = text.find(term, at + 1)
    return False


def coverage(texts: Iterable[str], terms: list[str]) -> float:
    """Share of ``terms`` (lower case) that begin a word in ``texts``."""
    if not terms:
        return 0.0
    text = "\n".join(texts).lower()
    return sum(1 for t in terms if starts_word(text, t)) / len(terms)


def rank_conversations(
    cfg: SearchConfig,
    terms: list[str],
    texts: dict[str, list[str]],
    conversations: list[tuple[str, float]],
    abbreviations: dict[str, float],
    bonus: dict[str, float] | None = None,
    titles: dict[str, float] | None = None,
) -> list[tuple[str, float]]:
    """``conversations`` (id, best-turn score) re-scored with coverage and abbreviation
    similarity (and ``bonus``, added as given: :func:`bonuses`), best first, the best at
    1. ``texts``: each conversation's candidate turns; ``terms``: the query's content
    words without participant names; ``titles``: each title's weight x the part of the
    query's words it holds (:mod:`bot.search.titles`), added as given, a conversation
    found by its title alone listed from 0."""
    if titles:
        listed = {conv for conv, _ in conversations}
        conversations = [*conversations, *((c, 0.0) for c in titles if c not in listed)]
    if not conversations or not (
        cfg.coverage_weight or cfg.abbreviation_rank_weight or bonus or titles
    ):
        return conversations
    bonus = bonus or {}
    titles = titles or {}
    abbr: dict[str, float] = {}
    if cfg.abbreviation_rank_weight and abbreviations:
        norm = minmax(np.asarray(list(abbreviations.values()), dtype=np.float64))
        abbr = dict(zip(abbreviations, norm.tolist(), strict=True))
    scored = []
    for conv, score in conversations:
        if cfg.coverage_weight and terms and conv in texts:
            score += cfg.coverage_weight * coverage(texts[conv], terms)
        score += cfg.abbreviation_rank_weight * abbr.get(conv, 0.0)
        score += bonus.get(conv, 0.0)
        score += titles.get(conv, 0.0)
        scored.append((conv, score))
    top = max(s for _, s in scored) or 1.0
    scored = [(c, s / top) for c, s in scored]
    scored.sort(key=lambda r: (-r[1], r[0]))
    return scored


def bonuses(cfg: SearchConfig, scored: Scored) -> dict[str, float]:
    """conversation -> its date, participant and perspective terms (module docstring),
    from the ranked candidate turns of ``scored``."""
    rows, order = scored.rows, scored.order.tolist()
    out: dict[str, float] = {}
    dates = rows.named_dates(scored.query) if cfg.date_rank_weight else []
    if dates:
        matches: dict[date | None, float] = {}  # day -> match: once a day, not a row
        days = rows.days()
        best: dict[str, float] = {}
        for i in order:
            day = days[i]
            match = matches.get(day)
            if match is None:
                match = matches[day] = date_match(day, dates)
            if match > best.get(rows.conv[i], 0.0):
                best[rows.conv[i]] = match
        for conv, match in best.items():
            out[conv] = out.get(conv, 0.0) + cfg.date_rank_weight * match
    speakers = set(scored.names.values())
    if cfg.participant_rank_weight and speakers:
        seen: set[str] = set()
        for i in order:
            conv = rows.conv[i]
            if conv not in seen and rows.sender[i] in speakers:
                seen.add(conv)
                out[conv] = out.get(conv, 0.0) + cfg.participant_rank_weight
    for conv, value in perspective(cfg, scored).items():
        out[conv] = out.get(conv, 0.0) + value
    return out


def rescore(scored: Scored, cfg: SearchConfig) -> Scored:
    """``scored`` with its conversation list re-scored (:func:`rank_conversations`).

    Runs after the turns' final order is known (the learned ranker re-orders them and
    lists conversations by their best turn again), so that both rules apply together.
    """
    if not (
        cfg.coverage_weight
        or cfg.abbreviation_rank_weight
        or cfg.date_rank_weight
        or cfg.participant_rank_weight
        or cfg.perspective_rank_weight
        or scored.titles
    ):
        return scored
    conversations = rank_conversations(
        cfg,
        content_terms(scored.query, scored.names),
        candidate_texts(scored.rows, scored.order),
        scored.conversations,
        scored.abbreviations,
        bonuses(cfg, scored),
        scored.titles,
    )
    return replace(scored, conversations=conversations)
