"""The learned ranker: a linear model over :mod:`bot.search.features` re-orders the best
turns of the rules' ranking (docs/search.md "Fourth pass: learned ranking").

The model file (JSON, a few KB; :data:`DEFAULT_MODEL` ships with the package) holds one
model per search method: ``hybrid`` (keyword + vectors + the term vectors' soft coverage),
``hybrid-no-terms`` (:data:`NO_TERMS`: the same without the soft-coverage features, for a
store whose term vectors are not complete yet) and ``keyword`` (no embedding model: every
vector feature is 0, so it was trained on keyword-only rankings). Each model
is feature names, a mean and a scale per feature (standardisation) and one weight per
feature: score = ((x - mean) / scale) . weights. ``my-agent bench ranker`` re-trains it.

Only the order changes: the best ``ranker_depth`` turns are sorted by the model and take
the rules' scores of those ranks in the new order (so scores stay monotonic and in the
rules' range), and conversations are ranked again by their best turn.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bot.config.model import SearchConfig
from bot.search.features import FEATURES, INDEX, turn_features
from bot.search.fusion import Scored
from bot.search.query import identifiers, query_terms

log = logging.getLogger("my_agent.search.learned")

DEFAULT_MODEL = Path(__file__).with_name("ranker.json")
# the hybrid model without the soft-coverage features: for a store whose term vectors are
# missing or incomplete (an index from before them, a rebuild under way)
NO_TERMS = "hybrid-no-terms"


def model_key(scored: Scored) -> str:
    """Which of the file's models ranks ``scored``: ``keyword``, ``hybrid`` (term vectors
    read) or :data:`NO_TERMS`."""
    if scored.method == "hybrid" and scored.terms is None:
        return NO_TERMS
    return scored.method


class ModelError(ValueError):
    """A model file that cannot be used (unknown feature, mismatched lengths)."""


@dataclass(frozen=True)
class LinearRanker:
    """score = ((features[:, columns] - mean) / scale) @ weights."""

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray

    def __post_init__(self) -> None:
        unknown = [f for f in self.features if f not in INDEX]
        if unknown:
            raise ModelError(f"unknown features: {', '.join(unknown)}")
        sizes = {len(self.features), len(self.mean), len(self.scale), len(self.weights)}
        if len(sizes) != 1:
            raise ModelError("features, mean, scale and weights differ in length")
        if not np.all(self.scale > 0):
            raise ModelError("scales must be positive")

    @property
    def columns(self) -> np.ndarray:
        return np.asarray([INDEX[f] for f in self.features], dtype=np.int64)

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """One score per row of a full :data:`FEATURES` matrix (higher ranks first)."""
        x = matrix[:, self.columns].astype(np.float64)
        return np.asarray(((x - self.mean) / self.scale) @ self.weights)

    def to_json(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "mean": [round(float(v), 6) for v in self.mean],
            "scale": [round(float(v), 6) for v in self.scale],
            "weights": [round(float(v), 6) for v in self.weights],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LinearRanker:
        return cls(
            tuple(str(f) for f in data["features"]),
            np.asarray(data["mean"], dtype=np.float64),
            np.asarray(data["scale"], dtype=np.float64),
            np.asarray(data["weights"], dtype=np.float64),
        )


def save_models(path: Path, models: dict[str, LinearRanker], about: dict[str, Any]) -> None:
    """Write ``models`` (by search method) with ``about`` (how they were trained)."""
    body = {
        "version": 1,
        "about": about,
        "models": {method: m.to_json() for method, m in models.items()},
    }
    path.write_text(json.dumps(body, indent=1) + "\n")


@functools.lru_cache(maxsize=4)
def load_models(path: Path) -> dict[str, LinearRanker]:
    """The models of a file, by search method (cached: loaded once per path)."""
    try:
        body = json.loads(path.read_text())
        return {str(k): LinearRanker.from_json(v) for k, v in body["models"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{path}: {exc}") from exc


def model_for(cfg: SearchConfig, method: str) -> LinearRanker | None:
    """The model for ``method`` ("hybrid" / "keyword"), None when the rules rank alone
    (``ranker: rules``, or no usable model: logged once per path)."""
    if cfg.ranker != "learned":
        return None
    path = cfg.ranker_model or DEFAULT_MODEL
    try:
        return load_models(path).get(method)
    except ModelError as exc:
        _warn_once(str(exc))
        return None


@functools.lru_cache(maxsize=16)
def _warn_once(message: str) -> None:
    log.warning("learned ranker unavailable, the rules rank alone: %s", message)


def rerank(scored: Scored, model: LinearRanker, depth: int) -> Scored:
    """``scored`` with its best ``depth`` turns in the model's order."""
    idx = scored.order[:depth]
    if len(idx) < 2:
        return scored
    scores = model.score(turn_features(scored, idx))
    moved = idx[np.argsort(-scores, kind="stable")]
    final = scored.final.copy()
    # the rules' scores of ranks 1..depth, handed out in the new order
    final[moved] = np.sort(scored.final[idx])[::-1]
    order = np.concatenate([moved, scored.order[depth:]])
    # a conversation's best turn changes only if it has a turn among the re-ordered ones
    # (they keep the top ``depth`` scores, every other turn scores lower)
    best: dict[str, float] = {}
    conv = scored.rows.conv
    for i in moved.tolist():
        best.setdefault(conv[i], float(final[i]))
    conversations = [(c, best.get(c, score)) for c, score in scored.conversations]
    conversations.sort(key=lambda r: (-r[1], r[0]))
    return replace(scored, order=order, final=final, conversations=conversations)


def has_identifier(query: str) -> bool:
    """The query holds an identifier-like token (``ERR-4521``, ``v1.2.3``, ``a@b.c``), or
    a code word mixing letters and digits (``QX55821``, ``A380``; not "18th", "10am",
    "90s": a number with a short ending)."""
    terms = query_terms(query)
    if any(_CODE_WORD.search(t) and not _NUMBER_WITH_ENDING.fullmatch(t) for t in terms):
        # an order number or a code written as one word is an identifier too: the model
        # put the conversation's likelier-looking turns above the one that holds it (the
        # result's snippet was a turn without the code)
        return True
    return bool({i.lower() for i in identifiers(query)} - set(terms))


_CODE_WORD = re.compile(r"[^\W\d_]\d|\d[^\W\d_]")  # a letter beside a digit
_NUMBER_WITH_ENDING = re.compile(r"\d+[^\W\d_]{1,3}")


def apply(scored: Scored, cfg: SearchConfig) -> Scored:
    """The learned order when configured and a model fits the ranking's method.

    Queries with an identifier keep the rules' order: the training questions hold none, and
    the rules put the turn with the exact identifier first (its -bm25 dominates), which the
    model, weighing coverage and context, does not guarantee.
    """
    model = model_for(cfg, model_key(scored))
    if model is None or has_identifier(scored.query):
        return scored
    return rerank(scored, model, cfg.ranker_depth)


__all__ = [
    "FEATURES",
    "NO_TERMS",
    "LinearRanker",
    "ModelError",
    "apply",
    "load_models",
    "model_key",
    "rerank",
]
