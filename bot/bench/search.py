"""``my-agent bench search``: hybrid search latency on a large synthetic store.

The store (``--conversations`` N x ``--turns`` turns, default 10,000 x 20; random words
and random unit vectors) is generated once by :mod:`bot.bench.search_store` and reused
with ``--db``. The in-memory sign-bit matrix is loaded the way the daemon loads it at
start.

Then each query (3-5 vocabulary words, all distinct: every one is embedded, none is
served by the service's cache of recent query vectors) runs through
:meth:`SearchService.search`, the code behind the agent's tool (query embedding with the
real model included), and, in the same run on the same database, through the baseline:
the same query embedding plus a bare FTS5 ``MATCH ... ORDER BY bm25 LIMIT k`` and a bare
sqlite-vec ``vec0`` KNN (``k``) over ``turns_vec``. Reported: p50/p95 for both and
``ratio`` = hybrid p95 / baseline p95.

``--dump-rankings FILE`` / ``--check-rankings FILE``: write every query's first page, or
compare with such a file (``rankings.identical``, ``max_score_diff``), so a latency change
can show that it left the rankings alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.bench.embed import model_config
from bot.bench.search_store import add_term_vectors, generate, vocabulary
from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService
from bot.ftsmerge import open_index_database
from bot.search import SearchPage, SearchService
from bot.vector_codec import to_blob


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=20, help="turns per conversation")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument(
        "--db", type=Path, default=None, help="reuse/keep the generated database at this path"
    )
    parser.add_argument(
        "--dump-rankings",
        type=Path,
        default=None,
        help="write each query's first page (ids, scores, matched turns) as JSON lines",
    )
    parser.add_argument(
        "--check-rankings",
        type=Path,
        default=None,
        help="compare each query's first page with a --dump-rankings file (same store)",
    )
    if "--config" not in parser._option_string_actions:  # `my-agent bench` may add it
        parser.add_argument("--config", type=Path, default=None)


def bench_queries(count: int, seed: int = 5) -> list[str]:
    """``count`` distinct queries of 3-5 words from the 2,000 most frequent of the store's
    vocabulary (frequent and rare words mixed, like real ones).

    Distinct, so every search embeds its query anew: the service keeps the vectors of
    recent queries (``bot.search.scoring``, for the next page and the recall tool asking
    again), and a repeated text would be measured without its embedding.
    """
    rng = random.Random(seed)
    words, _ = vocabulary(random.Random(11))
    queries: dict[str, None] = {}
    while len(queries) < count:
        queries[" ".join(rng.choice(words[:2000]) for _ in range(rng.randint(3, 5)))] = None
    return list(queries)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config, source = model_config(getattr(args, "config", None))
    embedder = EmbeddingService(config.embedding)
    if not await embedder.load():
        return {"error": f"embedding model unavailable: {embedder.unavailable_reason}"}
    dims = embedder.dimensions
    with tempfile.TemporaryDirectory(prefix="my-agent-bench-search-") as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "conversations.db"
        db = await open_index_database(path)
        generated = 0.0
        existing = await db.fetchone("SELECT count(*) FROM conversations")
        if not existing or existing[0] != args.conversations:
            t0 = time.perf_counter()
            raw = db._conn._conn
            await db._conn._execute(generate, raw, args.conversations, args.turns, dims)
            generated = time.perf_counter() - t0
        # the model id must match what the store says, or VectorIndex.open() drops it all
        await db.execute(
            "INSERT OR REPLACE INTO index_meta (key, value) VALUES ('embedding_model', ?)",
            (embedder.model_id,),
        )
        if config.search.soft_coverage:  # read only with soft coverage on (--config)
            await db.run(lambda c: add_term_vectors(c, dims, embedder.model_id))
        service = SearchService(config, db, embedder)
        t0 = time.perf_counter()
        await service.start()
        open_seconds = time.perf_counter() - t0
        queries = bench_queries(args.queries + args.warmup)
        k = config.search.candidates
        hybrid: list[float] = []
        baseline: list[float] = []
        methods = set()
        pages: list[dict[str, Any]] = []
        for i, query in enumerate(queries):
            t0 = time.perf_counter()
            page = await service.search(query, limit=10)
            t1 = time.perf_counter()
            await _baseline(db, embedder, query, k)
            t2 = time.perf_counter()
            methods.add(page.method)
            pages.append(page_record(query, page))
            if i >= args.warmup:
                hybrid.append((t1 - t0) * 1000)
                baseline.append((t2 - t1) * 1000)
            await asyncio.sleep(0)
        turns = await db.fetchone("SELECT count(*) FROM turns")
        await db.close()
    embedder.close()
    p95, b95 = _percentile(hybrid, 0.95), _percentile(baseline, 0.95)
    extra: dict[str, Any] = {}
    if args.dump_rankings:
        args.dump_rankings.write_text("".join(json.dumps(p) + "\n" for p in pages))
        extra["rankings_dumped"] = str(args.dump_rankings)
    if args.check_rankings:
        expected = [json.loads(line) for line in args.check_rankings.read_text().splitlines()]
        extra["rankings"] = compare_rankings(expected, pages)
    return {
        "conversations": args.conversations,
        "turns": int(turns[0]) if turns else 0,
        "queries": len(hybrid),
        "method": sorted(methods),
        "p50_ms": round(statistics.median(hybrid), 2),
        "p95_ms": round(p95, 2),
        "baseline_p50_ms": round(statistics.median(baseline), 2),
        "baseline_p95_ms": round(b95, 2),
        "ratio": round(p95 / b95, 3) if b95 else None,
        "generate_seconds": round(generated, 1),
        "open_seconds": round(open_seconds, 2),
        "candidates": k,
        # every query text is new to the service: no cached query vector is reused
        "query_embeddings": "cold",
        "model": source,
        "goals": {"p95_ms@10k": "<= 40", "ratio": "<= 1.5", "p95_ms@100k": "<= 150"},
        **extra,
    }


def page_record(query: str, page: SearchPage) -> dict[str, Any]:
    """What a ranking check compares: the ranked conversations with scores and turns."""
    return {
        "query": query,
        "method": page.method,
        "total": page.total,
        "results": [
            {
                "id": r.conversation_id,
                "score": r.score,
                "matched": r.matched_turns,
                "turns": [[int(t), float(s)] for t, s in r.turn_scores],
            }
            for r in page.results
        ],
    }


def compare_rankings(
    expected: list[dict[str, Any]], actual: list[dict[str, Any]], tol: float = 1e-6
) -> dict[str, Any]:
    """Queries whose first page differs (ids, order, matched turns, or a score by > tol)."""
    differ: list[str] = []
    worst = 0.0
    for want, got in zip(expected, actual, strict=False):
        same = (
            want["query"] == got["query"]
            and want["method"] == got["method"]
            and want["total"] == got["total"]
            and [r["id"] for r in want["results"]] == [r["id"] for r in got["results"]]
            and [r["matched"] for r in want["results"]] == [r["matched"] for r in got["results"]]
            and [[t for t, _ in r["turns"]] for r in want["results"]]
            == [[t for t, _ in r["turns"]] for r in got["results"]]
        )
        if same:
            for w, g in zip(want["results"], got["results"], strict=True):
                scores = [(w["score"], g["score"])]
                scores += [(a[1], b[1]) for a, b in zip(w["turns"], g["turns"], strict=True)]
                for a, b in scores:
                    worst = max(worst, abs(a - b))
                    same = same and abs(a - b) <= tol
        if not same:
            differ.append(got["query"])
    return {
        "identical": not differ and len(expected) == len(actual),
        "queries": len(actual),
        "expected_queries": len(expected),
        "differing": differ[:20],
        "differing_count": len(differ),
        "max_score_diff": worst,
    }


async def _baseline(db: Database, embedder: EmbeddingService, query: str, k: int) -> None:
    """Query embedding + bare FTS5 MATCH + bare vec0 KNN, the minimum any hybrid pays."""
    from bot.search import fts_query

    qvec = (await embedder.embed([query]))[0]
    match = fts_query(query) or '""'

    def _both(conn: SyncConn) -> None:
        conn.execute(
            "SELECT rowid, bm25(turns_fts) FROM turns_fts WHERE turns_fts MATCH ? "
            "ORDER BY bm25(turns_fts) LIMIT ?",
            (match, k),
        ).fetchall()
        conn.execute(
            "SELECT rowid, distance FROM turns_vec WHERE embedding MATCH ? AND k = ?",
            (to_blob(qvec), k),
        ).fetchall()

    await db.run(_both, write=False)


def _json(result: dict[str, Any]) -> str:  # pragma: no cover - debugging helper
    return json.dumps(result, indent=2)
