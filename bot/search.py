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

import asyncio
import base64
import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.ranking import (
    TIME_WORDS,
    Neighbourhood,
    date_match,
    is_when_question,
    matvec,
    minmax,
    parse_day,
    query_dates,
    rrf,
)

if TYPE_CHECKING:
    from bot.vectors import VectorIndex

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


def fts_parts(text: str) -> list[str]:
    """The distinct phrases :func:`fts_query` ORs: identifiers first, then the words."""
    parts: list[str] = []
    for ident in dict.fromkeys(m.group(0).lower() for m in _IDENT.finditer(text)):
        parts.append(ident)
    parts.extend(query_terms(text))
    return list(dict.fromkeys(parts))


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression: every word quoted, OR-ed; None if nothing to search.

    Quoting makes each term a string token for FTS5 (so ``AND``/``NEAR``/``*``/``-`` are
    plain words) and a doubled ``"`` is FTS5's escape for a quote inside a string.
    """
    parts = fts_parts(text)
    return _or_terms(parts) if parts else None


# Cost bound of the keyword stage. FTS5 computes bm25() for every row that matches the
# OR query before ORDER BY ... LIMIT can cut, so one word found in most turns makes a
# query scan (and score) most of the index: 100-300 ms at 200,000 turns, where the
# selective words alone take a few ms. Such a word also carries almost no bm25 weight
# (its idf is near 0), so it leaves the MATCH when the query has a rarer word. "Frequent"
# = found in more than FREQUENT_FRACTION of the turns AND more than FREQUENT_FLOOR turns:
# small stores (a person's few thousand turns) always run the exact query.
FREQUENT_FRACTION = 0.02
FREQUENT_FLOOR = 2000
_DF_TTL = 600.0  # seconds a cached document frequency is trusted
_CACHED_QUERIES = 64  # query embeddings and rankings kept (LRU)
_PAGE_TTL = 120.0  # seconds a ranking serves the next pages of its cursor


class _DocFreqs:
    """Capped document frequencies of FTS phrases, cached (thread-safe enough: plain
    dict assignments from the one reader thread)."""

    def __init__(self) -> None:
        self._total: tuple[float, int] | None = None
        self._df: dict[str, tuple[float, int, int]] = {}  # phrase -> (time, cap, count)

    def total(self, conn: SyncConn) -> int:
        now = time.monotonic()
        if self._total is None or now - self._total[0] > 60:
            row = conn.execute("SELECT count(*) FROM turns").fetchone()
            self._total = (now, int(row[0]) if row else 0)
        return self._total[1]

    def capped(self, conn: SyncConn, phrase: str, cap: int) -> int:
        """Turns matching ``phrase``, counted up to ``cap + 1`` (a bounded rowid scan)."""
        now = time.monotonic()
        hit = self._df.get(phrase)
        if hit is not None and hit[1] == cap and now - hit[0] < _DF_TTL:
            return hit[2]
        row = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM turns_fts WHERE turns_fts MATCH ? LIMIT ?)",
            (_or_terms([phrase]), cap + 1),
        ).fetchone()
        count = int(row[0]) if row else 0
        if len(self._df) > 50_000:
            self._df.clear()
        self._df[phrase] = (now, cap, count)
        return count

    def selective(self, conn: SyncConn, parts: list[str]) -> list[str]:
        """``parts`` without the frequent ones (all of them if every one is frequent)."""
        if len(parts) < 2:
            return parts
        total = self.total(conn)
        cap = max(FREQUENT_FLOOR, int(FREQUENT_FRACTION * total))
        if total <= cap:
            return parts
        kept = [p for p in parts if self.capped(conn, p, cap) <= cap]
        return kept or parts


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

    @property
    def active(self) -> bool:
        return bool(self.channel or self.date_from or self.date_to or self.conversation_id)

    def key(self) -> str:
        return f"{self.channel}|{self.date_from}|{self.date_to}|{self.conversation_id}"

    def accepts(self, conversation_id: str, channel: str, timestamp: str) -> bool:
        """The same conditions as :meth:`sql`, for rows already loaded."""
        if self.channel and channel != self.channel:
            return False
        if self.conversation_id and conversation_id != self.conversation_id:
            return False
        if self.date_from and timestamp < self.date_from:
            return False
        return not (self.date_to and timestamp[: len(self.date_to)] > self.date_to)


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
    """One ranked turn: component scores (raw, higher is better) and the fused score."""

    turn_id: int
    conversation_id: str
    turn_number: int
    keyword: float = 0.0  # -bm25, 0 when FTS did not return it
    vector: float = 0.0  # combined window cosine, 0 without a vector
    score: float = 0.0  # fused + priors, 0..1 (best turn of the query = 1)
    direct: bool = False  # matched itself (FTS or vector KNN), not only through neighbours


def fts_candidates(
    conn: SyncConn, match: str, filters: Filters, limit: int
) -> list[tuple[int, str, int, float]]:
    """Top ``limit`` turns for ``match``: (turn id, conversation, turn number, -bm25)."""
    if not filters.active:
        # rank inside FTS5 first, then join only the ``limit`` winners (joining before the
        # sort looked up every matching row in ``turns``: twice the cost)
        sql = (
            "SELECT t.id, t.conversation_id, t.turn_number, f.s FROM (SELECT rowid, "
            "-bm25(turns_fts) AS s FROM turns_fts WHERE turns_fts MATCH ? "
            "ORDER BY bm25(turns_fts) LIMIT ?) f JOIN turns t ON t.id = f.rowid ORDER BY f.s DESC"
        )
        rows = conn.execute(sql, [match, limit]).fetchall()
        return [(int(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]
    where, params = filters.sql("t")
    join = " JOIN conversations c ON c.id = t.conversation_id" if filters.channel else ""
    sql = (
        "SELECT t.id, t.conversation_id, t.turn_number, -bm25(turns_fts) AS s "
        f"FROM turns_fts JOIN turns t ON t.id = turns_fts.rowid{join} "
        f"WHERE turns_fts MATCH ? AND {where} ORDER BY bm25(turns_fts) LIMIT ?"
    )
    rows = conn.execute(sql, [match, *params, limit]).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]


@dataclass(frozen=True)
class Ranking:
    """Every ranked turn and conversation of one query (see :meth:`SearchService.rank`)."""

    turns: list[TurnHit]
    conversations: list[tuple[str, float]]
    method: str


@dataclass
class _Rows:
    """The candidate neighbourhood loaded in one hop: turns (+ vectors) in order."""

    ids: list[int]
    conv: list[str]
    number: list[int]
    sender: list[str]
    timestamp: list[str]
    content: list[str]
    channel: list[str]
    matrix: np.ndarray  # (n, dims) float32, zero rows where a turn has no vector yet
    has: np.ndarray  # bool: the row has a vector
    codes: np.ndarray  # int conversation codes (same code = same conversation)


def _load_rows(
    conn: SyncConn,
    ranges: dict[str, list[tuple[int, int]]],
    extra_ids: list[int],
    want_vectors: bool,
    dims: int,
) -> _Rows:
    """Turns in ``ranges`` (per conversation, inclusive) plus ``extra_ids``, with their
    float16 vectors, in (conversation, turn number, id) order: one query per 300 ranges."""
    if extra_ids:
        marks = ",".join("?" * len(extra_ids))
        for conv, number in conn.execute(
            f"SELECT conversation_id, turn_number FROM turns WHERE id IN ({marks})", extra_ids
        ):
            ranges.setdefault(str(conv), []).append((int(number), int(number)))
    values: list[Any] = []
    for conv in sorted(ranges):
        for lo, hi in _merge(ranges[conv]):
            values.extend((conv, lo, hi))
    vector = "v.vector" if want_vectors else "NULL"
    vector_join = " LEFT JOIN turn_vectors v ON v.turn_id = t.id" if want_vectors else ""
    rows: list[Any] = []
    step = 300  # ranges per statement, far below SQLite's host-parameter limit
    for start in range(0, len(values), step * 3):
        chunk = values[start : start + step * 3]
        spec = ",".join(["(?, ?, ?)"] * (len(chunk) // 3))
        rows.extend(
            conn.execute(
                f"WITH r(c, lo, hi) AS (VALUES {spec}) "
                "SELECT t.id, t.conversation_id, t.turn_number, t.sender, t.timestamp, "
                f"t.content, c.channel, {vector} FROM r JOIN turns t ON t.conversation_id = r.c "
                f"AND t.turn_number BETWEEN r.lo AND r.hi{vector_join} "
                "JOIN conversations c ON c.id = t.conversation_id "
                "ORDER BY t.conversation_id, t.turn_number, t.id",
                chunk,
            ).fetchall()
        )
    n = len(rows)
    conv = [r[1] for r in rows]
    if want_vectors and n:
        zero = bytes(2 * dims)
        has = np.fromiter((r[7] is not None for r in rows), bool, n)
        blob = b"".join(r[7] or zero for r in rows)
        matrix = np.frombuffer(blob, dtype=np.float16).reshape(n, dims).astype(np.float32)
    else:
        has = np.zeros(n, dtype=bool)
        matrix = np.zeros((n, dims if want_vectors else 0), dtype=np.float32)
    code_of: dict[str, int] = {}
    codes = np.fromiter((code_of.setdefault(c, len(code_of)) for c in conv), np.int64, n)
    return _Rows(
        ids=[r[0] for r in rows],
        conv=conv,
        number=[r[2] for r in rows],
        sender=[r[3] or "" for r in rows],
        timestamp=[r[4] or "" for r in rows],
        content=[r[5] for r in rows],
        channel=[r[6] for r in rows],
        matrix=matrix,
        has=has,
        codes=codes,
    )


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


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


@dataclass
class _Ranked:
    """A conversation in the ranking: score, ranked turns, best snippet text."""

    conversation_id: str
    score: float
    turns: list[tuple[int, float]]
    text: str
    matched: list[int]


@dataclass
class _Scored:
    """The fused scores of one query; turn lists are built only for what is shown."""

    rows: _Rows
    order: np.ndarray  # indices of kept rows, best first
    final: np.ndarray
    kw_raw: np.ndarray
    vec_raw: np.ndarray
    knn: set[int]
    conversations: list[tuple[str, float]]  # best first
    method: str

    @classmethod
    def empty(cls, method: str) -> _Scored:
        none = np.zeros(0)
        rows = _Rows(
            [],
            [],
            [],
            [],
            [],
            [],
            [],
            np.zeros((0, 0), np.float32),
            np.zeros(0, bool),
            np.zeros(0, np.int64),
        )
        return cls(rows, np.zeros(0, np.int64), none, none, none, set(), [], method)

    def _direct(self, i: int) -> bool:
        return bool(self.kw_raw[i] > 0 or self.rows.ids[i] in self.knn)

    def hits(self) -> list[TurnHit]:
        r = self.rows
        return [
            TurnHit(
                r.ids[i],
                r.conv[i],
                r.number[i],
                float(self.kw_raw[i]),
                float(self.vec_raw[i]),
                float(self.final[i]),
                direct=self._direct(i),
            )
            for i in self.order.tolist()
        ]

    def conversation(self, conv: str, score: float) -> _Ranked:
        r = self.rows
        idx = [i for i in self.order.tolist() if r.conv[i] == conv] if conv in r.conv else []
        return _Ranked(
            conv,
            score,
            [(r.number[i], float(self.final[i])) for i in idx],
            r.content[idx[0]] if idx else "",
            [r.number[i] for i in idx if self._direct(i)],
        )


def _or_terms(terms: list[str]) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _name_terms(terms: list[str], senders: set[str]) -> dict[str, str]:
    """Query terms naming a participant (full sender name or its first word) -> sender."""
    names: dict[str, str] = {}
    for sender in senders:
        low = sender.lower().strip()
        if not low:
            continue
        keys = {low, low.split()[0]}
        for term in terms:
            if term in keys:
                names[term] = sender
    return names


class SearchService:
    """Hybrid (keyword + vector) search over conversations, keyword-only without vectors.

    ``db`` is the ``conversations.db`` :class:`~bot.db.Database`; ``embedder`` the shared
    :class:`~bot.embedding.EmbeddingService`. The service owns the
    :class:`~bot.vectors.VectorIndex` (``self.vectors``) that the lifecycle feeds. When no
    model or no sqlite-vec is available every search is keyword-only and says so
    (``SearchPage.method``).
    """

    def __init__(
        self,
        config: AppConfig,
        db: Database,
        embedder: EmbeddingService | None = None,
        vectors: VectorIndex | None = None,
    ) -> None:
        self.config = config
        self.db = db
        self.embedder = embedder
        if vectors is None and embedder is not None:
            from bot.vectors import VectorIndex

            vectors = VectorIndex(config, db, embedder)
        self.vectors = vectors
        self._opened = False
        self._open_lock = asyncio.Lock()
        self._sender_cache: tuple[float, set[str]] | None = None
        self._freqs = _DocFreqs()
        # per-query work kept for repeats: query embeddings (the same question asked again,
        # by the agent or another page) and rankings (a cursor continues the same ranking)
        self._query_vectors: dict[str, np.ndarray] = {}
        self._pages: dict[str, tuple[float, _Scored]] = {}

    async def start(self) -> bool:
        """Open the vector index (loads the model); True when search is hybrid."""
        async with self._open_lock:
            if not self._opened:
                self._opened = True
                if self.vectors is not None:
                    try:
                        await self.vectors.open()
                    except Exception:
                        log.exception("vector index failed to open; search is keyword-only")
        return self.hybrid

    @property
    def hybrid(self) -> bool:
        return self.vectors is not None and self.vectors.ready

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
        key = _fingerprint(query, filters)
        cached = self._pages.get(key) if cursor else None
        if cached is not None and time.monotonic() - cached[0] < _PAGE_TTL:
            # the next page of a ranking made moments ago: the same order, no re-ranking
            scored = cached[1]
        else:
            scored = await self._score(query, filters)
            self._pages[key] = (time.monotonic(), scored)
            while len(self._pages) > _CACHED_QUERIES:
                self._pages.pop(next(iter(self._pages)))
        ranked = scored.conversations
        page = [scored.conversation(c, score) for c, score in ranked[offset : offset + limit]]
        results = await self._materialise(page, query)
        more = offset + limit < len(ranked)
        next_cursor = encode_cursor(offset + limit, query, filters) if more else None
        return SearchPage(results, next_cursor, len(ranked), scored.method)

    async def rank(self, query: str, filters: Filters | None = None) -> Ranking:
        """The full ranking behind :meth:`search`: every turn and conversation, best first.

        Used by benchmarks and diagnostics (turn-level recall needs the turn order).
        """
        scored = await self._score(query, filters or Filters())
        return Ranking(
            turns=scored.hits(), conversations=scored.conversations, method=scored.method
        )

    async def _query_vector(self, query: str) -> np.ndarray | None:
        if not self._opened:
            await self.start()
        if not self.hybrid or self.embedder is None or not query.strip():
            return None
        key = f"{self.embedder.model_id}\x00{query}"
        vector = self._query_vectors.pop(key, None)
        if vector is None:
            try:
                vector = (await self.embedder.embed([query]))[0]
            except EmbeddingUnavailable:
                return None
        self._query_vectors[key] = vector  # most recently used last
        while len(self._query_vectors) > _CACHED_QUERIES:
            self._query_vectors.pop(next(iter(self._query_vectors)))
        return vector

    async def _senders(self) -> set[str]:
        """Distinct turn senders (participant names), cached for a minute."""
        now = time.monotonic()
        if self._sender_cache is None or now - self._sender_cache[0] > 60:
            rows = await self.db.fetchall("SELECT DISTINCT sender FROM turns")
            self._sender_cache = (now, {str(r[0]) for r in rows if r[0]})
        return self._sender_cache[1]

    async def _score(self, query: str, filters: Filters) -> _Scored:
        cfg = self.config.search
        terms = query_terms(query)
        # Participants named in the query: their turns get a prior, and the names leave
        # the keyword query (they match every "Name:" line and greeting otherwise).
        names = _name_terms(terms, await self._senders())
        rest = [t for t in terms if t not in names]
        parts = fts_parts(query) if not names or not rest else rest
        depth = cfg.candidates
        freqs = self._freqs

        def _fts(conn: SyncConn) -> list[tuple[int, str, int, float]]:
            # one hop: the (cached) frequency check, then the query
            return fts_candidates(conn, _or_terms(freqs.selective(conn, parts)), filters, depth)

        async def _keyword() -> list[tuple[int, str, int, float]]:
            if not parts:
                return []
            return await self.db.run(_fts, write=False)

        async def _vectors() -> tuple[np.ndarray | None, dict[int, float], dict[str, float]]:
            qvec = await self._query_vector(query)
            if qvec is None or self.vectors is None:
                return qvec, {}, {}
            knn = await self.vectors.knn_turns(qvec, depth, conversation_id=filters.conversation_id)
            abbreviations: dict[str, float] = {}
            if cfg.abbreviation_weight > 0:
                abbreviations = await self.vectors.knn_abbreviations(qvec, depth)
            return qvec, knn, abbreviations

        # FTS (database thread) runs while the query is embedded (embedding thread) and the
        # bit prefilter scans (this thread)
        (qvec, knn, abbreviations), keyword = await asyncio.gather(_vectors(), _keyword())
        method = "hybrid" if qvec is not None else "keyword"
        if abbreviations and filters.active:
            abbreviations = await self._filter_conversations(abbreviations, filters)
        if not keyword and not knn and not abbreviations:
            return _Scored.empty(method)
        rows = await self._neighbourhood(
            keyword, knn, cfg.keyword_window, cfg.vector_window, qvec is not None
        )
        return self._fuse(query, filters, rows, keyword, knn, abbreviations, qvec, names)

    async def _filter_conversations(
        self, scores: dict[str, float], filters: Filters
    ) -> dict[str, float]:
        """Keep the conversations that pass ``filters`` (their turns' span for dates)."""
        ids = list(scores)
        marks = ",".join("?" * len(ids))
        rows = await self.db.fetchall(
            f"SELECT id, channel, created, updated FROM conversations WHERE id IN ({marks})", ids
        )
        keep = {
            str(conv)
            for conv, channel, created, updated in rows
            if filters.accepts(str(conv), str(channel), str(updated or ""))
            and not (
                filters.date_to and str(created or "")[: len(filters.date_to)] > filters.date_to
            )
        }
        return {c: v for c, v in scores.items() if c in keep}

    async def _neighbourhood(
        self,
        keyword: list[tuple[int, str, int, float]],
        knn: dict[int, float],
        keyword_radius: int,
        vector_radius: int,
        want_vectors: bool,
    ) -> _Rows:
        """Load the candidates with their windows: keyword hits +-``keyword_radius`` (their
        neighbours compete too), vector hits +-``vector_radius`` (for the centroids)."""
        radius = max(keyword_radius, vector_radius if want_vectors else 0)
        expand = self.config.search.expand
        ranges: dict[str, list[tuple[int, int]]] = {}
        for rank, (_, conv, number, _) in enumerate(keyword):
            # only the best hits bring their windows: the rest are scored with what loaded
            r = radius if rank < expand else 0
            ranges.setdefault(conv, []).append((max(1, number - r), number + r))
        found = {k[0] for k in keyword}
        ordered_knn = sorted(knn, key=lambda t: -knn[t])
        near_ids = [t for t in ordered_knn[:expand] if t not in found]
        extra = [t for t in ordered_knn[expand:] if t not in found]
        dims = self.embedder.dimensions if self.embedder is not None else 0
        near = vector_radius if want_vectors else 0

        def _read(conn: SyncConn) -> _Rows:
            if near_ids:
                marks = ",".join("?" * len(near_ids))
                for conv, number in conn.execute(
                    f"SELECT conversation_id, turn_number FROM turns WHERE id IN ({marks})",
                    near_ids,
                ):
                    ranges.setdefault(str(conv), []).append(
                        (max(1, int(number) - near), int(number) + near)
                    )
            return _load_rows(conn, ranges, extra + ([] if near else near_ids), want_vectors, dims)

        return await self.db.run(_read, write=False)

    def _fuse(
        self,
        query: str,
        filters: Filters,
        rows: _Rows,
        keyword: list[tuple[int, str, int, float]],
        knn: dict[int, float],
        abbreviations: dict[str, float],
        qvec: np.ndarray | None,
        names: dict[str, str],
    ) -> _Scored:
        cfg = self.config.search
        n = len(rows.ids)
        hood = Neighbourhood(rows.codes, np.asarray(rows.number, dtype=np.int64))
        kw_by_id = {k[0]: k[3] for k in keyword}
        kw_raw = np.fromiter((kw_by_id.get(t, 0.0) for t in rows.ids), np.float64, n)
        # -bm25 is > 0 for every match: scale by the best (0 stays "no keyword evidence").
        kw = hood.smoothed(kw_raw, cfg.keyword_window)
        kw = kw / kw.max() if n and kw.max() > 0 else kw
        has = rows.has if qvec is not None else np.zeros(n, dtype=bool)
        vec_raw = np.zeros(n)
        if qvec is not None and has.any():
            q = qvec.astype(np.float32)
            parts = [
                matvec(rows.matrix, q),
                *hood.centroid_cosines(rows.matrix, q, cfg.vector_window),
            ]
            vec_raw = np.where(has, np.mean(parts, axis=0), 0.0)
        method = "hybrid" if qvec is not None else "keyword"
        if method == "hybrid":
            vec = np.zeros(n)
            # min-max over the turns that have a vector (others score 0), but the best one
            # counts fully only from ``vector_full`` up: a weak best match stays weak
            vec[has] = minmax(vec_raw[has], ceiling=cfg.vector_full)
            if cfg.method == "rrf":
                fused = minmax(rrf([kw, vec], cfg.rrf_k))
            else:
                total = cfg.keyword_weight + cfg.vector_weight or 1.0
                fused = (cfg.keyword_weight * kw + cfg.vector_weight * vec) / total
        else:
            fused = kw.copy()
        fused = fused + self._priors(query, rows, names)

        keep = (kw > 0) | has
        if filters.active:
            keep &= np.fromiter(
                (
                    filters.accepts(c, ch, ts)
                    for c, ch, ts in zip(rows.conv, rows.channel, rows.timestamp, strict=True)
                ),
                bool,
                n,
            )
        # conversation prior: its best turn plus its abbreviation's similarity
        codes = rows.codes
        best = np.zeros(int(codes.max()) + 1 if n else 0)
        np.maximum.at(best, codes[keep], fused[keep])
        conv_names = list(dict.fromkeys(rows.conv))
        abbr = {c: v for c, v in abbreviations.items() if filters.conversation_id in (None, c)}
        abbr_norm: dict[str, float] = {}
        if abbr and cfg.abbreviation_weight:
            abbr_norm = dict(
                zip(abbr, minmax(np.asarray(list(abbr.values()))).tolist(), strict=True)
            )
        prior = {c: float(best[i]) for i, c in enumerate(conv_names) if best[i] > 0}
        for c in set(prior) | set(abbr_norm):
            prior[c] = cfg.conversation_weight * (
                prior.get(c, 0.0) + cfg.abbreviation_weight * abbr_norm.get(c, 0.0)
            )
        conv_prior = np.asarray([prior.get(c, 0.0) for c in conv_names])
        final = fused + (conv_prior[codes] if n else 0.0)
        top = (
            max(float(final[keep].max()) if keep.any() else 0.0, max(prior.values(), default=0.0))
            or 1.0
        )
        final = final / top

        order = np.flatnonzero(keep)[np.argsort(-final[keep], kind="stable")]
        best_final = np.full(len(conv_names), -1.0)
        np.maximum.at(best_final, codes[order], final[order])
        conversations = [
            (conv_names[c], float(best_final[c]))
            for c in range(len(conv_names))
            if best_final[c] >= 0
        ]
        # conversations found only through their abbreviation
        seen = {c for c, _ in conversations}
        conversations.extend(
            (c, value / top)
            for c, value in prior.items()
            if c not in seen and abbr_norm.get(c, 0) > 0
        )
        conversations.sort(key=lambda r: (-r[1], r[0]))
        return _Scored(rows, order, final, kw_raw, vec_raw, set(knn), conversations, method)

    def _priors(self, query: str, rows: _Rows, names: dict[str, str]) -> np.ndarray | float:
        """Participant, date and time-word priors (bot.ranking explains each)."""
        cfg = self.config.search
        n = len(rows.ids)
        extra = np.zeros(n)
        if names and len(set(names.values())) == 1 and cfg.participant_weight:
            speaker = next(iter(names.values()))
            extra += cfg.participant_weight * (np.asarray(rows.sender, dtype=object) == speaker)
        dates = query_dates(query)
        if dates and cfg.date_weight:
            extra += cfg.date_weight * np.fromiter(
                (date_match(parse_day(ts), dates) for ts in rows.timestamp), np.float64, n
            )
        if cfg.time_weight and is_when_question(query):
            extra += cfg.time_weight * np.fromiter(
                (bool(TIME_WORDS.search(c)) for c in rows.content), np.float64, n
            )
        return extra

    async def _materialise(self, page: list[_Ranked], query: str) -> list[SearchResult]:
        if not page:
            return []
        conv_ids = [r.conversation_id for r in page]

        def _load(conn: SyncConn) -> dict[str, tuple[Any, ...]]:
            marks = ",".join("?" * len(conv_ids))
            return {
                str(r[0]): r
                for r in conn.execute(
                    "SELECT id, title, channel, abbreviation, updated, topics "
                    f"FROM conversations WHERE id IN ({marks})",
                    conv_ids,
                )
            }

        meta = await self.db.run(_load, write=False)
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
                    timestamp=str(row[4]),
                    score=float(item.score),
                    topics=topics,
                    snippet=_snippet(item.text or str(row[3] or ""), terms),
                    turn_range=turn_range,
                    turn_scores=list(item.turns),
                )
            )
        return results
