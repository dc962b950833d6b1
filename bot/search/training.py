"""Training the learned ranker (numpy only): pairwise logistic loss on a linear model.

Each query is a group: the rules' best ``depth`` candidates with their feature rows
(:func:`bot.search.features.turn_features`) and a 0/1 label (the turn is evidence for the
query). For every (evidence, other) pair in a group the model should score the evidence
higher: loss = mean over groups of the mean over their pairs of log(1 + exp(-(s_e - s_o))),
plus ``l2`` / 2 x |w|^2, minimised by full-batch gradient descent on standardised
features. Groups without both kinds of turn add nothing. Deterministic: same data, same
model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bot.search.features import FEATURES, INDEX
from bot.search.learned import LinearRanker
from bot.search.soft import SOFT_FEATURES

# every feature that needs a query vector: 0 in a keyword-only ranking
VECTOR_FEATURES = frozenset(
    {"cos0", "cos1", "cos2", "vec", "vec_rank", "nb1_cos", "nb2_cos", "abbr", "hybrid"}
)


@dataclass
class Group:
    """One query's candidates: features (k, len(FEATURES)) and labels (k,)."""

    features: np.ndarray
    labels: np.ndarray


# the soft-coverage features: 0 without complete term vectors (and in keyword rankings)
TERM_FEATURES = frozenset(SOFT_FEATURES)

# features a model does not use: bm25's scale grows with the store (idf), so weights
# learned on 600-turn stores would not mean the same on a 200,000-turn one
STORE_SCALED = frozenset({"kw_raw"})


def default_features(hybrid: bool, terms: bool | None = None) -> tuple[str, ...]:
    """The columns a model uses: every turn feature but :data:`STORE_SCALED` (the query's
    own columns are constant within a group: a pairwise linear model cannot use them);
    the vector features only when ``hybrid``, the term features only when ``terms``
    (default: as ``hybrid``)."""
    terms = hybrid if terms is None else terms
    return tuple(
        f
        for f in FEATURES
        if not f.startswith("q_")
        and f != "hybrid"
        and f not in STORE_SCALED
        and (hybrid or f not in VECTOR_FEATURES)
        and (terms or f not in TERM_FEATURES)
    )


def fit(
    groups: Sequence[Group],
    features: Sequence[str],
    *,
    l2: float = 1e-3,
    epochs: int = 300,
    rate: float = 1.0,
) -> LinearRanker:
    """A :class:`LinearRanker` over ``features`` fitted to ``groups``."""
    cols = np.asarray([INDEX[f] for f in features], dtype=np.int64)
    stacked = np.concatenate([g.features[:, cols] for g in groups]).astype(np.float64)
    if len(stacked) == 0:
        raise ValueError("no training rows")
    mean = stacked.mean(axis=0)
    scale = stacked.std(axis=0)
    scale[scale < 1e-6] = 1.0  # a constant column: weight stays 0
    diffs, weights = [], []
    for g in groups:
        x = (g.features[:, cols] - mean) / scale
        pos, neg = x[g.labels > 0], x[g.labels <= 0]
        if len(pos) == 0 or len(neg) == 0:
            continue
        pairs = (pos[:, None, :] - neg[None, :, :]).reshape(-1, len(cols))
        diffs.append(pairs.astype(np.float32))
        weights.append(np.full(len(pairs), 1.0 / len(pairs), dtype=np.float32))
    w = np.zeros(len(cols))
    if diffs:
        a = np.concatenate(diffs)
        pw = np.concatenate(weights).astype(np.float64)
        pw /= pw.sum()
        for _ in range(epochs):
            z = np.clip(a @ w, -30, 30)
            grad = -((pw / (1.0 + np.exp(z))) @ a) + l2 * w
            w -= rate * grad
    return LinearRanker(tuple(features), mean, scale, w)


def importance(model: LinearRanker) -> list[tuple[str, float]]:
    """Features by the size of their standardised weight, largest first."""
    pairs = [(f, float(w)) for f, w in zip(model.features, model.weights, strict=True)]
    return sorted(pairs, key=lambda p: -abs(p[1]))
