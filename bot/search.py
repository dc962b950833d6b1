"""Conversation search: the one engine behind ``search_conversations``, ``my-agent search``
and ``/search`` (SPEC.md "Search").

Keyword search runs FTS5 (porter + unicode61) over every turn. User text is never handed
to FTS5 as syntax: :func:`fts_query` extracts words, quotes each one and ORs them, so
``"``, ``*``, ``NEAR``, ``AND``, ``-``, ``:`` or brackets are only ever searched for. FTS5's
``bm25()`` is lower-is-better (negative); we negate it once, in SQL, and every score from
there on is higher-is-better.

This module is the keyword engine and the result shapes; :mod:`bot.vectors` adds the
semantic candidates and :class:`SearchService` fuses both (SPEC.md "Search").
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.config.model import AppConfig
from bot.db import Database, SyncConn

if TYPE_CHECKING:
    from bot.embedding import EmbeddingService

log = logging.getLogger("my_agent.search")

# Words that carry no topic on their own. Dropped from the OR query (they would match
# most turns and only add noise to bm25); kept when the query has nothing else.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't could did didn't do does doesn't
    doing don't down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is isn't it it's its itself just let
    me more most my myself no nor not now of off on once only or other ought our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was
    we were what when where which while who whom why will with would you your yours
    yourself yourselves did does also ever get got go going like make made many much
    one really say said see seen something thing things think thought tell told way well
    yes yeah ok okay kind sort lot lots us
    """.split()
)

_WORD = re.compile(r"\w+(?:['\u2019]\w+)*")
# Identifier-like tokens (ERR-4521, v1.2.3, foo_bar, a@b.c) are also searched as a phrase.
_IDENT = re.compile(r"\w+(?:[-_./:@#]\w+)+")


def query_terms(text: str, *, drop_stop_words: bool = True) -> list[str]:
    """Lower-cased distinct words of ``text`` in order (stop words dropped when possible)."""
    words = [w.lower().replace("\u2019", "'") for w in _WORD.findall(text)]
    seen: dict[str, None] = {}
    for word in words:
        seen.setdefault(word, None)
    terms = list(seen)
    if drop_stop_words:
        kept = [w for w in terms if w not in STOP_WORDS and not (len(w) == 1 and w.isalpha())]
        if kept:
            return kept
    return terms


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression: every word quoted, OR-ed; None if nothing to search.

    Quoting makes each term a string token for FTS5 (so ``AND``/``NEAR``/``*``/``-`` are
    plain words) and a doubled ``"`` is FTS5's escape for a quote inside a string.
    """
    parts: list[str] = []
    for ident in dict.fromkeys(m.group(0).lower() for m in _IDENT.finditer(text)):
        parts.append(ident)
    parts.extend(query_terms(text))
    if not parts:
        return None
    quoted = ['"' + p.replace('"', '""') + '"' for p in dict.fromkeys(parts)]
    return " OR ".join(quoted)


@dataclass(frozen=True)
class SearchResult:
    """One conversation found by a search (seed 000 ``SearchResult`` + tool fields)."""

    conversation_id: str
    title: str | None
    channel: str
    abbreviation: str | None
    matched_turns: list[int]
    timestamp: str
    score: float
    topics: list[str]
    snippet: str
    turn_range: str
    turn_scores: list[tuple[int, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "title": self.title,
            "channel": self.channel,
            "abbreviation": self.abbreviation,
            "matched_turns": list(self.matched_turns),
            "timestamp": self.timestamp,
            "score": round(self.score, 6),
            "topics": list(self.topics),
            "snippet": self.snippet,
            "turn_range": self.turn_range,
        }


@dataclass(frozen=True)
class SearchPage:
    """A page of results; ``next_cursor`` continues the same query, ``total`` counts all."""

    results: list[SearchResult]
    next_cursor: str | None
    total: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "next_cursor": self.next_cursor,
            "total": self.total,
            "method": self.method,
        }


@dataclass(frozen=True)
class Filters:
    """Search filters; dates are ISO dates or timestamps, ``date_to`` inclusive."""

    channel: str | None = None
    date_from: str | None = None
    date_to: str | None = None
    conversation_id: str | None = None

    def sql(self, alias: str = "t") -> tuple[str, list[Any]]:
        """SQL conditions over ``turns`` rows (``alias``) and their parameters."""
        where: list[str] = []
        params: list[Any] = []
        if self.channel:
            where.append("c.channel = ?")
            params.append(self.channel)
        if self.conversation_id:
            where.append(f"{alias}.conversation_id = ?")
            params.append(self.conversation_id)
        if self.date_from:
            where.append(f"{alias}.timestamp >= ?")
            params.append(self.date_from)
        if self.date_to:
            # A bare date means the whole day: compare on the same prefix length.
            where.append(f"substr({alias}.timestamp, 1, ?) <= ?")
            params.extend([len(self.date_to), self.date_to])
        return (" AND ".join(where) if where else "1"), params

    def key(self) -> str:
        return f"{self.channel}|{self.date_from}|{self.date_to}|{self.conversation_id}"


class InvalidCursor(ValueError):
    """The cursor is malformed or belongs to another query."""


def _fingerprint(query: str, filters: Filters) -> str:
    return hashlib.sha1(f"{query}\x00{filters.key()}".encode()).hexdigest()[:12]


def encode_cursor(offset: int, query: str, filters: Filters) -> str:
    raw = json.dumps({"o": offset, "f": _fingerprint(query, filters)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, query: str, filters: Filters) -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        offset = int(data["o"])
        fingerprint = str(data["f"])
    except Exception as exc:
        raise InvalidCursor("malformed search cursor") from exc
    if offset < 0 or fingerprint != _fingerprint(query, filters):
        raise InvalidCursor("this cursor belongs to another search")
    return offset


@dataclass
class TurnHit:
    """One candidate turn with its component scores (all higher-is-better)."""

    turn_id: int
    conversation_id: str
    turn_number: int
    keyword: float = 0.0  # -bm25 (raw), 0 when FTS did not return it
    vector: float = 0.0  # cosine similarity, 0 when vectors did not return it
    score: float = 0.0  # fused, normalised


def fts_candidates(
    conn: SyncConn, match: str, filters: Filters, limit: int
) -> list[tuple[int, str, int, float]]:
    """Top ``limit`` turns for ``match``: (turn id, conversation, turn number, -bm25)."""
    where, params = filters.sql("t")
    sql = (
        "SELECT t.id, t.conversation_id, t.turn_number, -bm25(turns_fts) AS s "
        "FROM turns_fts JOIN turns t ON t.id = turns_fts.rowid "
        "JOIN conversations c ON c.id = t.conversation_id "
        f"WHERE turns_fts MATCH ? AND {where} ORDER BY bm25(turns_fts) LIMIT ?"
    )
    rows = conn.execute(sql, [match, *params, limit]).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]


def _snippet(text: str, terms: list[str], width: int = 220) -> str:
    """``width`` characters of ``text`` around the first query term it contains."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lower = flat.lower()
    positions = [p for p in (lower.find(t) for t in terms) if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    start = min(start, len(flat) - width)
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")


class SearchService:
    """Hybrid (keyword + vector) search over conversations, keyword-only without vectors.

    ``db`` is the ``conversations.db`` :class:`~bot.db.Database`. ``vectors`` (a
    :class:`bot.vectors.VectorIndex`) supplies semantic candidates when an embedding model
    is available; without it every search is keyword-only and says so (``method``).
    """

    def __init__(
        self,
        config: AppConfig,
        db: Database,
        embedder: EmbeddingService | None = None,
    ) -> None:
        self.config = config
        self.db = db
        self.embedder = embedder

    async def search(
        self,
        query: str,
        *,
        channel: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        conversation_id: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> SearchPage:
        """Conversations matching ``query``, best first, ``limit`` per page.

        Raises :class:`InvalidCursor` for a cursor from another query.
        """
        filters = Filters(channel, date_from, date_to, conversation_id)
        limit = max(1, min(int(limit), 100))
        offset = decode_cursor(cursor, query, filters) if cursor else 0
        ranked, method = await self._rank(query, filters, need=offset + limit)
        page = ranked[offset : offset + limit]
        results = await self._materialise(page, query)
        more = offset + limit < len(ranked)
        next_cursor = encode_cursor(offset + limit, query, filters) if more else None
        return SearchPage(results, next_cursor, len(ranked), method)

    async def search_turns(
        self, query: str, filters: Filters | None = None, *, depth: int | None = None
    ) -> tuple[list[TurnHit], str]:
        """Every candidate turn with its fused score, best first, and the method used."""
        filters = filters or Filters()
        depth = depth or self.config.search.candidates
        match = fts_query(query)
        keyword: list[tuple[int, str, int, float]] = []
        if match is not None:
            keyword = await self.db.run(
                lambda c: fts_candidates(c, match, filters, depth), write=False
            )
        hits = [TurnHit(tid, conv, num, keyword=s) for tid, conv, num, s in keyword]
        top = max((h.keyword for h in hits), default=0.0)
        for hit in hits:
            # Relative to the best hit of this query: 1.0 for the best, > 0 for any match.
            hit.score = hit.keyword / top if top > 0 else 0.0
        hits.sort(key=lambda h: (-h.score, h.conversation_id, h.turn_number))
        return hits, "keyword"

    async def _rank(
        self, query: str, filters: Filters, *, need: int
    ) -> tuple[list[tuple[str, float, list[tuple[int, float]]]], str]:
        depth = max(self.config.search.candidates, need * 10)
        hits, method = await self.search_turns(query, filters, depth=depth)
        by_conv: dict[str, list[tuple[int, float]]] = {}
        for hit in hits:
            by_conv.setdefault(hit.conversation_id, []).append((hit.turn_number, hit.score))
        ranked = [(conv, turns[0][1], turns) for conv, turns in by_conv.items()]
        ranked.sort(key=lambda r: (-r[1], r[0]))
        return ranked, method

    async def _materialise(
        self, page: list[tuple[str, float, list[tuple[int, float]]]], query: str
    ) -> list[SearchResult]:
        if not page:
            return []
        conv_ids = [conv for conv, _, _ in page]
        best_turns = {conv: turns[0][0] for conv, _, turns in page if turns}

        def _load(conn: SyncConn) -> tuple[dict[str, tuple[Any, ...]], dict[str, str]]:
            marks = ",".join("?" * len(conv_ids))
            meta = {
                str(r[0]): r
                for r in conn.execute(
                    "SELECT id, title, channel, abbreviation, updated, topics "
                    f"FROM conversations WHERE id IN ({marks})",
                    conv_ids,
                )
            }
            texts: dict[str, str] = {}
            for conv, number in best_turns.items():
                row = conn.execute(
                    "SELECT content FROM turns WHERE conversation_id = ? AND turn_number = ?",
                    (conv, number),
                ).fetchone()
                if row:
                    texts[conv] = str(row[0])
            return meta, texts

        meta, texts = await self.db.run(_load, write=False)
        terms = query_terms(query)
        results = []
        for conv, score, turns in page:
            row = meta.get(conv)
            if row is None:  # deleted between ranking and loading
                continue
            shown = turns[:10]
            numbers = sorted(n for n, _ in shown)
            snippet = texts.get(conv) or (row[3] or "")
            turn_range = (
                f"turns {numbers[0]}-{numbers[-1]}"
                if len(numbers) > 1 and numbers[0] != numbers[-1]
                else (f"turn {numbers[0]}" if numbers else "")
            )
            try:
                topics = [str(t) for t in json.loads(row[5] or "[]")]
            except ValueError:
                topics = []
            results.append(
                SearchResult(
                    conversation_id=conv,
                    title=row[1],
                    channel=str(row[2]),
                    abbreviation=row[3],
                    matched_turns=numbers,
                    timestamp=str(row[4]),
                    score=float(score),
                    topics=topics,
                    snippet=_snippet(snippet, terms),
                    turn_range=turn_range,
                    turn_scores=list(turns),
                )
            )
        return results
