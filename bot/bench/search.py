"""``my-agent bench search``: hybrid search latency on a large synthetic store.

A store of ``--conversations`` N conversations x ``--turns`` turns (default 10,000 x 20)
is generated straight into a fresh ``conversations.db`` with the product's schema: turns
and their FTS rows (words drawn from a Zipf-like vocabulary, so postings look like
language), one abbreviation per conversation, and one random unit vector per turn window
and per abbreviation (random vectors cost the same to search as model vectors; embedding
2M texts would take hours and measure nothing about search), and, with
``search.soft_coverage`` on (``--config``), one random unit vector per vocabulary word in
``term_vectors`` (the learned ranker's soft coverage reads them).
The in-memory sign-bit matrix is loaded the way the daemon loads it at start.

Then each query (3-5 vocabulary words) runs through :meth:`SearchService.search`, the
code behind the agent's tool (query embedding with the real model included), and, in the
same run on the same database, through the baseline: the same query embedding plus a bare
FTS5 ``MATCH ... ORDER BY bm25 LIMIT k`` and a bare sqlite-vec ``vec0`` KNN (``k``) over
``turns_vec``. Reported: p50/p95 for both and ``ratio`` = hybrid p95 / baseline p95.

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

import numpy as np

from bot.bench.embed import model_config
from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService
from bot.ftsmerge import open_index_database
from bot.schema import create_vector_tables
from bot.search import SearchPage, SearchService
from bot.term_vectors import META_KEY as TERMS_KEY
from bot.term_vectors import store as store_terms
from bot.vector_codec import sign_bits, to_blob, to_half

VOCABULARY_SIZE = 5000


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


def _vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = list(
        dict.fromkeys(
            "".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))
            for _ in range(VOCABULARY_SIZE * 2)
        )
    )[:VOCABULARY_SIZE]
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf, s = 1
    return words, weights


def _unit(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    v = rng.standard_normal((n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def generate(conn: SyncConn, conversations: int, turns: int, dims: int, seed: int = 11) -> None:
    """Fill an empty index with the synthetic store (one transaction per 500 conversations)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    words, weights = _vocabulary(rng)
    create_vector_tables(conn, dims)
    turn_id = 0
    for start in range(0, conversations, 500):
        batch = range(start, min(conversations, start + 500))
        conn.execute("BEGIN")
        conv_rows, turn_rows, fts_rows, bit_rows, vec_rows, abbr_rows = [], [], [], [], [], []
        vectors = _unit(nrng, len(batch) * turns, dims)
        bits = sign_bits(vectors)
        abbr_vectors = _unit(nrng, len(batch), dims)
        for k, c in enumerate(batch):
            conv_id = f"conv-{c:07d}"
            day = f"2025-{1 + c % 12:02d}-{1 + c % 28:02d}"
            abbreviation = " ".join(rng.choices(words, weights, k=60))
            conv_rows.append(
                (
                    conv_id,
                    "web" if c % 3 else "telegram",
                    f"Synthetic {c}",
                    "[]",
                    f"{day}T10:00:00Z",
                    f"{day}T11:00:00Z",
                    turns,
                    abbreviation,
                )
            )
            abbr_rows.append((conv_id, to_blob(abbr_vectors[k])))
            for t in range(turns):
                turn_id += 1
                text = " ".join(rng.choices(words, weights, k=rng.randint(8, 40)))
                ts = f"{day}T10:{t % 60:02d}:00Z"
                role = "user" if t % 2 == 0 else "assistant"
                turn_rows.append((turn_id, conv_id, t // 2 + 1, role, text, ts, "web", role))
                fts_rows.append((turn_id, text, conv_id, t // 2 + 1, ts))
                row = k * turns + t
                vec_rows.append((turn_id, to_blob(vectors[row])))
                bit_rows.append(
                    (turn_id, conv_id, turn_id, bits[row].tobytes(), to_half(vectors[row]))
                )
        conn.executemany(
            "INSERT INTO conversations (id, channel, title, topics, created, updated, "
            "turn_count, abbreviation) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            conv_rows,
        )
        conn.executemany(
            "INSERT INTO turns (id, conversation_id, turn_number, role, content, timestamp, "
            "channel, sender) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            turn_rows,
        )
        conn.executemany(
            "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
            "VALUES (?, ?, ?, ?, ?)",
            fts_rows,
        )
        conn.executemany("INSERT INTO turns_vec (rowid, embedding) VALUES (?, ?)", vec_rows)
        conn.executemany(
            "INSERT INTO turn_vectors (turn_id, conversation_id, window_last, bits, vector) "
            "VALUES (?, ?, ?, ?, ?)",
            bit_rows,
        )
        conn.executemany(
            "INSERT INTO abbreviations_vec (conversation_id, embedding) VALUES (?, ?)", abbr_rows
        )
        conn.executemany(
            "INSERT INTO abbreviation_vectors (conversation_id, text_hash, vector) "
            "VALUES (?, 'synthetic', ?)",
            [(r[0], to_half(v)) for r, v in zip(abbr_rows, abbr_vectors, strict=True)],
        )
        # the notes' keyword index (migration 10; its triggers fill notes_fts)
        conn.executemany(
            "INSERT INTO notes (conversation_id, text) VALUES (?, ?)",
            [(r[0], r[7]) for r in conv_rows],
        )
        conn.execute("COMMIT")


def add_term_vectors(conn: SyncConn, dims: int, model_id: str, seed: int = 13) -> int:
    """One random unit vector per vocabulary word in ``term_vectors`` (the soft-coverage
    features read them like model vectors), unless the store has them already (a store
    generated before the table existed is completed). Returns the words added."""
    if conn.execute("SELECT 1 FROM term_vectors LIMIT 1").fetchone() is None:
        words, _ = _vocabulary(random.Random(11))
        vectors = _unit(np.random.default_rng(seed), len(words), dims)
        store_terms(conn, words, vectors)
        added = len(words)
    else:
        added = 0
    conn.execute(
        "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)", (TERMS_KEY, model_id)
    )
    return added


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
        rng = random.Random(5)
        words, _ = _vocabulary(random.Random(11))
        # queries mix frequent and rare words, like real ones
        queries = [
            " ".join(rng.choice(words[:2000]) for _ in range(rng.randint(3, 5)))
            for _ in range(args.queries + args.warmup)
        ]
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
