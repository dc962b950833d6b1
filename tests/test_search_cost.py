"""Keyword-stage cost bounds: frequent words leave the MATCH, caches for repeated work."""

from __future__ import annotations

from pathlib import Path

import pytest

import bot.search.keyword as search_module
from bot.config.model import AppConfig
from bot.db import Database
from bot.search import SearchService
from tests.recall_helpers import add_conversation, open_index


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = await open_index(tmp_path / "conversations.db")
    for i in range(20):  # 42 turns: fewer than `candidates` (50)
        turns = [("user", f"weather report number {i}"), ("assistant", "the weather is mild")]
        if i in (4, 17):
            turns.append(("user", "the weather ruined the zeppelin launch"))
        await add_conversation(database, f"conv-{i:02d}", turns)
    yield database
    await database.close()


async def test_small_store_runs_the_exact_query(db: Database) -> None:
    # 42 turns < FREQUENT_FLOOR: every word stays in the MATCH, weather-only turns rank
    page = await SearchService(AppConfig(), db).search("weather zeppelin", limit=100)
    assert page.total == 20
    assert {r.conversation_id for r in page.results[:2]} == {"conv-04", "conv-17"}


async def test_frequent_word_leaves_the_match(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a floor of 10 turns: "weather" (42 turns) is frequent, "zeppelin" (2) is not
    monkeypatch.setattr(search_module, "FREQUENT_FLOOR", 10)
    service = SearchService(AppConfig(), db)
    page = await service.search("weather zeppelin", limit=100)
    assert sorted(r.conversation_id for r in page.results) == ["conv-04", "conv-17"]
    assert page.total == 2
    # only frequent words: the query is kept whole (never an empty MATCH)
    page = await service.search("weather mild", limit=100)
    assert page.total == 20
    # a single word is never dropped
    page = await service.search("weather", limit=100)
    assert page.total == 20


async def test_doc_freqs_are_capped_and_cached(db: Database) -> None:
    freqs = search_module.DocFreqs()

    def _count(conn):  # type: ignore[no-untyped-def]
        return freqs.capped(conn, "weather", 5), freqs.capped(conn, "zeppelin", 5)

    assert await db.run(_count, write=False) == (6, 2)  # counted up to cap + 1
    await add_conversation(db, "conv-new", [("user", "zeppelin zeppelin zeppelin")])
    # cached: the new turn is not counted until the entry expires
    assert await db.run(_count, write=False) == (6, 2)


async def test_next_page_reuses_the_ranking(db: Database) -> None:
    service = SearchService(AppConfig(), db)
    first = await service.search("weather", limit=8)
    assert first.next_cursor is not None
    calls = 0
    original = service._score

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await original(*args, **kwargs)

    service._score = counting  # type: ignore[method-assign]
    second = await service.search("weather", limit=8, cursor=first.next_cursor)
    assert calls == 0
    assert not {r.conversation_id for r in first.results} & {
        r.conversation_id for r in second.results
    }
    await service.search("weather", limit=8)  # a new search always ranks again
    assert calls == 1
