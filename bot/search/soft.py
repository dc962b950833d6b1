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
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bot.ranking import Neighbourhood
from bot.search.query import STOP_WORDS, query_terms

if TYPE_CHECKING:
    from bot.search.fusion import Scored
    from bot.term_vectors import Terms

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
    words = set(_WORD.findall(body(text).lower().replace("\u2019", "'")))
    words -= STOP_WORDS
    return frozenset(w for w in words if len(w) >= 3 and not w.isdigit())


def query_words(query: str, names: dict[str, str]) -> list[str]:
    """The query's content words that soft coverage compares (participant names out)."""
    return [t for t in query_terms(query) if t not in names and is_content_word(t)]


class Source(Protocol):
    """Where :func:`attach` reads from (:class:`bot.term_vectors.TermCache` with the
    reader connection bound)."""

    def turn_words(self, turn_id: int, text: str) -> frozenset[str]: ...

    def vectors(self, words: set[str]) -> Terms: ...


def attach(scored: Scored, source: Source, depth: int) -> None:
    """Read the term vectors the features of ``scored``'s best ``depth`` turns need (their
    words, their +-1 neighbours', the query's) into ``scored.terms``."""
    rows = scored.rows
    hood = Neighbourhood(rows.codes, np.asarray(rows.number, dtype=np.int64))
    idx = scored.order[:depth]
    needed = set(idx.tolist())
    for offset in (-1, 1):
        src_of = _neighbours(hood, offset, len(rows.ids))
        needed.update(int(s) for s in src_of[idx] if s >= 0)
    ids, content = rows.ids, rows.content
    words = {i: source.turn_words(ids[i], content[i]) for i in needed}
    wanted = set(query_words(scored.query, scored.names)).union(*words.values())
    scored.words = words
    scored.terms = source.vectors(wanted)


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
    need = sorted(
        set(own_rows) | {int(r) for r in prev if r >= 0} | {int(r) for r in after if r >= 0}
    )
    at = {r: j for j, r in enumerate(need)}
    best = _best_matches(need, words, terms, query)
    own = best[[at[r] for r in own_rows]]

    def of(neighbour: np.ndarray) -> np.ndarray:
        found = neighbour >= 0
        out = np.zeros((k, len(query)))
        out[found] = best[[at[int(r)] for r in neighbour[found]]]
        return out

    before, nxt = of(prev), of(after)
    win = np.maximum(own, np.maximum(before, nxt))
    df = (own >= _STRONG).sum(axis=0)
    idf = np.log((k + 1) / (df + 0.5))
    idf = idf / (idf.sum() or 1.0)
    # a query word the turn contains literally (the same 5-letter stem, as ``coverage``)
    stems: dict[str, list[int]] = {}
    for q, w in enumerate(query):
        stems.setdefault(w[:5], []).append(q)
    literal = np.zeros((k, len(query)), dtype=bool)
    for j, r in enumerate(own_rows):
        for w in words.get(r, ()):
            hit = stems.get(w[:5])
            if hit is not None:
                literal[j, hit] = True
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
    _, group = np.unique(rows.codes[idx], return_inverse=True)
    conv = np.full((int(group.max()) + 1, len(query)), -np.inf)
    np.maximum.at(conv, group, win)
    out[:, put["conv_soft"]] = conv[group].mean(axis=1)
    return out


def _best_matches(
    need: list[int], words: dict[int, frozenset[str]], terms: Terms, query: list[str]
) -> np.ndarray:
    """(len(need), len(query)): each query word's largest cosine with a word of each row
    (0 for a row without a word that has a vector). One product over the ranking's words
    (``einsum``: BLAS's threads spin next to onnxruntime's, see
    :func:`bot.ranking.matvec`), then a segmented max."""
    get = terms.index.get
    seg_row: list[int] = []
    seg_col: list[int] = []
    for j, r in enumerate(need):
        cols = [c for c in map(get, words.get(r, ())) if c is not None]
        seg_col += cols
        seg_row += [j] * len(cols)
    best = np.zeros((len(need), len(query)))
    if not seg_col:
        return best
    qv = terms.matrix[[terms.index[w] for w in query]]
    sims = np.einsum("wd,qd->wq", terms.matrix, qv)[seg_col]
    row = np.asarray(seg_row)
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    best[row[starts]] = np.maximum.reduceat(sims, starts, axis=0)
    return best
