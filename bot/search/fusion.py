"""Fusion: keyword and vector scores, neighbour windows, priors -> one ranking.

SPEC.md "Search": normalised scores over the union of both candidate lists, weighted (or
RRF) per config, then the participant / date / time-word priors of :mod:`bot.ranking` and
a conversation prior (its best turn plus its abbreviation's similarity).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bot.config.model import SearchConfig
from bot.graphemes import boundary_before
from bot.named_dates import date_match
from bot.ranking import (
    asks,
    has_time_words,
    is_when_question,
    length_prior,
    matvec,
    minmax,
    rrf,
)
from bot.search.results import Filters, TurnHit, closeness
from bot.search.rows import Rows

if TYPE_CHECKING:
    from bot.search.soft import Matches


SNIPPET_TERMS = 32
"""The query terms a snippet looks for, at most: each is a scan of the whole text. Before
session 40 the offline brain passed every distinct word of a pasted 1 MB log (50,000 of
them, 36 s of scanning an older log on the event loop); the first few of a query find
its place as well."""


def snippet(text: str, terms: list[str], width: int = 220) -> str:
    """``width`` characters of ``text`` around the first place it holds one of the query
    ``terms`` (of the first :data:`SNIPPET_TERMS`), that place in the snippet's first half."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lower = flat.lower()
    positions = [p for p in (lower.find(t) for t in terms[:SNIPPET_TERMS]) if p >= 0]
    start = 0
    if positions:
        first = min(positions)
        # Near the end of the text the window is moved back to stay ``width`` wide, but
        # not so far that the match leaves its first half: before session 40 a match at
        # the end of a 1 MB line sat at the snippet's end, and the previews that show
        # only a snippet's start (`my-agent search`: 150 characters, the offline reply:
        # 197) showed none of it.
        start = max(0, min(first - width // 4, len(flat) - width), first - width // 2)
    start = boundary_before(flat, start)
    end = boundary_before(flat, start + width)  # both ends between characters
    piece = flat[start:end]
    return ("…" if start > 0 else "") + piece + ("…" if end < len(flat) else "")


@dataclass
class Ranked:
    """A conversation in the ranking: score, ranked turns, best snippet text."""

    conversation_id: str
    score: float
    turns: list[tuple[int, float]]
    text: str
    matched: list[int]
    when: str = ""  # the best turn's timestamp: when the snippet was said
    # how this conversation relates to the query (:func:`~bot.search.results.closeness`
    # of its own turns and notes): a page's ``match`` is "words" as soon as one turn
    # shares a word, which the message being answered does with itself
    match: str = "words"
    in_title: bool = False  # its title holds a word of the query (bot.search.titles)


@dataclass
class Scored:
    """The fused scores of one query; turn lists are built only for what is shown."""

    rows: Rows
    order: np.ndarray  # indices of kept rows, best first
    final: np.ndarray
    kw_raw: np.ndarray
    vec_raw: np.ndarray
    knn: set[int]
    conversations: list[tuple[str, float]]  # best first
    method: str
    # what the ranking was made of (bot.search.features reads it): per-row arrays, the
    # query and the participants it names
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    query: str = ""
    names: dict[str, str] = field(default_factory=dict)
    # conversation -> cosine of the query and its abbreviation (the conversation list's
    # re-scoring, bot.search.conversations, reads it)
    abbreviations: dict[str, float] = field(default_factory=dict)
    # conversation -> the part of the query's words its title holds (bot.search.titles;
    # the conversation list adds title_rank_weight x it)
    titles: dict[str, float] = field(default_factory=dict)
    # the query's words matched with the best rows' words by meaning, for the
    # soft-coverage features (bot.search.soft.attach); None: no complete term vectors
    terms: Matches | None = None
    # :meth:`_turns_of`'s lookups, made on the first page read
    _order_codes: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _code_of: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _inside: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def best_keyword(self) -> float:
        """The best turn's raw keyword score: 0 when no turn shares a word with the query."""
        return float(self.kw_raw.max()) if self.kw_raw.size else 0.0

    def shares_words(self) -> float:
        """:meth:`best_keyword`, or a title's share of the query's words when no turn
        shares one: 0 when nothing listed holds a word of the query."""
        return self.best_keyword() or max(self.titles.values(), default=0.0)

    def best_cosine(self) -> float:
        """The query's cosine with its nearest turn window or note (0 without vectors)."""
        turns = float(self.vec_raw.max()) if self.vec_raw.size else 0.0
        return max(turns, max(self.abbreviations.values(), default=0.0))

    def inside_dates(self) -> np.ndarray:
        """Per row: whether it was said on a day the query names ("yesterday", "in March
        2025"; :func:`~bot.named_dates.date_match` 1, not the fade around it); all False
        when it names none. Such a turn is found by its date (:func:`closeness`)."""
        if self._inside is None:
            n = len(self.rows.ids)
            dates = self.rows.named_dates(self.query) if n else []
            inside = (date_match(day, dates) >= 1.0 for day in self.rows.days())
            self._inside = np.fromiter(inside, bool, n) if dates else np.zeros(n, dtype=bool)
        return self._inside

    def dated(self) -> bool:
        """Whether a kept turn was said on a day the query names (:meth:`inside_dates`)."""
        return bool(self.inside_dates()[self.order].any()) if self.order.size else False

    @classmethod
    def empty(cls, method: str) -> Scored:
        none = np.zeros(0)
        rows = Rows(
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

    def _turns_of(self, conv: str) -> list[int]:
        """The kept rows of ``conv``, best first (numpy over the conversation codes: a
        page of ten used to scan the whole ranking ten times in Python)."""
        if self._order_codes is None:
            codes = self.rows.codes
            # rows come in (conversation, number, id) order: a conversation's rows are
            # contiguous, so its code is read at the first of them
            starts = np.flatnonzero(np.diff(codes, prepend=-1)) if len(codes) else codes
            self._code_of = {self.rows.conv[i]: int(codes[i]) for i in starts.tolist()}
            self._order_codes = codes[self.order]
        code = self._code_of.get(conv)
        if code is None:
            return []
        return self.order[self._order_codes == code].tolist()

    def conversation(self, conv: str, score: float) -> Ranked:
        r = self.rows
        idx = self._turns_of(conv)
        notes = self.abbreviations.get(conv, 0.0)
        return Ranked(
            conv,
            score,
            [(r.number[i], float(self.final[i])) for i in idx],
            r.content[idx[0]] if idx else "",
            # a user turn and its reply share a number: each number once
            list(dict.fromkeys(r.number[i] for i in idx if self._direct(i))),
            r.timestamp[idx[0]] if idx else "",
            closeness(
                self.method,
                max(float(self.kw_raw[idx].max()) if idx else 0.0, self.titles.get(conv, 0.0)),
                max(float(self.vec_raw[idx].max()) if idx else 0.0, notes),
                bool(self.inside_dates()[idx].any()) if idx else False,
            ),
            conv in self.titles,
        )


def fuse(
    cfg: SearchConfig,
    query: str,
    filters: Filters,
    rows: Rows,
    keyword: list[tuple[int, str, int, float]],
    knn: dict[int, float],
    abbreviations: dict[str, float],
    qvec: np.ndarray | None,
    names: dict[str, str],
) -> Scored:
    n = len(rows.ids)
    hood = rows.hood()
    kw_by_id = {k[0]: k[3] for k in keyword}
    kw_raw = np.fromiter(map(kw_by_id.get, rows.ids, itertools.repeat(0.0)), np.float64, n)
    # -bm25 is > 0 for every match: scale by the best (0 stays "no keyword evidence").
    kw = hood.smoothed(kw_raw, cfg.keyword_window)
    kw = kw / kw.max() if n and kw.max() > 0 else kw
    has = rows.has if qvec is not None else np.zeros(n, dtype=bool)
    vec_raw = np.zeros(n)
    parts: list[np.ndarray] = []
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
        vec = np.zeros(n)
        fused = kw.copy()
    base = fused
    if cfg.answer_weight and n:
        asking = np.fromiter(map(asks, rows.content), bool, n)
        fused = hood.answers_inherit(fused, asking, cfg.answer_weight, rows.speakers())
    inherited = fused
    fused = fused + priors(cfg, query, rows, names)

    keep = (kw > 0) | has
    if qvec is None and knn:  # keyword-only: the first turns of the days the query names
        keep |= np.isin(np.asarray(rows.ids, dtype=np.int64), np.fromiter(knn, np.int64))
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
        values = np.asarray(list(abbr.values()))
        # cosines of the nearest notes: min-max; a keyword-only search's -bm25 of the notes
        # sharing a word (bot.search.keyword.note_candidates): divided by the best, so the
        # weakest of them still counts (min-max made it 0: not listed)
        norm = minmax(values) if method == "hybrid" else values / max(values.max(), 1e-9)
        abbr_norm = dict(zip(abbr, norm.tolist(), strict=True))
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
        (conv_names[c], float(best_final[c])) for c in range(len(conv_names)) if best_final[c] >= 0
    ]
    # conversations found only through their abbreviation
    seen = {c for c, _ in conversations}
    conversations.extend(
        (c, value / top) for c, value in prior.items() if c not in seen and abbr_norm.get(c, 0) > 0
    )
    conversations.sort(key=lambda r: (-r[1], r[0]))
    abbr_rows = np.asarray([abbr_norm.get(c, 0.0) for c in conv_names])[codes] if n else np.zeros(0)
    signals = {
        "kw": kw,
        "vec": vec,
        "base": base,
        "inherited": inherited,
        "conv_prior": conv_prior[codes] if n else np.zeros(0),
        "abbr": abbr_rows,
        "cosines": np.asarray(parts) if parts else np.zeros((0, n)),
    }
    return Scored(
        rows,
        order,
        final,
        kw_raw,
        vec_raw,
        set(knn),
        conversations,
        method,
        signals,
        query,
        names,
        abbr,
    )


def priors(cfg: SearchConfig, query: str, rows: Rows, names: dict[str, str]) -> np.ndarray | float:
    """Participant, date, time-word and length priors (bot.ranking explains each)."""
    n = len(rows.ids)
    extra = np.zeros(n)
    if names and len(set(names.values())) == 1 and cfg.participant_weight:
        speaker = next(iter(names.values()))
        extra += cfg.participant_weight * (np.asarray(rows.sender, dtype=object) == speaker)
    dates = rows.named_dates(query)
    if dates and cfg.date_weight:
        extra += cfg.date_weight * np.fromiter(
            (date_match(day, dates) for day in rows.days()), np.float64, n
        )
    if cfg.time_weight and is_when_question(query):
        extra += cfg.time_weight * np.fromiter(
            (has_time_words(c) for c in rows.content), np.float64, n
        )
    if cfg.length_weight and n:
        extra += cfg.length_weight * length_prior(rows.content, cfg.length_full)
    return extra
