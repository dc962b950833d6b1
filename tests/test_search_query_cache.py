"""The query vectors of recent searches are kept: asking again does not embed again.

The next page of a search (a cursor), the recall tool asking the same question again, or
the same text with another filter reuse the vector computed for the first search; the
benchmark's queries are all distinct, so it measures cold embeddings only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from bot.bench.search import bench_queries
from bot.config.model import AppConfig, EmbeddingConfig
from bot.db import Database
from bot.search import SearchService
from bot.search.scoring import CACHED_QUERIES
from tests.test_search_latency import DIMS, HashEmbedder, bench_store


class CountingEmbedder(HashEmbedder):
    """Records every text the model is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed_sync(texts)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 synthetic conversations x 10 turns (the bench's generator)."""
    return bench_store(tmp_path_factory.mktemp("query-cache") / "conversations.db", 60)


@pytest.fixture
async def service(store: Path) -> AsyncIterator[SearchService]:
    """A hybrid service over ``store`` whose embedder counts the texts (closed even when
    a test fails: an open database thread would keep pytest from exiting)."""
    db = await Database.open(store)
    embedder = CountingEmbedder()
    try:
        yield SearchService(AppConfig(embedding=EmbeddingConfig(dimensions=DIMS)), db, embedder)
    finally:
        await db.close()
        embedder.close()


async def test_asking_again_and_paging_embed_the_query_once(service: SearchService) -> None:
    embedder = service.embedder
    assert isinstance(embedder, CountingEmbedder)
    assert await service.start()
    query = bench_queries(1, seed=7)[0]
    first = await service.search(query, limit=2)
    assert first.method == "hybrid" and first.next_cursor
    await service.search(query, limit=2, cursor=first.next_cursor)  # the next page
    service._pages.clear()  # the ranking behind the cursor expired: ranked again
    await service.search(query, limit=2, cursor=first.next_cursor)
    again = await service.search(query, limit=2)  # the recall tool asking again
    await service.search(query, limit=2, channel="web")  # the same words, filtered
    assert embedder.texts.count(query) == 1
    assert [r.conversation_id for r in again.results] == [r.conversation_id for r in first.results]
    await service.search(query + " more", limit=2)  # another text is embedded
    assert embedder.texts.count(query + " more") == 1


async def test_the_query_vector_cache_forgets_the_oldest(service: SearchService) -> None:
    embedder = service.embedder
    assert isinstance(embedder, CountingEmbedder)
    queries = bench_queries(CACHED_QUERIES + 1, seed=9)
    for query in queries:
        await service._query_vector(query)
    await service._query_vector(queries[-1])  # the most recent: kept
    await service._query_vector(queries[0])  # the oldest: forgotten, embedded again
    assert embedder.texts.count(queries[-1]) == 1
    assert embedder.texts.count(queries[0]) == 2
    assert len(service._query_vectors) == CACHED_QUERIES


def test_bench_queries_are_distinct_and_repeatable() -> None:
    queries = bench_queries(300)
    assert len(set(queries)) == 300
    assert queries == bench_queries(300)
    assert all(3 <= len(q.split()) <= 5 for q in queries)
