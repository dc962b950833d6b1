"""Soft coverage: the query's words matched to the candidates' words by meaning.

The coverage features of :mod:`bot.search.features` count the query's words that a turn
contains letter for letter (5-letter prefixes). A reply often names the thing asked about
in other words ("instruments" -> "violin", "pets" -> "dog", "camped" -> "hiking"). Here
every content word has its own MiniLM vector (:mod:`bot.term_vectors`), and for each query
word and candidate turn the *best match* is the largest cosine between the query word and
any word of the turn (docs/search.md "Fifth pass"). The features (:data:`SOFT_FEATURES`)
summarise those best matches per candidate.

Only query words with a stored vector take part (a word no turn of the store contains
has none); the query needs no extra embedding. When the store has no complete term
vectors the features are not computed and the ranker uses its model without them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from bot.ranking import Neighbourhood
from bot.search.query import STOP_WORDS, query_terms

if TYPE_CHECKING:
    from bot.search.fusion import Scored

SOFT_FEATURES: tuple[str, ...] = (
    "soft_cov",  # mean over the query's words of their best match in the turn
    "soft_idf",  # the same weighted by rarity among the candidates (matches >= 0.6)
    "soft_win",  # best match in the turn or its +-1 neighbours, mean over the query
    "soft_win_idf",
    "soft_prev",  # best match in the previous turn, mean over the query
    "soft_next",  # best match in the next turn
    "soft_hit5",  # share of the query's words with a match >= 0.5
    "soft_hit6",  # share with a match >= 0.6
    "soft_new5",  # query words matched >= 0.5 whose 5-letter stem the turn lacks (count)
    "soft_new6",  # the same at 0.6
    "soft_max",  # best match of a query word the turn does not contain literally
    "soft_ramp",  # mean over the query of clip((best - 0.3) / 0.7, 0, 1)
    "conv_soft",  # the query's best window matches over the conversation's candidates
)
_STRONG = 0.6  # a match that counts as "the turn has this word" for the idf weights

Lookup = Callable[[Iterable[str]], dict[str, np.ndarray]]
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")


def body(text: str) -> str:
    """The text without a leading "Sender: " label."""
    head, sep, rest = text.partition(": ")
    return rest if sep and len(head) < 40 and " " not in head.strip() else text


def is_content_word(word: str) -> bool:
    """3+ characters, not a stop word, not a number."""
    return len(word) >= 3 and word not in STOP_WORDS and not word.isdigit()


def content_words(text: str) -> frozenset[str]:
    """The distinct lower-cased content words of a turn (its sender label left out)."""
    words = _WORD.findall(body(text).lower().replace("\u2019", "'"))
    return frozenset(w for w in words if is_content_word(w))


def query_words(query: str, names: dict[str, str]) -> list[str]:
    """The query's content words that soft coverage compares (participant names out)."""
    return [t for t in query_terms(query) if t not in names and is_content_word(t)]


def attach(scored: Scored, lookup: Lookup, depth: int) -> None:
    """Read the term vectors the features of ``scored``'s best ``depth`` turns need (their
    words, their +-1 neighbours', the query's) into ``scored.terms``."""
    rows = scored.rows
    hood = Neighbourhood(rows.codes, np.asarray(rows.number, dtype=np.int64))
    idx = scored.order[:depth]
    needed = set(idx.tolist())
    for offset in (-1, 1):
        src_of = _neighbours(hood, offset, len(rows.ids))
        needed.update(int(s) for s in src_of[idx] if s >= 0)
    words: dict[int, frozenset[str]] = {i: content_words(rows.content[i]) for i in needed}
    wanted = set(query_words(scored.query, scored.names))
    for w in words.values():
        wanted |= w
    scored.words = words
    scored.terms = lookup(wanted)


def _neighbours(hood: Neighbourhood, offset: int, n: int) -> np.ndarray:
    """For every row, the row ``offset`` turn numbers away (-1: not loaded)."""
    out = np.full(n, -1, dtype=np.int64)
    rows, src = hood.shift(offset, 1)
    out[rows] = src
    return out


def features(scored: Scored, idx: np.ndarray) -> np.ndarray:
    """(len(idx), len(SOFT_FEATURES)): zeros when ``scored.terms`` is None."""
    k = len(idx)
    out = np.zeros((k, len(SOFT_FEATURES)), np.float32)
    terms = scored.terms
    if terms is None or k == 0:
        return out
    query = [w for w in query_words(scored.query, scored.names) if w in terms]
    if not query:
        return out
    rows = scored.rows
    hood = Neighbourhood(rows.codes, np.asarray(rows.number, dtype=np.int64))
    words = scored.words
    prev = _neighbours(hood, -1, len(rows.ids))[idx]
    after = _neighbours(hood, 1, len(rows.ids))[idx]
    own_rows = idx.tolist()
    every = {i for i in own_rows} | {int(p) for p in prev if p >= 0}
    every |= {int(a) for a in after if a >= 0}
    vocab = sorted({w for i in every for w in words.get(i, ()) if w in terms})
    column = {w: c for c, w in enumerate(vocab)}
    qv = np.stack([terms[w] for w in query])
    sims = qv @ np.stack([terms[w] for w in vocab]).T if vocab else np.zeros((len(query), 0))

    def best(i: int) -> np.ndarray:
        cols = [column[w] for w in words.get(i, ()) if w in column] if i >= 0 else []
        if not cols:
            return np.zeros(len(query))
        return np.asarray(sims[:, cols].max(axis=1))

    own = np.stack([best(i) for i in own_rows])
    before = np.stack([best(int(p)) for p in prev])
    nxt = np.stack([best(int(a)) for a in after])
    win = np.maximum(own, np.maximum(before, nxt))
    df = (own >= _STRONG).sum(axis=0)
    idf = np.log((k + 1) / (df + 0.5))
    idf = idf / (idf.sum() or 1.0)
    stems = [w[:5] for w in query]
    literal = np.asarray(
        [[s in {w[:5] for w in words.get(i, ())} for s in stems] for i in own_rows], dtype=bool
    )
    put = {name: j for j, name in enumerate(SOFT_FEATURES)}
    out[:, put["soft_cov"]] = own.mean(axis=1)
    out[:, put["soft_idf"]] = own @ idf
    out[:, put["soft_win"]] = win.mean(axis=1)
    out[:, put["soft_win_idf"]] = win @ idf
    out[:, put["soft_prev"]] = before.mean(axis=1)
    out[:, put["soft_next"]] = nxt.mean(axis=1)
    out[:, put["soft_hit5"]] = (own >= 0.5).mean(axis=1)
    out[:, put["soft_hit6"]] = (own >= _STRONG).mean(axis=1)
    out[:, put["soft_new5"]] = ((own >= 0.5) & ~literal).sum(axis=1)
    out[:, put["soft_new6"]] = ((own >= _STRONG) & ~literal).sum(axis=1)
    out[:, put["soft_max"]] = np.where(literal, 0.0, own).max(axis=1)
    out[:, put["soft_ramp"]] = np.clip((own - 0.3) / 0.7, 0.0, 1.0).mean(axis=1)
    # per conversation: each query word's best window match among its candidates
    codes = rows.codes[idx]
    conv = np.zeros(k)
    for code in np.unique(codes):
        mask = codes == code
        conv[mask] = win[mask].max(axis=0).mean()
    out[:, put["conv_soft"]] = conv
    return out
