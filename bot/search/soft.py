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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bot.fts_text import has_spaceless, normalise, run_phrases, split_runs
from bot.ranking import Neighbourhood
from bot.search.query import STOP_WORDS, query_terms
from bot.search.turn_words import ASCII_WORD, ascii_body_words, body

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

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
# on ASCII text: ``turn_words.ASCII_WORD``, 2.6x faster (tokenising the ~180 candidate
# turns is most of soft coverage's cost)

STEM = 5  # letters of the crude stem the literal coverage compares (features.stem)


def is_content_word(word: str) -> bool:
    """3+ characters, not a stop word, not a number; or a piece of a script written
    without spaces (:func:`pieces`: one or two characters that each carry meaning)."""
    if len(word) < 3:
        return bool(word) and has_spaceless(word)
    return word not in STOP_WORDS and not word.isdigit()


def pieces(word: str) -> list[str]:
    """``word`` as soft coverage compares it: itself, or when it holds a run of a script
    written without spaces (Chinese, Japanese, Thai, Hangul), the run's overlapping
    character pairs (NFKC) and the word's other letters.

    As the keyword side reads such runs (:func:`bot.fts_text.run_phrases`, docs/search.md
    "Languages written without spaces"): a Han run is a whole clause, so "东京塔" asked
    against "我们去了东京塔" compared two different "words" and matched neither letter
    for letter nor by meaning; their pairs ("东京", "京塔") match both ways."""
    if not has_spaceless(word):
        return [word]
    runs, rest = split_runs(normalise(word))
    out = _WORD.findall(rest)
    for run in runs:
        out.extend(phrase.replace(" ", "") for phrase in run_phrases(run))
    return out


def tokens(text: str) -> list[str]:
    """Every lower-cased word of a turn (its sender label left out), repeats kept; a
    run of a script written without spaces as its character pairs (:func:`pieces`)."""
    low = body(text).lower().replace("\u2019", "'")
    if low.isascii():
        return ASCII_WORD.findall(low)
    words = _WORD.findall(low)
    if not has_spaceless(low):
        return words
    return [piece for word in words for piece in pieces(word)]


def turn_tokens(text: str) -> list[str]:
    """:func:`tokens` of a ranked turn: an ASCII text's words are read once per ranking
    with the learned features' (:mod:`bot.search.turn_words`)."""
    return ascii_body_words(text) if text.isascii() else tokens(text)


def content_words(text: str) -> frozenset[str]:
    """The distinct lower-cased content words of a turn (its sender label left out)."""
    return frozenset(w for w in tokens(text) if is_content_word(w))


def query_words(query: str, names: dict[str, str]) -> list[str]:
    """The query's content words that soft coverage compares (participant names out)."""
    words = [p for t in query_terms(query) if t not in names for p in pieces(t)]
    return [w for w in dict.fromkeys(words) if is_content_word(w)]


class Source(Protocol):
    """Where :func:`attach` reads from (:class:`bot.term_vectors.Bound`: the term cache
    with the reader connection)."""

    def turns(self, turn_ids: list[int], texts: list[str]) -> list[np.ndarray]:
        """Each turn's content word ids (int32, repeats allowed)."""
        ...

    def ids(self, words: list[str]) -> np.ndarray:
        """The ids of ``words``."""
        ...

    def stems(self, ids: np.ndarray) -> np.ndarray:
        """The id of each word's :data:`STEM`-letter stem."""
        ...

    def vectors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each id's row of the matrix, -1: no vector; the float32 matrix)."""
        ...


@dataclass(frozen=True)
class Matches:
    """What the features read (:func:`attach`): for every row it covers, each query
    word's best match and whether the row holds the query word's stem literally."""

    rows: np.ndarray  # the covered rows of ``Scored.rows``, ascending
    best: np.ndarray  # (len(rows), len(query)) float64: largest cosine, 0 without words
    literal: np.ndarray  # (len(rows), len(query)) bool
    query: tuple[str, ...]  # the query's words that have a vector

    def __contains__(self, word: object) -> bool:
        return word in self.query

    def of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``best`` and ``literal`` of ``rows`` (-1 or not covered: zeros, False)."""
        at = np.searchsorted(self.rows, rows)
        at[at >= len(self.rows)] = 0
        found = (rows >= 0) & (self.rows[at] == rows) if len(self.rows) else rows < -1
        best = np.zeros((len(rows), len(self.query)))
        literal = np.zeros((len(rows), len(self.query)), bool)
        best[found] = self.best[at[found]]
        literal[found] = self.literal[at[found]]
        return best, literal


def attach(scored: Scored, source: Source, depth: int) -> None:
    """Match the query's words with the words of ``scored``'s best ``depth`` turns and
    their +-1 neighbours (:class:`Matches`, into ``scored.terms``)."""
    rows = scored.rows
    n = len(rows.ids)
    hood = rows.hood()
    idx = scored.order[:depth]
    near = [_neighbours(hood, offset, n)[idx] for offset in (-1, 1)]
    covered = np.unique(np.concatenate([idx, *near]))
    covered = covered[covered >= 0]
    ids, content = rows.ids, rows.content
    pick = covered.tolist()
    parts = source.turns([ids[i] for i in pick], [content[i] for i in pick])
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    flat = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    words = query_words(scored.query, scored.names)
    qids = source.ids(words)
    cols, matrix = source.vectors(np.concatenate([flat, qids]))
    qcol = cols[len(flat) :]
    has = qcol >= 0
    query = tuple(w for w, ok in zip(words, has.tolist(), strict=True) if ok)
    qv = matrix[qcol[has]]
    best = _best_matches(cols[: len(flat)], lengths, matrix, qv)
    # a query word the turn contains literally (the same 5-letter stem, as ``coverage``)
    same = source.stems(flat)[:, None] == source.stems(qids[has])[None, :]
    scored.terms = Matches(covered, best, _segment_any(same, lengths), query)


def _neighbours(hood: Neighbourhood, offset: int, n: int) -> np.ndarray:
    """For every row, the row ``offset`` turn numbers away (-1: not loaded)."""
    out = np.full(n, -1, dtype=np.int64)
    rows, src = hood.shift(offset, 1)
    out[rows] = src
    return out


def _starts(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the segments that hold something, where each starts in the flat array)."""
    nonempty = np.flatnonzero(lengths)
    return nonempty, (np.cumsum(lengths) - lengths)[nonempty]


def _segment_any(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(len(lengths), columns) bool: any value of each segment of ``values``' rows."""
    out = np.zeros((len(lengths), values.shape[1]), bool)
    segs, starts = _starts(lengths)
    if len(segs) and values.shape[1]:
        out[segs] = np.logical_or.reduceat(values, starts, axis=0)
    return out


def _best_matches(
    cols: np.ndarray, lengths: np.ndarray, matrix: np.ndarray, qv: np.ndarray
) -> np.ndarray:
    """(len(lengths), len(qv)): each query word's largest cosine with a word of each
    segment of ``cols`` (rows of ``matrix``; -1: no vector), 0 for a segment without a
    word that has a vector. One product over the ranking's distinct words (``einsum``:
    BLAS's threads spin next to onnxruntime's, see :func:`bot.ranking.matvec`), then a
    segmented max."""
    best = np.zeros((len(lengths), len(qv)))
    keep = cols >= 0
    if not keep.any() or not len(qv):
        return best
    sims = np.einsum("wd,qd->wq", matrix, qv)[cols[keep]]
    owner = np.repeat(np.arange(len(lengths)), lengths)[keep]
    segs, starts = _starts(np.bincount(owner, minlength=len(lengths)))
    best[segs] = np.maximum.reduceat(sims, starts, axis=0)
    return best


def features(scored: Scored, idx: np.ndarray) -> np.ndarray:
    """(len(idx), len(SOFT_FEATURES)): zeros when ``scored.terms`` is None."""
    k = len(idx)
    out = np.zeros((k, len(SOFT_FEATURES)), np.float32)
    terms = scored.terms
    if terms is None or k == 0 or not terms.query:
        return out
    rows = scored.rows
    hood = rows.hood()
    own, literal = terms.of(idx)
    before, _ = terms.of(_neighbours(hood, -1, len(rows.ids))[idx])
    nxt, _ = terms.of(_neighbours(hood, 1, len(rows.ids))[idx])
    win = np.maximum(own, np.maximum(before, nxt))
    df = (own >= _STRONG).sum(axis=0)
    idf = np.log((k + 1) / (df + 0.5))
    idf = idf / (idf.sum() or 1.0)
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
    conv = np.full((int(group.max()) + 1, len(terms.query)), -np.inf)
    np.maximum.at(conv, group, win)
    out[:, put["conv_soft"]] = conv[group].mean(axis=1)
    return out
