"""Vector candidates of filtered searches and of queries that name dates
(bot.search.pool), with the real local MiniLM model (fails under CI=true if it is missing)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.search import SearchService
from bot.search.pool import dated_filters, turn_pool
from bot.search.results import Filters
from tests.recall_helpers import add_conversation, open_index

GARDEN = [
    "planting tomatoes and peppers in the vegetable garden",
    "watering the roses and pruning the hedge",
    "the lawn mower broke while cutting the grass",
    "composting kitchen scraps for the garden beds",
]
BUDGET = [
    ("user", "Let's go over the quarterly budget review with the finance team"),
    ("assistant", "The budget is 4% over plan in the third quarter."),
]


@pytest.fixture
async def store(tmp_path: Path, embedder: EmbeddingService):  # type: ignore[no-untyped-def]
    """40 conversations about the garden on other days, and one about the budget on
    14 October 2026; ``candidates`` 10, so the budget turns are nowhere near the
    store-wide nearest ten for a question that names no subject."""
    db = await open_index(tmp_path / "conversations.db")
    config = AppConfig(data_dir=tmp_path)
    config.search.candidates = 10
    service = SearchService(config, db, embedder)
    assert await service.start()
    assert service.vectors is not None
    for i in range(40):
        topic = GARDEN[i % len(GARDEN)]
        turns = [("user", f"Today we talked about {topic}, note {i}"), ("assistant", "Noted.")]
        day = f"2026-0{1 + i % 9}-{1 + i % 27:02d}"
        await add_conversation(db, f"conv-{i:02d}", turns, day=day, channel="telegram")
        await service.vectors.index_turns(f"conv-{i:02d}")
    await add_conversation(db, "conv-budget", BUDGET, day="2026-10-14")
    await service.vectors.index_turns("conv-budget")
    service.now = lambda: datetime(2026, 10, 15, 9, 0, tzinfo=UTC)
    yield db, service
    await db.close()


async def test_a_date_filter_finds_the_days_conversation_by_meaning(store) -> None:  # type: ignore[no-untyped-def]
    """Regression: a filtered search kept only those of the store-wide nearest turns that
    passed the filter, so "what did we discuss" on a day with a conversation found
    nothing (the assistant's dateRange, the CLI's --from/--to)."""
    _, service = store
    for query in ("what did we discuss", "meeting notes"):
        page = await service.search(query, date_from="2026-10-14", date_to="2026-10-14")
        assert page.method == "hybrid"
        assert [r.conversation_id for r in page.results] == ["conv-budget"], query
    # a channel filter the same way: the one web conversation
    page = await service.search("what did we discuss", channel="web")
    assert [r.conversation_id for r in page.results] == ["conv-budget"]


async def test_a_day_the_query_names_brings_its_turns_in(store) -> None:  # type: ignore[no-untyped-def]
    _, service = store
    unnamed = await service.search("what did we discuss")
    assert "conv-budget" not in [r.conversation_id for r in unnamed.results[:5]]
    for query in (
        "what did we discuss on 14 October 2026",
        "what did we discuss yesterday",  # the owner's today is 15 October
        # Regression: a day without a year brought no candidates (it is that day of
        # every year), and the day's conversation was not found: its latest one does
        "what did we discuss on 14 October",
        "what did we discuss on October 14th",
    ):
        page = await service.search(query)
        assert page.results[0].conversation_id == "conv-budget", query
    # with no dated candidates the date prior has nothing of that day to lift
    service.config.search.date_candidates = 0
    page = await service.search("what did we discuss yesterday")
    assert "conv-budget" not in [r.conversation_id for r in page.results[:5]]


async def test_the_pool_is_a_range_of_the_time_index_and_bounded(store) -> None:  # type: ignore[no-untyped-def]
    db, service = store
    day = dated_filters([(datetime(2026, 10, 14).date(),) * 2], Filters(), service.zone)

    def _read(conn):  # type: ignore[no-untyped-def]
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM turns t WHERE t.timestamp >= ? AND t.timestamp <= ?",
            ("2026-10-14", "2026-10-14~"),
        ).fetchall()
        return (
            plan,
            turn_pool(conn, day[0], conversations=True),
            turn_pool(conn, Filters(channel="telegram"), 79),
        )

    plan, pool, over = await db.run(_read, write=False)
    assert "turns_by_time" in " ".join(str(row) for row in plan)
    assert pool is not None and pool.conversations == {"conv-budget"} and len(pool.turns) == 2
    assert over is None  # 80 telegram turns over a cap of 79: the store-wide shortlist

    def _statements(conn, filters: Filters, cap: int):  # type: ignore[no-untyped-def]
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            return turn_pool(conn, filters, cap), seen
        finally:
            conn.set_trace_callback(None)

    # a channel over the cap is known from its conversations' turn numbers: its turns
    # are not read (they were, cap + 1 of them, on every search filtered by it)
    pool, seen = await db.run(
        lambda c: _statements(c, Filters(channel="telegram"), 79), write=False
    )
    assert pool is None and not any("FROM turns" in sql for sql in seen)
    pool, seen = await db.run(lambda c: _statements(c, Filters(channel="web"), 79), write=False)
    assert pool is not None and len(pool.turns) == 2 and any("FROM turns" in q for q in seen)
    # no filter, one conversation, dates in every year, a year: no pool
    assert await db.run(lambda c: turn_pool(c, Filters()), write=False) is None
    only = Filters(channel="web", conversation_id="conv-budget")
    assert await db.run(lambda c: turn_pool(c, only), write=False) is None
    from bot.named_dates import query_dates

    assert dated_filters(query_dates("in June"), Filters(), service.zone) == []
    # with the owner's today, a day or month without a year is its latest occurrence
    today = datetime(2026, 10, 15).date()
    (june,) = dated_filters(query_dates("in June"), Filters(), ZoneInfo("UTC"), today)
    assert (june.date_from, june.date_to) == (
        "2026-06-01T00:00:00.000Z",
        "2026-06-30T23:59:59.999Z",
    )
    (dec,) = dated_filters(query_dates("on 24 December"), Filters(), ZoneInfo("UTC"), today)
    assert dec.date_from is not None and dec.date_from.startswith("2025-12-24")
    assert dated_filters(query_dates("in 2026"), Filters(), service.zone) == []
    # an explicit date filter wins over the words
    assert dated_filters(query_dates("on 3 May 2026"), Filters(date_from="2026-01-01"), None) == []


async def test_over_the_cap_a_filtered_search_still_answers(
    store,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, service = store
    monkeypatch.setattr("bot.search.pool.POOL_CAP", 1)
    page = await service.search("budget review", date_from="2026-10-14", date_to="2026-10-14")
    assert [r.conversation_id for r in page.results] == ["conv-budget"]


async def test_a_keyword_only_search_lists_the_conversations_of_the_days_it_names(
    tmp_path: Path,
) -> None:
    # Regression: without an embedding model there are no nearest turns of a named day
    # to add, and "what did we discuss yesterday?" found nothing of yesterday, whose
    # conversations shared no word with it (the offline brain: "Nothing related").
    db = await open_index(tmp_path / "conversations.db")
    budget = [("user", "The budget review went well")]
    await add_conversation(db, "conv-a", budget, day="2026-10-14")
    plumber = [("user", "The plumber fixed the sink"), ("assistant", "Good to hear.")]
    await add_conversation(db, "conv-b", plumber, day="2026-10-14", channel="telegram")
    await add_conversation(db, "conv-c", [("user", "Roses need pruning")], day="2026-10-02")
    service = SearchService(AppConfig(data_dir=tmp_path), db)  # no model: keyword only
    service.now = lambda: datetime(2026, 10, 15, 9, 0, tzinfo=UTC)
    for query in (
        "what did we discuss yesterday",
        "what did we discuss on 14 October 2026",
        "what did we discuss on 14 October",
    ):
        page = await service.search(query)
        assert page.method == "keyword" and page.match == "date", query
        assert sorted(r.conversation_id for r in page.results) == ["conv-a", "conv-b"], query
        assert all(r.match == "date" and r.matched_turns == [1] for r in page.results)
    # the words still rank first; the day's other conversation follows them
    page = await service.search("budget yesterday")
    assert [(r.conversation_id, r.match) for r in page.results] == [
        ("conv-a", "words"),
        ("conv-b", "date"),
    ]
    # filters still apply, and a query naming no day finds only its words
    page = await service.search("what did we discuss yesterday", channel="telegram")
    assert [r.conversation_id for r in page.results] == ["conv-b"]
    assert [r.conversation_id for r in (await service.search("budget")).results] == ["conv-a"]
    assert not (await service.search("what did we discuss")).results
    # no dated candidates configured: as before
    service.config.search.date_candidates = 0
    assert not (await service.search("what did we discuss yesterday")).results
    await db.close()


async def test_the_pool_reads_the_same_turns_in_one_row_without_a_substr_per_turn(
    tmp_path: Path,
) -> None:
    # Regression (latency, session 17): a dated query cost 10-12 ms more than an undated
    # one, most of it here: a month's 16,000 turn ids came back as a Python row each, and
    # every turn of the range was also compared by substr(). The pool is now one row
    # (group_concat) bounded by the index alone: the same turns, in the same order (it
    # decides ties at the shortlist's cut).
    db = await open_index(tmp_path / "conversations.db")
    try:
        stamps = [
            "2026-10-13T23:59:59.999Z",
            "2026-10-14T00:00:00Z",
            "2026-10-14T12:00:00+00:00",
            "2026-10-14T23:59:59.999Z",
            "2026-10-14T23:59:59.999+00:00",
            "2026-10-14",
            "2026-10-15T00:00:00Z",
        ]
        for i, stamp in enumerate(stamps):
            await add_conversation(db, f"conv-{i}", [("user", f"turn {i}")], at=stamp)
        cases = [
            Filters(date_from="2026-10-14", date_to="2026-10-14"),
            Filters(date_to="2026-10-14T23:59:59.999Z"),
            Filters(channel="web", date_from="2026-10-14T00:00:00Z", date_to="2026-10-14T12"),
        ]

        def _read(conn, filters: Filters):  # type: ignore[no-untyped-def]
            where, params = filters.sql("t")  # the filter's own comparison
            join = " JOIN conversations c ON c.id = t.conversation_id" if filters.channel else ""
            expected = [
                r[0] for r in conn.execute(f"SELECT t.id FROM turns t{join} WHERE {where}", params)
            ]
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            try:
                pool = turn_pool(conn, filters)
            finally:
                conn.set_trace_callback(None)
            return expected, pool, seen

        for filters in cases:
            expected, pool, seen = await db.run(lambda c, f=filters: _read(c, f), write=False)
            assert pool is not None and [int(t) for t in pool.turns] == expected, filters
            read = [q for q in seen if "FROM turns" in q]
            assert read and not any("substr(" in q for q in read)
            assert all("group_concat" in q for q in read)
    finally:
        await db.close()
