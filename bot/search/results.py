"""What a search returns: results, pages, filters, cursors and the full ranking."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from bot.graphemes import shorten

# A result's notes as the doors return them (/api/search, `my-agent search --json`):
# notes are 100-200 words, but offline notes written before session 40 held a pasted
# blob whole (1 MB), in every hit of every search it came up in.
RESULT_NOTES_CHARS = 4000


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
    # this conversation's own :attr:`SearchPage.match`: the page's is "words" when any
    # turn shares a word, the message being answered included (stored before its reply)
    match: str = "words"
    # its title (one the owner gave, or counted by config: bot.search.titles) holds a
    # word of the query
    in_title: bool = False

    def found_in(self) -> str:
        """Where the query was found, for a line of results: its matched turns ("turns
        3-7"), else its title, else its notes (found by them alone: no turn to name)."""
        return self.turn_range or ("its title" if self.in_title else "its notes")

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "title": self.title,
            "channel": self.channel,
            "abbreviation": (
                shorten(self.abbreviation, RESULT_NOTES_CHARS)
                if self.abbreviation is not None
                else None
            ),
            "matched_turns": list(self.matched_turns),
            "timestamp": self.timestamp,
            "score": round(self.score, 6),
            "topics": list(self.topics),
            "snippet": self.snippet,
            "turn_range": self.turn_range,
            # "words", "date", "meaning" or "loose", as the page's (SearchPage.match) for
            # this conversation alone: on a page that matched words, a "loose" one is listed
            # after the matches without sharing a word or coming close in meaning
            "match": self.match,
            "in_title": self.in_title,
        }


# How the doors (/search, `my-agent search`) say a page's ``vectors_incomplete``: while
# this process rebuilds them (a new model, a reindex, turns added while keyword-only),
# else (a stopped daemon's store searched from the shell, embeddings that failed and wait
# for the retry) what is true of them. "being rebuilt for a new model" was said by
# `my-agent search` with the daemon stopped and every vector made.
REBUILDING = "search by meaning is being rebuilt"
VECTORS_MISSING = "search by meaning is incomplete: some conversations have no vectors yet"


@dataclass(frozen=True)
class SearchPage:
    """A page of results; ``next_cursor`` continues the same query. ``total`` counts the
    conversations found; with ``total_exact`` False it is a lower bound: the query's words
    match more turns than the ranking read, and the pages after the ranked ones list the
    rest (:mod:`bot.search.tail`). ``no_words``: the query had nothing to look for.

    ``loose``: how many of ``total`` are only loosely related to the query (their own
    ``match`` "loose", listed after the matches as the nearest): the doors count the
    matches apart from them (:func:`bot.search.doors.count_line`).

    A query with no word ("?!", "🔥🚀") is not searched: the model reads it as its
    unknown token, so its "nearest" turns were any, listed as a perfect match (score 1).
    """

    results: list[SearchResult]
    next_cursor: str | None
    total: int
    method: str
    total_exact: bool = True
    # of ``total``, the conversations only loosely related (each result's ``match``
    # "loose"): "5 of 57 shown" counted them, read as 57 conversations on the subject
    loose: int = 0
    # the query held no word to look for (only punctuation, symbols or emoji): nothing
    # was searched, and each door says so instead of "no match"
    no_words: bool = False
    # how the results relate to the query (:func:`closeness`): "words" (a turn shares a
    # word with it), "date" (none does; some were said on a date the query names),
    # "meaning" (none does; the nearest are close in meaning) or "loose" (none does and
    # none is close: the nearest are listed, probably unrelated)
    match: str = "words"
    # a hybrid page ranked with part of the vectors: they are being rebuilt (a new
    # embedding model) or some failed to embed, and the conversations without theirs
    # were found by their words only (each door says so: a miss is not "never said")
    vectors_incomplete: bool = False
    # of an incomplete page: this process is rebuilding them (the daemon), not only
    # missing them (:func:`bot.search.doors.vectors_note`)
    vectors_rebuilding: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "results": [r.to_dict() for r in self.results],
            "next_cursor": self.next_cursor,
            "total": self.total,
            "total_exact": self.total_exact,
            "method": self.method,
            "loose": self.loose,
        }
        if self.no_words:
            out["no_words"] = True
        if self.match != "words":
            out["match"] = self.match
        if self.vectors_incomplete:
            out["vectors_incomplete"] = True
        if self.vectors_rebuilding:
            out["vectors_rebuilding"] = True
        return out


# Below this cosine (all-MiniLM-L6-v2) the nearest turn or note of a query that shares no
# word with the store is no subject of it. Measured on the six LoCoMo stores: the 7
# questions (of 955) that share no word with their store have a best cosine of 0.35-0.74,
# while off-topic queries ("xyzzy plugh", "kubernetes cluster upgrade", "tax return
# deadline", "my dentist appointment") reach 0.09-0.33.
LOOSE_COSINE = 0.3


def closeness(method: str, keyword_best: float, cosine_best: float, dated: bool = False) -> str:
    """:attr:`SearchPage.match` of a ranking: "words" when a turn matched the query's
    words, else "date" when a turn was said on a date the query names (``dated``: "what
    did we talk about yesterday?" asks for that day's conversations, whatever their
    words), else "meaning" when the nearest turn or note is at least
    :data:`LOOSE_COSINE` close, else "loose". A keyword-only search finds nothing else
    than words (in turns, titles or notes: ``cosine_best`` is the notes' keyword score
    there) and the named days' conversations. Scores are relative (the best conversation
    scores 1), so without this a query about nothing in the store looked like a perfect
    match."""
    if keyword_best > 0 or (method != "hybrid" and (cosine_best > 0 or not dated)):
        return "words"
    if dated:
        return "date"
    return "meaning" if cosine_best >= LOOSE_COSINE else "loose"


def unrelated_mark(page: SearchPage, result: SearchResult) -> str:
    """What /search and ``my-agent search`` add to a result listed after the matches
    that neither shares a word with the query nor comes close in meaning (its own
    ``match`` "loose" on a page that is not: a page that is says so in its heading).
    Scores are relative to the page's first, so such a result read like a lesser match."""
    if result.match == "loose" and page.match != "loose":
        return " (probably unrelated)"
    return ""


@dataclass(frozen=True)
class Filters:
    """Search filters; dates are ISO dates or timestamps, ``date_to`` inclusive."""

    channel: str | None = None
    date_from: str | None = None
    date_to: str | None = None
    conversation_id: str | None = None

    def sql(self, alias: str = "t", *, prefix_end: bool = True) -> tuple[str, list[Any]]:
        """SQL conditions over ``turns`` rows (``alias``) and their parameters.

        ``prefix_end=False`` leaves out the ``date_to`` condition, for a caller that
        bounds the timestamps by ``date_to + "~"`` instead (the same turns, since a
        timestamp holds no character above "~", and a condition an index can stop at)."""
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
        if self.date_to and prefix_end:
            # A bare date means the whole day: compare on the same prefix length.
            where.append(f"substr({alias}.timestamp, 1, ?) <= ?")
            params.extend([len(self.date_to), self.date_to])
        return (" AND ".join(where) if where else "1"), params

    def conversation_sql(self) -> tuple[str, list[Any]]:
        """SQL conditions over ``conversations`` rows for the same filter: the channel,
        and the span from ``created`` to ``updated`` meeting the dates (a conversation's
        ``updated`` is its latest turn's time)."""
        where: list[str] = []
        params: list[Any] = []
        if self.channel:
            where.append("channel = ?")
            params.append(self.channel)
        if self.conversation_id:
            where.append("id = ?")
            params.append(self.conversation_id)
        if self.date_from:
            where.append("updated >= ?")
            params.append(self.date_from)
        if self.date_to:
            where.append("substr(created, 1, ?) <= ?")
            params.extend([len(self.date_to), self.date_to])
        return (" AND ".join(where) if where else "1"), params

    def notes_sql(self) -> tuple[str, list[Any]]:
        """:meth:`conversation_sql` as the notes and titles are filtered (a conversation's
        last activity in the range too, as :func:`bot.search.pool.accepted` reads the
        dates), or ``("", [])`` without a filter."""
        if not self.active:
            return "", []
        cond, params = self.conversation_sql()
        if self.date_to:
            cond += " AND substr(updated, 1, ?) <= ?"
            params = [*params, len(self.date_to), self.date_to]
        return cond, params

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


class InvalidFilter(ValueError):
    """A filter value that cannot mean anything (e.g. the date ``2026-13-01``)."""


def iso_date(value: str | None, field: str) -> str | None:
    """``value`` if it is an ISO date (``2026-02-14``) or timestamp, None if empty.

    Dates are compared as text with the turns' timestamps, so anything else would not
    raise but silently match nothing (or everything): it is refused with the field's name.
    """
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        if len(value) <= 10:
            date.fromisoformat(value)
        else:
            datetime.fromisoformat(value)  # (a time the owner gives; its zone is theirs)
    except ValueError:
        raise InvalidFilter(f"{field} is not an ISO date like 2026-02-14: {value!r}") from None
    return value


def check_range(
    start: str | None, end: str | None, names: tuple[str, str] = ("date_from", "date_to")
) -> None:
    """Refuse a date range that ends before it starts (it matched nothing, silently),
    naming both bounds by ``names`` (the caller's own parameters). Two times of one day
    are compared as times (``18:00`` to ``09:00`` of a day was let through)."""
    if not (start and end):
        return
    reversed_ = start[:10] > end[:10]
    if not reversed_ and len(start) > 10 and len(end) > 10:
        try:
            # not bot.moments.parse_moment: a time without an offset is in the owner's
            # zone (bot.owner_days.day_bound), comparable with another one only
            first = datetime.fromisoformat(start)
            last = datetime.fromisoformat(end)
            # both with an offset, or both without (the same zone): comparable
            reversed_ = (first.tzinfo is None) == (last.tzinfo is None) and first > last
        except ValueError:
            pass  # iso_date names a value that is no date
    if reversed_:
        raise InvalidFilter(f"{names[0]} {start} is after {names[1]} {end}")


def fingerprint(query: str, filters: Filters) -> bytes:
    """6 bytes naming a query and its filters (a cursor of another search is refused)."""
    return hashlib.sha1(f"{query}\x00{filters.key()}".encode()).digest()[:6]


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


@dataclass(frozen=True)
class Ranking:
    """Every ranked turn and conversation of one query (see :meth:`SearchService.rank`)."""

    turns: list[TurnHit]
    conversations: list[tuple[str, float]]
    method: str
