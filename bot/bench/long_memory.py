"""``my-agent bench locomo PATH``: recall over long conversations (LoCoMo protocol).

(The module is named for what it measures; the benchmark keeps its protocol's name.)

Implements ``../shared/bench/README.md``: every LoCoMo session becomes one conversation
written through the real :class:`~bot.conversations.ConversationManager` (transcript +
index), turns ``"<speaker>: <text>"`` (``[shares <caption>]`` appended) with the session's
date as timestamp, the two speakers as participants and senders. Turn windows are embedded
through :class:`~bot.vectors.VectorIndex`, each session gets its offline extractive
abbreviation (``bot.extractive``) stored and embedded like the lifecycle does. Then every
question of categories 1-4 with valid evidence goes verbatim through
:meth:`SearchService.rank` (the engine behind ``search_conversations``).

Reported in the same run: the product (hybrid), ``baseline_bm25`` (bare FTS5 MATCH over
the same ``turns_fts``, all question words OR-ed, ``ORDER BY bm25``) and
``baseline_dense`` (bare sqlite-vec KNN over the same ``turns_vec``). One store per LoCoMo
conversation (the protocol), plus ``pooled`` (all conversations in one store).
The data set is read from PATH and never copied (:mod:`bot.bench.locomo_data`).
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bot.bench.embed import model_config
from bot.bench.locomo_data import Sample, load_samples, session_timestamp
from bot.bench.locomo_metrics import CATEGORIES, Metrics, average, sessions_in_order
from bot.bench.locomo_store import Store, build_store, fingerprint
from bot.embedding import EmbeddingService

log = logging.getLogger("my_agent.bench.locomo")

# Reading the data set is bot.bench.locomo_data; importers of this module use these names.
__all__ = ["CATEGORIES", "Sample", "Store", "add_arguments", "build_store", "evaluate",
           "fingerprint", "load_samples", "run", "session_timestamp"]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", type=Path, help="locomo JSON (e.g. ../shared/bench/locomo_dev.json)"
    )
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--no-pooled", action="store_true", help="skip the pooled run")
    parser.add_argument("--config", type=Path, default=None, help="config file (model path)")
    parser.add_argument(
        "--stores",
        type=Path,
        default=None,
        help="keep the built stores in this directory and reuse them on the next run while "
        "what they embed is unchanged (ranking-only changes then skip the 4-5 min load; "
        "delete it after changing how turns are indexed)",
    )


Ranker = Callable[[str], Awaitable[tuple[list[str], list[str]]]]


async def evaluate(store: Store, samples: list[Sample]) -> dict[str, Any]:
    """The product and both baselines over ``samples`` (all loaded in ``store``)."""
    from bot.search import fts_query  # noqa: F401  (the product's quoting, for reference)

    product, bm25, dense = Metrics(), Metrics(), Metrics()
    method = "keyword"
    vec = store.search.vectors
    started = time.perf_counter()
    queries = 0
    for sample in samples:
        for question, category, evidence in sample.questions:
            queries += 1
            ev = {f"{sample.sample_id}/{d}" for d in evidence}
            ev_sessions = {e.rsplit(":", 1)[0] for e in ev}
            ranking = await store.search.rank(question)
            method = ranking.method
            turns = [
                store.turn_key[(h.conversation_id, h.turn_id)]
                for h in ranking.turns
                if (h.conversation_id, h.turn_id) in store.turn_key
            ]
            sessions = []
            for conv, _ in ranking.conversations:
                sessions.append(_session_key(store, conv))
            product.add(category, turns, sessions, ev, ev_sessions)
            bm_turns = await _bare_fts(store, question)
            bm25.add(category, bm_turns, sessions_in_order(bm_turns), ev, ev_sessions)
            if vec is not None and vec.ready and store.embedder.available:
                dn_turns = await _bare_knn(store, question)
                dense.add(category, dn_turns, sessions_in_order(dn_turns), ev, ev_sessions)
    elapsed = time.perf_counter() - started
    result = product.summary()
    result["method"] = method
    result["baseline_bm25"] = bm25.summary()
    result["baseline_dense"] = dense.summary() if dense.values else None
    result["query_seconds"] = round(elapsed, 2)
    result["queries"] = queries
    return result


def _session_key(store: Store, conv: str) -> str:
    # dia ids are "D<session>:<i>": the session key matches the "<sample>/D<session>" prefix
    sample, number = store.session_of.get(conv, "?/0").split("/")
    return f"{sample}/D{number}"


async def _bare_fts(store: Store, question: str) -> list[str]:
    """Baseline: every question word quoted and OR-ed, bare ``ORDER BY bm25``."""
    words = list(dict.fromkeys(w.lower() for w in re.findall(r"\w+", question)))
    if not words:
        return []
    match = " OR ".join('"' + w + '"' for w in words)
    rows = await store.db.fetchall(
        "SELECT rowid, conversation_id FROM turns_fts WHERE turns_fts MATCH ? "
        "ORDER BY bm25(turns_fts) LIMIT 50",
        (match,),
    )
    return [store.turn_key[(str(c), int(r))] for r, c in rows if (str(c), int(r)) in store.turn_key]


async def _bare_knn(store: Store, question: str) -> list[str]:
    """Baseline: the question's embedding, bare sqlite-vec KNN over ``turns_vec``."""
    from bot.vector_codec import to_blob

    qvec = (await store.embedder.embed([question]))[0]
    rows = await store.db.fetchall(
        "SELECT v.rowid, t.conversation_id FROM turns_vec v JOIN turns t ON t.id = v.rowid "
        "WHERE v.embedding MATCH ? AND k = 50 ORDER BY v.distance",
        (to_blob(qvec),),
    )
    return [store.turn_key[(str(c), int(r))] for r, c in rows if (str(c), int(r)) in store.turn_key]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    path = Path(args.path).expanduser().resolve()
    samples = load_samples(path)
    if getattr(args, "limit", 0):
        samples = samples[: args.limit]
    config, source = model_config(getattr(args, "config", None))
    embedder = EmbeddingService(config.embedding)
    loaded = await embedder.load()
    per_conversation = []
    load_seconds = 0.0
    reused = 0
    keep = getattr(args, "stores", None)
    with tempfile.TemporaryDirectory(prefix="my-agent-locomo-") as tmp:
        base = Path(keep).expanduser().resolve() if keep else Path(tmp)
        for i, sample in enumerate(samples):
            store, seconds = await build_store(
                base / f"s{i}", [sample], embedder, config, keep is not None
            )
            load_seconds += seconds or 0.0
            reused += seconds is None
            per_conversation.append(await evaluate(store, [sample]))
            await store.close()
        result = average(per_conversation)
        if not getattr(args, "no_pooled", False):
            store, _ = await build_store(
                base / "pooled", samples, embedder, config, keep is not None
            )
            result["pooled"] = await evaluate(store, samples)
            await store.close()
    embedder.close()
    result["abbreviations"] = "extractive"
    result["embedding_model"] = source if loaded else None
    result["conversations"] = len(samples)
    result["sessions"] = sum(len(s.sessions) for s in samples)
    result["turns"] = sum(len(t) for s in samples for _, _, t in s.sessions)
    # (three decimals: a store of a few turns builds in under 0.05 s, which one decimal
    # reported as 0.0, the figure of a reused store)
    result["load_seconds"] = round(load_seconds, 3)
    if keep is not None:
        result["reused_stores"] = reused
    result["search_config"] = config.search.model_dump()
    return result
