"""What ``my-agent bench locomo`` reports: recall, hit and MRR per category, averaged.

Turn level: ranked matched turns, recall@k = |evidence in the top k| / |evidence|, hit@k
and MRR; session level: ranked conversations, relevant = the sessions holding evidence
(``../shared/bench/README.md``, the protocol).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TURN_KS = (5, 10, 25, 50)
SESSION_KS = (5, 10)


class Metrics:
    """Recall@k, hit@k and MRR at turn level, recall@k at session level, per category."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    def add(
        self,
        category: int,
        turns: list[str],
        sessions: list[str],
        evidence: set[str],
        evidence_sessions: set[str],
    ) -> None:
        out: dict[str, float] = {}
        for k in TURN_KS:
            top = set(turns[:k])
            out[f"turn_recall@{k}"] = len(evidence & top) / len(evidence)
            out[f"turn_hit@{k}"] = 1.0 if evidence & top else 0.0
        rank = next((i for i, t in enumerate(turns) if t in evidence), None)
        out["turn_mrr"] = 0.0 if rank is None else 1.0 / (rank + 1)
        for k in SESSION_KS:
            out[f"session_recall@{k}"] = len(evidence_sessions & set(sessions[:k])) / len(
                evidence_sessions
            )
        for name in ("all", CATEGORIES[category]):
            for key, value in out.items():
                self.values[name][key].append(value)

    def summary(self) -> dict[str, Any]:
        def mean(values: list[float]) -> float:
            return round(sum(values) / len(values), 4) if values else 0.0

        overall: dict[str, Any] = {k: mean(v) for k, v in self.values["all"].items()}
        overall["queries"] = len(self.values["all"].get("turn_mrr", []))
        overall["per_category"] = {
            name: {
                **{k: mean(v) for k, v in self.values[name].items()},
                "queries": len(self.values[name].get("turn_mrr", [])),
            }
            for name in CATEGORIES.values()
            if name in self.values
        }
        return overall


def sessions_in_order(turn_keys: list[str]) -> list[str]:
    return list(dict.fromkeys(k.rsplit(":", 1)[0] for k in turn_keys))


def average(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Query-weighted mean of per-conversation summaries; nested dicts (per category,
    baselines) are averaged alike over the runs that have them."""
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for r in runs for k in r))
    for key in keys:
        present = [r for r in runs if r.get(key) is not None]
        values = [r[key] for r in present]
        if all(isinstance(v, dict) for v in values):
            out[key] = average(values)
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            if key in ("queries", "query_seconds"):
                out[key] = round(sum(values), 2) if key == "query_seconds" else sum(values)
            else:
                weights = [r.get("queries", 0) for r in present]
                total = sum(weights) or 1
                out[key] = round(
                    sum(v * w for v, w in zip(values, weights, strict=True)) / total, 4
                )
        else:
            out[key] = values[0] if values else None
    return out
