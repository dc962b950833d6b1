"""Query analysis and score fusion for :mod:`bot.search` (pure functions, no I/O).

Every rule here is general (no data-set knowledge); docs/search.md says what each one
moved on the LoCoMo development slice.

- keyword scores (``-bm25``, higher is better) are averaged with their windows: a turn
  whose neighbours match the query is probably part of the same exchange;
- vector scores combine the turn window's own cosine with the cosines of the centroids of
  the neighbouring windows (wider context without embedding more text);
- both are min-max normalised over the candidate set, so a keyword-only hit (vector 0) or a
  vector-only hit (keyword 0) still ranks, then fused (weighted sum or RRF);
- the turn after a question inherits a share of the question's fused score (the reply
  holds the fact, the question holds the words);
- priors: turns spoken by a person the query names, turns dated on a day/month/year the
  query names, turns with time words for "when" questions, longer turns (they say more),
  and the conversation's best turn and abbreviation similarity.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from bot.cjk_dates import TIME_WORDS as CJK_TIME_WORDS
from bot.cjk_dates import WHEN as CJK_WHEN
from bot.cjk_dates import has_cjk
from bot.named_dates import MONTH

TIME_WORDS = re.compile(
    rf"\b(yesterday|today|tonight|tomorrow|last|next|ago|week|weekend|month|year|morning|"
    rf"afternoon|evening|night|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    rf"{MONTH}|recently|earlier|since|before|after|\d{{4}})\b",
    re.I,
)
_TOKEN = re.compile(r"\w+")  # maximal runs of word characters: what ``\bword\b`` can match


@functools.lru_cache(maxsize=1 << 16)
def time_word(token: str) -> bool:
    """``token`` (a run of word characters) is one of :data:`TIME_WORDS`' words.

    Every alternative of the pattern is a whole ``\b``-delimited word, so a text has time
    words exactly when one of its ``\\w+`` runs is one (or, in Chinese or Japanese,
    holds one: :data:`bot.cjk_dates.TIME_WORDS`); memoised per word because the
    pattern tries ~60 alternatives at every word start (20 us a turn) and words repeat.
    """
    if TIME_WORDS.fullmatch(token):
        return True
    # Chinese and Japanese: a run is a whole clause, its time words are inside it
    return has_cjk(token) and CJK_TIME_WORDS.search(token) is not None


def has_time_words(text: str) -> bool:
    """``TIME_WORDS.search(text)``, answered per word from :func:`time_word`'s cache."""
    return any(map(time_word, _TOKEN.findall(text.lower())))


_WHEN = re.compile(
    r"^\s*when\b|\b(what|which) (date|day|time|year|month|week)\b|\bhow long ago\b", re.I
)


def asks(text: str) -> bool:
    """The turn ends with a question (a trailing bracketed note, e.g. an attachment's
    description, is ignored). Chinese and Japanese ask with the full-width "？", Arabic
    and Persian with "؟": only "?" counted, no question in those scripts was one."""
    last = text[-1:]
    if last not in _LAST_MARKS and not last.isspace():
        return False  # most turns, without a copy of the text (~700 rows a ranking)
    body = text.rstrip()
    if body.endswith("]"):
        cut = body.rfind("[")
        if cut > 0:
            body = body[:cut].rstrip()
    return body.endswith(_QUESTION_MARKS)


_QUESTION_MARKS = ("?", "\uff1f", "\u061f")  # ASCII, full-width, Arabic
# the last character of an asking turn, unless it is white space: a mark or a note's end
_LAST_MARKS = frozenset((*_QUESTION_MARKS, "]"))


def length_prior(texts: Sequence[str], full: int) -> np.ndarray:
    """0..1 per text: its length over ``full`` characters, capped at 1.

    A turn that says more is likelier to hold the fact a search asks for than a short
    acknowledgement whose neighbours made it match ("Agreed!", "Thanks, you too!").
    """
    lengths = np.fromiter((len(t) for t in texts), np.float64, len(texts))
    return np.minimum(1.0, lengths / max(1, full))


def is_when_question(text: str) -> bool:
    """A "when" question ("when did ...", "what year ...", 什么时候, いつ)."""
    return bool(_WHEN.search(text)) or (has_cjk(text) and CJK_WHEN.search(text) is not None)


def parse_day(timestamp: str | None) -> date | None:
    if not timestamp or len(timestamp) < 10:
        return None
    try:
        return date.fromisoformat(timestamp[:10])
    except ValueError:
        return None


def matvec(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` in float32 without BLAS.

    OpenBLAS runs a large gemv on several threads that spin while waiting; next to
    onnxruntime's own threads on a small machine that made a 1 ms product take 50-100 ms.
    ``einsum`` stays on the calling thread.
    """
    return np.einsum("ij,j->i", matrix, vector.astype(matrix.dtype, copy=False))


def minmax(values: np.ndarray, ceiling: float | None = None) -> np.ndarray:
    """Scale to 0..1 over the candidates (all zeros when they are all equal).

    With ``ceiling``, the top of the scale is at least ``ceiling``: when even the best
    candidate is below it, every candidate scores below 1.
    """
    if values.size == 0:
        return values
    lo, hi = float(values.min()), float(values.max())
    if ceiling is not None and hi < ceiling:
        hi = ceiling
    if hi <= lo:
        return np.zeros_like(values) if hi <= 0 else np.ones_like(values)
    return (values - lo) / (hi - lo)


def rrf(components: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Reciprocal-rank fusion; a candidate absent from a component (score 0) gets nothing."""
    total = np.zeros(len(components[0]) if components else 0)
    for values in components:
        order = np.argsort(-values, kind="stable")
        ranks = np.empty(len(values))
        ranks[order] = np.arange(1, len(values) + 1)
        total += np.where(values > 0, 1.0 / (k + ranks), 0.0)
    return total


@dataclass
class Neighbourhood:
    """Turns around the candidates, in (conversation, turn number) order.

    ``pos`` maps each row to its index inside its conversation's run of consecutive
    turns, so windows are slices of the same arrays.
    """

    conv: np.ndarray  # int codes of conversation ids
    number: np.ndarray  # turn numbers
    # (offset, radius) -> shift(): a ranking asks for the same few shifts ~35 times (the
    # fusion's windows, the learned features, soft coverage), 0.1 ms each over ~700 rows
    _shifts: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def shift(self, offset: int, radius: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows whose neighbour ``offset`` positions away is in their conversation and
        within ``radius`` turn numbers; and those neighbours' indices (read-only arrays,
        shared by every caller)."""
        known = self._shifts.get((offset, radius))
        if known is None:
            self._pair(abs(offset), radius)
            known = self._shifts[(offset, radius)]
        return known

    def _pair(self, gap: int, radius: int) -> None:
        """Both shifts ``+gap`` and ``-gap`` at ``radius``: the rows ``i`` whose row
        ``i + gap`` is a neighbour are the pairs of both (the fusion's keyword windows
        alone ask for twelve shifts; each pair is computed once)."""
        n = len(self.conv)
        if gap == 0 or gap >= n:  # every row its own neighbour; none
            lower = np.flatnonzero(np.full(max(n - gap, 0), gap == 0 and radius >= 0))
        else:
            lower = np.flatnonzero(
                (self.conv[gap:] == self.conv[:-gap])
                & (np.abs(self.number[gap:] - self.number[:-gap]) <= radius)
            )
        upper = lower + gap
        lower.flags.writeable = False
        upper.flags.writeable = False
        self._shifts[(gap, radius)] = (lower, upper)
        self._shifts[(-gap, radius)] = (upper, lower)

    def previous(self, speakers: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Rows whose previous turn is loaded (and, with ``speakers``, by someone else)
        and those previous rows' indices."""
        rows, src = self.shift(-1, 1)
        if speakers is not None:
            other = speakers[src] != speakers[rows]
            rows, src = rows[other], src[other]
        return rows, src

    def window_mean(self, values: np.ndarray, radius: int) -> np.ndarray:
        """Mean of ``values`` over each row's +-radius window inside its conversation."""
        total = values.astype(np.float64).copy()
        count = np.ones(len(values))
        for off in range(1, radius + 1):
            for sign in (-1, 1):
                rows, src = self.shift(sign * off, radius)
                total[rows] += values[src]
                count[rows] += 1
        return total / count

    def smoothed(self, values: np.ndarray, radius: int) -> np.ndarray:
        """Average of the value itself and its +-1..radius window means."""
        if radius <= 0:
            return values.astype(np.float64)
        parts = [values.astype(np.float64)]
        parts.extend(self.window_mean(values, r) for r in range(1, radius + 1))
        return np.mean(parts, axis=0)

    def answers_inherit(
        self,
        values: np.ndarray,
        asking: np.ndarray,
        share: float,
        speakers: np.ndarray | None = None,
    ) -> np.ndarray:
        """``values`` where the turn right after an asking turn (``asking`` True) gets at
        least ``share`` of that turn's value: the answer to a question that matches a
        search is what the search is after, though it seldom repeats the question's words
        ("What genre is it?" -> "A mix of drama and romance!"). With ``speakers`` (a code
        per row), only a turn by someone else answers: the owner's next question does not."""
        out = values.astype(np.float64).copy()
        if share <= 0:
            return out
        rows, src = self.previous(speakers)
        keep = asking[src]
        rows, src = rows[keep], src[keep]
        out[rows] = np.maximum(out[rows], share * values[src])
        return out

    def centroid_cosines(
        self, vectors: np.ndarray, query: np.ndarray, radius: int
    ) -> list[np.ndarray]:
        """Cosine of ``query`` with the centroid of each row's +-1..radius window vectors
        (rows without a vector are zero rows and add nothing)."""
        summed = vectors.copy()
        n = len(vectors)
        out = []
        for r in range(1, radius + 1):
            for offset in (-r, r):
                rows, _ = self.shift(offset, r)
                if not len(rows):
                    continue
                # the neighbour ``offset`` rows away, added in place where it is one:
                # ``summed[rows] += vectors[src]`` made three (n, dims) temporaries
                # (gather, gather, scatter) and cost ~40% more; the same sums
                where = np.zeros(n, dtype=bool)
                where[rows] = True
                mine = summed[:-offset] if offset > 0 else summed[-offset:]
                theirs = vectors[offset:] if offset > 0 else vectors[:offset]
                inside = where[:-offset] if offset > 0 else where[-offset:]
                np.add(mine, theirs, out=mine, where=inside[:, None])
            # np.linalg.norm(summed, axis=1) without its copy through conj(): same bits
            norms = np.sqrt(np.add.reduce(summed * summed, axis=1))
            dots = matvec(summed, query)
            out.append(np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0))
        return out
