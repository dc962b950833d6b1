"""``my-agent bench ranker``: cross-validate and re-train the learned ranker on LoCoMo.

For each search method (``hybrid``; ``hybrid-no-terms``, hybrid without the term vectors'
soft coverage; and ``keyword`` as without an embedding model) every
question of every conversation is ranked by the rules (``search.ranker: rules``) and the
best ``ranker_depth`` candidates' features are kept with their labels (evidence or not).
Leave-one-conversation-out: a model is fitted on the other conversations' questions and
the held-out conversation is ranked again through the product (``SearchService.rank``
with that model file), so the figures are the product's on questions the model never
saw. ``--out FILE`` then fits both methods on every conversation and writes the model
file (``bot/search/ranker.json`` is this command's output on the development slice).

The stores are the locomo benchmark's (``--stores DIR`` reuses them, see
``my-agent bench locomo``).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bot.bench.embed import model_config
from bot.bench.locomo_metrics import Metrics
from bot.bench.long_memory import Sample, Store, _session_key, build_store, load_samples
from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.search import SearchService
from bot.search.features import turn_features
from bot.search.learned import NO_TERMS, LinearRanker, save_models
from bot.search.training import Group, default_features, fit, importance

log = logging.getLogger("my_agent.bench.ranker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="locomo JSON (../shared/bench/locomo_dev.json)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--config", type=Path, default=None, help="config file (model path)")
    parser.add_argument("--stores", type=Path, default=None, help="as for bench locomo")
    parser.add_argument("--out", type=Path, default=None, help="write the trained model here")
    parser.add_argument("--l2", type=float, default=1e-3, help="weight decay")
    parser.add_argument("--epochs", type=int, default=300, help="gradient steps")
    parser.add_argument(
        "--pooled",
        action="store_true",
        help="also rank each held-out conversation in the pooled store (every conversation "
        "in one store: the others are distractors) with the models of the folds",
    )


def _with_search(config: AppConfig, **search: Any) -> AppConfig:
    return config.model_copy(update={"search": config.search.model_copy(update=search)})


async def _groups(service: SearchService, store: Store, sample: Sample, depth: int) -> list[Group]:
    """The rules' best ``depth`` candidates of every question, with features and labels."""
    groups = []
    for question, _category, evidence in sample.questions:
        wanted = {f"{sample.sample_id}/{d}" for d in evidence}
        scored = await service.scored(question)
        idx = scored.order[:depth]
        keys = [store.turn_key.get((scored.rows.conv[i], scored.rows.ids[i])) for i in idx]
        labels = [1 if k in wanted else 0 for k in keys]
        groups.append(Group(turn_features(scored, idx), np.asarray(labels, dtype=np.int8)))
    return groups


async def _measure(service: SearchService, store: Store, sample: Sample, metrics: Metrics) -> None:
    """Rank every question of ``sample`` through the product into ``metrics``."""
    for question, category, evidence in sample.questions:
        wanted = {f"{sample.sample_id}/{d}" for d in evidence}
        ranking = await service.rank(question)
        turns = [
            store.turn_key[(h.conversation_id, h.turn_id)]
            for h in ranking.turns
            if (h.conversation_id, h.turn_id) in store.turn_key
        ]
        sessions = [_session_key(store, c) for c, _ in ranking.conversations]
        metrics.add(category, turns, sessions, wanted, {e.rsplit(":", 1)[0] for e in wanted})


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("turn_recall@5", "turn_recall@10", "turn_recall@25", "turn_mrr", "session_recall@5")
    out = {k: summary.get(k) for k in keep}
    out["per_category"] = {
        name: {k: v.get(k) for k in ("turn_recall@10", "session_recall@5", "queries")}
        for name, v in summary.get("per_category", {}).items()
    }
    return out


async def _method(
    method: str,
    stores: list[Store],
    samples: list[Sample],
    args: argparse.Namespace,
    scratch: Path,
    pooled: Store | None = None,
) -> tuple[LinearRanker, dict[str, Any]]:
    """Cross-validated figures for one search method, and its model fitted on everything;
    with ``pooled``, the same folds' models also rank the pooled store."""
    hybrid = method != "keyword"
    terms = method == "hybrid"  # the soft-coverage features (search.soft_coverage)
    embedder = stores[0].embedder if hybrid else None

    async def open_service(store: Store) -> SearchService:
        service = SearchService(
            _with_search(store.config, ranker="rules", soft_coverage=terms), store.db, embedder
        )
        await service.start()
        if service.hybrid != hybrid:
            raise RuntimeError(f"{method} rankings need {'a' if embedder else 'no'} model")
        vectors = service.vectors
        if terms and vectors is not None and not vectors.terms_ready:
            # stores are built with the default config (soft coverage off, no term
            # vectors): complete them the way the daemon does when it is switched on
            await vectors.reindex_all()
        if terms and not (vectors and vectors.terms_ready):
            raise RuntimeError(f"{store.root}: no complete term vectors")
        service.term_features = method == "hybrid"
        return service

    services = [await open_service(store) for store in stores]
    depth = stores[0].config.search.ranker_depth
    features = default_features(hybrid, terms=method == "hybrid")
    started = time.perf_counter()
    groups, rules = [], Metrics()
    for service, store, sample in zip(services, stores, samples, strict=True):
        groups.append(await _groups(service, store, sample, depth))
        await _measure(service, store, sample, rules)
    cv, pooled_rules, pooled_cv = Metrics(), Metrics(), Metrics()
    pool = None
    if pooled is not None:
        pool = await open_service(pooled)
    for held, (service, store, sample) in enumerate(zip(services, stores, samples, strict=True)):
        train = [g for i, gs in enumerate(groups) if i != held for g in gs]
        model = fit(train, features, l2=args.l2, epochs=args.epochs)
        path = scratch / f"{method}-{held}.json"
        save_models(path, {method: model}, {"fold": held})
        service.config = _with_search(
            store.config, ranker="learned", ranker_model=path, soft_coverage=terms
        )
        await _measure(service, store, sample, cv)
        if pool is not None and pooled is not None:
            pool.config = _with_search(pooled.config, ranker="rules", soft_coverage=terms)
            await _measure(pool, pooled, sample, pooled_rules)
            pool.config = _with_search(
                pooled.config, ranker="learned", ranker_model=path, soft_coverage=terms
            )
            await _measure(pool, pooled, sample, pooled_cv)
    model = fit([g for gs in groups for g in gs], features, l2=args.l2, epochs=args.epochs)
    report: dict[str, Any] = {
        "rules": _figures(rules.summary()),
        "learned_cross_validated": _figures(cv.summary()),
        "weights": [(f, round(w, 3)) for f, w in importance(model)],
        "seconds": round(time.perf_counter() - started, 1),
    }
    if pool is not None:
        report["pooled"] = {
            "rules": _figures(pooled_rules.summary()),
            "learned_cross_validated": _figures(pooled_cv.summary()),
        }
    return model, report


async def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = load_samples(Path(args.path).expanduser().resolve())
    if args.limit:
        samples = samples[: args.limit]
    if len(samples) < 2:
        raise SystemExit("cross-validation needs at least 2 conversations")
    config, _ = model_config(args.config)
    embedder = EmbeddingService(config.embedding)
    loaded = await embedder.load()
    keep = args.stores
    models: dict[str, LinearRanker] = {}
    result: dict[str, Any] = {"conversations": len(samples)}
    with tempfile.TemporaryDirectory(prefix="my-agent-ranker-") as tmp:
        base = Path(keep).expanduser().resolve() if keep else Path(tmp) / "stores"
        stores = []
        for i, sample in enumerate(samples):
            store, _ = await build_store(base / f"s{i}", [sample], embedder, config, bool(keep))
            stores.append(store)
        pooled = None
        if args.pooled:
            pooled, _ = await build_store(base / "pooled", samples, embedder, config, bool(keep))
        for method in ("hybrid", NO_TERMS, "keyword") if loaded else ("keyword",):
            models[method], result[method] = await _method(
                method, stores, samples, args, Path(tmp), pooled
            )
        for store in [*stores, pooled] if pooled is not None else stores:
            await store.close()
    embedder.close()
    result["depth"] = config.search.ranker_depth
    result["l2"], result["epochs"] = args.l2, args.epochs
    if args.out is not None:
        about = {
            "trained_on": f"{Path(args.path).name}, {len(samples)} conversations",
            "depth": config.search.ranker_depth,
            "l2": args.l2,
            "epochs": args.epochs,
            "cross_validated": {
                m: {
                    "rules": result[m]["rules"]["turn_recall@10"],
                    "learned": result[m]["learned_cross_validated"]["turn_recall@10"],
                }
                for m in models
            },
        }
        save_models(args.out, models, about)
        result["written"] = str(args.out)
    return result
