"""Titles in search: the conversations whose title holds the query's words.

A title is the owner's name for a conversation (a rename: ``/rename``, the dashboard) or
the one the naming gave it (the model's, the offline keywords', an e-mail's subject).
Until migration 12 titles were shown with every result but never searched, so a
conversation renamed "Homelab storage saga" was not found by "homelab" when its turns
said "NAS". The keyword stage's FTS5 query (the same quoted, OR-ed terms) runs over
``titles_fts`` (:mod:`bot.schema_titles`) in the ranking's second hop; each conversation
found gets its title's weight x :func:`share`, the part of the query's words its title
holds, which the conversation list adds (:mod:`bot.search.conversations`), listing a
conversation found by its title alone too. Filters apply as to the notes.

The owner's titles count (``title_rank_weight``, 1.5); the naming's do not by default
(``auto_title_rank_weight``, 0): made from the conversation's own words, they repeat what
its turns already say, and on LoCoMo's sessions named offline they cost session_recall@5
at every weight tried (docs/search.md "Titles").
"""

from __future__ import annotations

from typing import Any

from bot.config.model import SearchConfig
from bot.db import SyncConn
from bot.search.pool import accepted
from bot.search.query import query_terms, singular
from bot.search.results import Filters


def title_candidates(
    conn: SyncConn, match: str, parts: list[str], filters: Filters, cfg: SearchConfig
) -> tuple[dict[str, float], bool]:
    """The best ``cfg.candidates`` conversations whose title matches ``match`` (an FTS5
    query of ``parts``): conversation -> its title's weight x :func:`share` of ``parts``
    (:func:`weights`), filtered as the notes are (:func:`bot.search.pool.accepted`). The
    flag says the match was cut at the limit (before the filter): more titles hold the
    words, and paging past the ranking lists them (:func:`bot.search.tail.keyword_tail`)."""
    manual, auto = weights(cfg)
    if not (manual or auto):
        return {}, False
    where, params = _which(manual, auto)
    if filters.conversation_id:
        where += " AND n.conversation_id = ?"
        params.append(filters.conversation_id)
    rows = _rows(conn, match, where, params, cfg.candidates)
    found = {
        str(conv): (manual if named else auto) * share(str(text), parts)
        for conv, text, named, _ in rows
    }
    if found and (filters.channel or filters.date_from or filters.date_to):
        kept = accepted(conn, dict.fromkeys(found, 0.0), filters)
        found = {conv: value for conv, value in found.items() if conv in kept}
    return found, len(rows) >= cfg.candidates


def title_matches(
    conn: SyncConn, match: str, filters: Filters, cap: int, cfg: SearchConfig
) -> list[tuple[str, float]]:
    """The conversations whose title (of a kind that counts, :func:`weights`) matches
    ``match``: (conversation, -bm25), best first, at most ``cap``, filtered in SQL as
    the tail filters the notes (:func:`bot.search.tail.keyword_tail`)."""
    manual, auto = weights(cfg)
    if not (manual or auto):
        return []
    where, params = _which(manual, auto)
    cond, more = filters.notes_sql()
    if cond:
        where += f" AND n.conversation_id IN (SELECT id FROM conversations WHERE {cond})"
        params += more
    return [(str(c), float(s)) for c, _, _, s in _rows(conn, match, where, params, cap)]


def weights(cfg: SearchConfig) -> tuple[float, float]:
    """The weights of an owner's title (a rename: ``title_rank_weight``) and of one the
    naming gave (``auto_title_rank_weight``; 0 by default: docs/search.md "Titles")."""
    return cfg.title_rank_weight, cfg.auto_title_rank_weight


def _which(manual: float, auto: float) -> tuple[str, list[Any]]:
    """The condition on ``titles`` rows (``n``) that keeps the kinds of title that count."""
    if manual and auto:
        return "", []
    return " AND n.manual = ?", [1 if manual else 0]


def _rows(conn: SyncConn, match: str, where: str, params: list[Any], limit: int) -> list[Any]:
    """(conversation, indexed title, manual, -bm25) of the titles ``match`` finds, best
    first; ``where``: more conditions on ``titles`` (``n``), with their ``params``."""
    return conn.execute(
        "SELECT n.conversation_id, n.text, n.manual, -bm25(titles_fts) FROM titles_fts "
        f"JOIN titles n ON n.id = titles_fts.rowid WHERE titles_fts MATCH ?{where} "
        "ORDER BY bm25(titles_fts), 1 LIMIT ?",
        [match, *params, limit],
    ).fetchall()


def share(title: str, parts: list[str]) -> float:
    """The part of ``parts`` (the query's FTS5 phrases) that ``title`` holds: a part
    counts when a title word begins with it or with its singular ("plan" in "Planning",
    "plans" in "Plan"), or is its singular. A title FTS5 matched by a stem this does not
    see (or a phrase of characters) holds at least one part."""
    if not parts:
        return 0.0
    words = query_terms(title, drop_stop_words=False)
    low = title.lower()
    held = 0
    for part in parts:
        if " " in part:  # a phrase (an identifier's pieces, a run of characters)
            held += part in low
            continue
        root = singular(part)
        held += any(w.startswith(root) or singular(w) == root for w in words)
    return max(held, 1) / len(parts)
