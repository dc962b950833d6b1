"""Titles in search: the conversations whose title holds the query's words.

A title is the owner's name for a conversation (a rename) or the one the naming gave it
(the model's, the offline keywords', an e-mail's subject): the words it is known by. Until
migration 12 titles were shown with every result but never searched, so a conversation
renamed "Homelab storage saga" was not found by "homelab" when its turns said "NAS", and
a conversation *about* a subject ranked no higher for its words than one that said them
once. The keyword stage's FTS5 query (the same quoted, OR-ed terms) runs over
``titles_fts`` (:mod:`bot.schema_titles`) in the ranking's second hop; each conversation
found gets :func:`share`, the part of the query's words its title holds, and the
conversation list adds ``title_rank_weight`` x it (:mod:`bot.search.conversations`),
listing a conversation found by its title alone too. Filters apply as to the notes.
"""

from __future__ import annotations

from typing import Any

from bot.db import SyncConn
from bot.search.pool import accepted
from bot.search.query import query_terms, singular
from bot.search.results import Filters


def title_candidates(
    conn: SyncConn, match: str, parts: list[str], filters: Filters, limit: int
) -> tuple[dict[str, float], bool]:
    """The best ``limit`` conversations whose title matches ``match`` (an FTS5 query of
    ``parts``): conversation -> :func:`share` of ``parts``, filtered as the notes are
    (:func:`bot.search.pool.accepted`). The flag says the match was cut at ``limit``
    (before the filter): more titles hold the words, and paging past the ranking lists
    them (:func:`bot.search.tail.keyword_tail`)."""
    only = " AND n.conversation_id = ?" if filters.conversation_id else ""
    rows = _rows(conn, match, only, [filters.conversation_id] if only else [], limit)
    found = {str(conv): share(str(text), parts) for conv, text, _ in rows}
    if found and (filters.channel or filters.date_from or filters.date_to):
        kept = accepted(conn, dict.fromkeys(found, 0.0), filters)
        found = {conv: value for conv, value in found.items() if conv in kept}
    return found, len(rows) >= limit


def title_matches(
    conn: SyncConn, match: str, filters: Filters, cap: int
) -> list[tuple[str, float]]:
    """The conversations whose title matches ``match``: (conversation, -bm25), best
    first, at most ``cap``, filtered in SQL as the tail filters the notes
    (:func:`bot.search.tail.keyword_tail`)."""
    cond, params = filters.notes_sql()
    where = f" AND n.conversation_id IN (SELECT id FROM conversations WHERE {cond})" if cond else ""
    return [(str(c), float(s)) for c, _, s in _rows(conn, match, where, params, cap)]


def _rows(conn: SyncConn, match: str, where: str, params: list[Any], limit: int) -> list[Any]:
    """(conversation, indexed title, -bm25) of the titles ``match`` finds, best first;
    ``where``: more conditions on ``n.conversation_id``, with their ``params``."""
    return conn.execute(
        "SELECT n.conversation_id, n.text, -bm25(titles_fts) FROM titles_fts JOIN titles n "
        f"ON n.id = titles_fts.rowid WHERE titles_fts MATCH ?{where} "
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
