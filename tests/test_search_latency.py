"""The latency work on hybrid search changes how a ranking is computed, never what it is.

The service loads the keyword windows while the query is embedded and the vector windows
afterwards (two reads over disjoint spans, merged in Python), rescoring, fusion and the
page's rows in one reader hop. These tests hold that pipeline to a reference computed
the straightforward way: one ordered SQL query over every span, the stages in sequence.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bot.bench.search_store import generate, vocabulary
from bot.config.model import AppConfig, EmbeddingConfig, SearchConfig
from bot.db import Database, SyncConn, connect_sync
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.search import SearchService, learned
from bot.search.conversations import rescore
from bot.search.fusion import fuse
from bot.search.keyword import fts_candidates
from bot.search.query import fts_parts, or_terms
from bot.search.results import Filters
from bot.search.rows import Rows, build_rows, fetch_spans, merge, subtract
from bot.search.titles import title_candidates
from bot.vector_codec import half_matrix
from tests.recall_helpers import open_index

DIMS = 32


class _HashModel:
    """A deterministic stand-in for fastembed: a text is the normalised sum of one
    pseudo-random vector per word (texts sharing words are close)."""

    def embed(self, texts: list[str], batch_size: int = 32) -> Any:
        for text in texts:
            vector = np.zeros(DIMS, dtype=np.float32)
            for word in text.lower().split():
                rng = np.random.default_rng(zlib.crc32(word.encode()))
                vector += rng.standard_normal(DIMS).astype(np.float32)
            norm = float(np.linalg.norm(vector)) or 1.0
            yield vector / norm


class HashEmbedder(EmbeddingService):
    """The real service (worker thread, batches) around :class:`_HashModel`."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(EmbeddingConfig(dimensions=DIMS))
        self.fail = fail

    def _load(self) -> Any:
        return _HashModel()

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if self.fail:
            raise EmbeddingUnavailable("the model went away")
        return super().embed_sync(texts)


def bench_store(path: Path, conversations: int) -> Path:
    """``conversations`` synthetic conversations x 10 turns at ``path`` (the bench's
    generator, 32 dimensions, the vectors marked as :class:`HashEmbedder`'s)."""

    async def _build() -> None:
        db = await open_index(path)
        await db.close()

    import asyncio

    asyncio.run(_build())
    conn = connect_sync(path)
    generate(conn, conversations, 10, DIMS, seed=3)
    conn.execute(
        "INSERT OR REPLACE INTO index_meta (key, value) VALUES ('embedding_model', ?)",
        (HashEmbedder().model_id,),
    )
    conn.close()
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 synthetic conversations x 10 turns."""
    return bench_store(tmp_path_factory.mktemp("latency") / "conversations.db", 120)


def _queries(count: int) -> list[str]:
    rng = random.Random(2)
    words, _ = vocabulary(random.Random(3))
    return [
        " ".join(rng.choice(words[:300]) for _ in range(rng.randint(2, 5))) for _ in range(count)
    ]


def _reference_rows(conn: SyncConn, spans: dict[str, list[tuple[int, int]]], dims: int) -> Rows:
    """Every span in one statement, ordered by SQLite (the code before the split)."""
    values: list[Any] = []
    for conv in sorted(spans):
        for lo, hi in merge(spans[conv]):
            values.extend((conv, lo, hi))
    spec = ",".join(["(?, ?, ?)"] * (len(values) // 3))
    rows = conn.execute(
        f"WITH r(c, lo, hi) AS (VALUES {spec}) SELECT t.id, t.conversation_id, "
        "t.turn_number, t.sender, t.timestamp, t.content, c.channel, v.vector, t.role FROM r "
        "JOIN turns t ON t.conversation_id = r.c AND t.turn_number BETWEEN r.lo AND r.hi "
        "AND t.recall = 1 "
        "LEFT JOIN turn_vectors v ON v.turn_id = t.id "
        "JOIN conversations c ON c.id = t.conversation_id "
        "ORDER BY t.conversation_id, t.turn_number, t.id",
        values,
    ).fetchall()
    n = len(rows)
    blob = b"".join(r[7] or bytes(2 * dims) for r in rows)
    matrix = np.frombuffer(blob, dtype=np.float16).reshape(n, dims).astype(np.float32)
    code_of: dict[str, int] = {}
    return Rows(
        ids=[r[0] for r in rows],
        conv=[r[1] for r in rows],
        number=[r[2] for r in rows],
        sender=[r[3] or "" for r in rows],
        timestamp=[r[4] or "" for r in rows],
        content=[r[5] for r in rows],
        channel=[r[6] for r in rows],
        matrix=matrix,
        has=np.asarray([r[7] is not None for r in rows], dtype=bool),
        codes=np.asarray([code_of.setdefault(r[1], len(code_of)) for r in rows]),
        role=[r[8] for r in rows],
    )


def _same_rows(a: Rows, b: Rows) -> None:
    for name in ("ids", "conv", "number", "sender", "timestamp", "content", "channel", "role"):
        assert getattr(a, name) == getattr(b, name), name
    assert np.array_equal(a.matrix, b.matrix)
    assert np.array_equal(a.has, b.has)
    assert np.array_equal(a.codes, b.codes)


def _random_spans(rng: random.Random, count: int) -> dict[str, list[tuple[int, int]]]:
    spans: dict[str, list[tuple[int, int]]] = {}
    for _ in range(count):
        n = rng.randint(1, 6)
        r = rng.randint(0, 3)
        spans.setdefault(f"conv-{rng.randrange(120):07d}", []).append((max(1, n - r), n + r))
    return spans


def test_subtract_leaves_exactly_the_uncovered_turns() -> None:
    rng = random.Random(7)
    for _ in range(300):
        ranges = _random_spans(rng, rng.randint(0, 8))
        covered = _random_spans(rng, rng.randint(0, 8))

        def turns(spans: dict[str, list[tuple[int, int]]]) -> set[tuple[str, int]]:
            return {(c, n) for c, ss in spans.items() for lo, hi in ss for n in range(lo, hi + 1)}

        rest = subtract(ranges, covered)
        assert turns(rest) == turns(ranges) - turns(covered)
        for spans in rest.values():
            assert all(lo <= hi for lo, hi in spans)


def test_split_reads_equal_one_ordered_query(store: Path) -> None:
    conn = connect_sync(store)
    rng = random.Random(11)
    for _ in range(40):
        first, second = _random_spans(rng, 12), _random_spans(rng, 12)
        union = {c: first.get(c, []) + second.get(c, []) for c in set(first) | set(second)}
        raw = fetch_spans(conn, first, True) + fetch_spans(conn, subtract(second, first), True)
        _same_rows(build_rows(raw, True, DIMS), _reference_rows(conn, union, DIMS))
        # overlapping reads are deduplicated, not doubled
        raw = fetch_spans(conn, first, True) + fetch_spans(conn, union, True)
        _same_rows(build_rows(raw, True, DIMS), _reference_rows(conn, union, DIMS))
    conn.close()


def test_rows_without_channels_are_the_rows_with_an_empty_channel(store: Path) -> None:
    # an unfiltered ranking reads no channel (session 31: no join to conversations)
    conn = connect_sync(store)
    rng = random.Random(31)
    for _ in range(20):
        spans = _random_spans(rng, 12)
        with_channels = sorted(fetch_spans(conn, spans, True))
        assert with_channels and all(r[6] for r in with_channels)
        without = sorted(fetch_spans(conn, spans, True, channels=False))
        assert without == [(*r[:6], "", *r[7:]) for r in with_channels]
    conn.close()


def test_half_matrix_equals_astype() -> None:
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = halves[np.isfinite(halves)]
    n = len(finite) // 16
    values = finite[: n * 16].reshape(n, 16)
    assert np.array_equal(half_matrix(values.tobytes(), n, 16), values.astype(np.float32))


async def _reference_ranking(
    db: Database, service: SearchService, query: str
) -> list[tuple[str, float]]:
    """The ranking computed stage after stage with one ordered read of every window."""
    cfg = service.config.search
    qvec = (await service.embedder.embed([query]))[0]  # type: ignore[union-attr]
    parts = fts_parts(query)
    keyword = await db.run(
        lambda c: fts_candidates(c, or_terms(parts), Filters(), cfg.candidates), write=False
    )
    knn = await service.vectors.knn_turns(qvec, cfg.candidates)  # type: ignore[union-attr]
    abbreviations = await service.vectors.knn_abbreviations(qvec, cfg.candidates)  # type: ignore[union-attr]
    radius = max(cfg.keyword_window, cfg.vector_window)
    spans: dict[str, list[tuple[int, int]]] = {}
    for rank, (_, conv, number, _) in enumerate(keyword):
        r = radius if rank < cfg.expand else 0
        spans.setdefault(conv, []).append((max(1, number - r), number + r))
    found = {k[0] for k in keyword}
    ordered = sorted(knn, key=lambda t: -knn[t])

    def _read(conn: SyncConn) -> Rows:
        for rank, turn_id in enumerate(ordered):
            if turn_id in found:
                continue
            conv, number = conn.execute(
                "SELECT conversation_id, turn_number FROM turns WHERE id = ?", (turn_id,)
            ).fetchone()
            r = cfg.vector_window if rank < cfg.expand else 0
            spans.setdefault(conv, []).append((max(1, number - r), number + r))
        return _reference_rows(conn, spans, DIMS)

    rows = await db.run(_read, write=False)
    titles, _ = await db.run(
        lambda c: title_candidates(c, or_terms(parts), parts, Filters(), cfg),
        write=False,
    )
    scored = learned.apply(
        fuse(cfg, query, Filters(), rows, keyword, knn, abbreviations, qvec, {}), cfg
    )
    scored.titles = titles
    return rescore(scored, cfg).conversations


async def test_pipeline_ranks_like_the_sequential_reference(store: Path) -> None:
    db = await Database.open(store)
    embedder = HashEmbedder()
    service = SearchService(AppConfig(embedding=EmbeddingConfig(dimensions=DIMS)), db, embedder)
    assert await service.start()
    # a store this small keeps every word in the MATCH (no frequent-word pruning)
    for query in _queries(25):
        ranking = await service.rank(query)
        assert ranking.method == "hybrid"
        assert ranking.conversations == await _reference_ranking(db, service, query)
        page = await service.search(query, limit=5)
        assert [(r.conversation_id, r.score) for r in page.results] == ranking.conversations[:5]
        assert all(r.title for r in page.results)  # the page's rows came with the ranking
    await db.close()
    embedder.close()


async def test_failed_query_embedding_ranks_like_keyword_search(store: Path) -> None:
    # the keyword hop guesses "hybrid" (wider windows, vectors); when the embedding then
    # fails the windows are read again the keyword-only way
    # (a vector window wider than the keyword window: the guess loads more neighbours)
    db = await Database.open(store)
    failing = HashEmbedder()
    search = SearchConfig(keyword_window=1, vector_window=3)
    config = AppConfig(embedding=EmbeddingConfig(dimensions=DIMS), search=search)
    hybrid = SearchService(config, db, failing)
    assert await hybrid.start()
    failing.fail = True
    keyword_only = SearchService(AppConfig(search=search), db)
    for query in _queries(10):
        got, want = await hybrid.rank(query), await keyword_only.rank(query)
        assert got.method == want.method == "keyword"
        assert got.conversations == want.conversations
        assert [(t.turn_id, t.score) for t in got.turns] == [
            (t.turn_id, t.score) for t in want.turns
        ]
    await db.close()
    failing.close()


async def test_senders_read_new_turns_only_and_rescan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bot.search.senders as service_module
    from tests.recall_helpers import add_conversation

    db = await open_index(tmp_path / "conversations.db")
    await add_conversation(db, "c1", [("user", "hello there")])

    async def say(sender: str, conv: str = "c1") -> None:
        await db.execute(
            "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp, "
            "sender) VALUES (?, 9, 'user', 'hi', '2026-01-10T12:00:00+00:00', ?)",
            (conv, sender),
        )

    service = SearchService(AppConfig(), db)
    assert await service._senders() == {"user"}
    await say("Zelda")
    assert await service._senders() == {"user"}  # cached for a minute
    monkeypatch.setattr(service_module, "TTL", -1.0)
    assert await service._senders() == {"user", "Zelda"}  # the new turns only
    await db.execute("DELETE FROM turns WHERE sender = 'Zelda'")
    assert "Zelda" in await service._senders()  # until the next full scan
    monkeypatch.setattr(service_module, "RESCAN", -1.0)
    assert await service._senders() == {"user"}
    await db.close()


async def test_turn_total_counts_new_turns_and_recounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bot.search.keyword as keyword_module
    from bot.search.keyword import DocFreqs
    from tests.recall_helpers import add_conversation

    db = await open_index(tmp_path / "conversations.db")
    await add_conversation(db, "c1", [("user", "one"), ("assistant", "two")])
    freqs = DocFreqs()

    async def total() -> int:
        return int(await db.run(freqs.total, write=False))

    assert await total() == 2
    await add_conversation(db, "c2", [("user", "three"), ("assistant", "four"), ("user", "5")])
    assert await total() == 2  # cached for a minute
    monkeypatch.setattr(keyword_module, "_TOTAL_TTL", -1.0)
    assert await total() == 5  # the new turns only
    await db.execute("DELETE FROM turns WHERE conversation_id = 'c1'")
    assert await total() == 5  # until the next full count
    monkeypatch.setattr(keyword_module, "_TOTAL_RESCAN", -1.0)
    assert await total() == 3
    await db.close()


def test_bench_rankings_check_flags_any_change() -> None:
    from bot.bench.search import compare_rankings

    page = {
        "query": "q",
        "method": "hybrid",
        "total": 2,
        "results": [
            {"id": "a", "score": 1.0, "matched": [1], "turns": [[1, 1.0]]},
            {"id": "b", "score": 0.5, "matched": [2], "turns": [[2, 0.5], [3, 0.25]]},
        ],
    }
    same = compare_rankings([page], [json_copy(page)])
    assert same["identical"] and same["max_score_diff"] == 0.0
    nudged = json_copy(page)
    nudged["results"][1]["turns"][1][1] += 1e-9  # within the tolerance
    assert compare_rankings([page], [nudged])["identical"]
    for change in (
        lambda p: p["results"].reverse(),
        lambda p: p["results"][0].update(score=0.99),
        lambda p: p["results"][1]["turns"].reverse(),
        lambda p: p["results"][1].update(matched=[3]),
        lambda p: p.update(total=3),
    ):
        changed = json_copy(page)
        change(changed)
        report = compare_rankings([page], [changed])
        assert not report["identical"] and report["differing"] == ["q"]


def json_copy(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))
