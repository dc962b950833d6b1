"""Paging past the ranked candidates: every conversation the words match is reachable
(bot.search.tail)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.brain.tools import RecallTools
from bot.config.model import AppConfig
from bot.db import Database
from bot.search import SearchService
from tests.recall_helpers import add_conversation, open_index


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = await open_index(tmp_path / "conversations.db")
    yield database
    await database.close()


def _config(candidates: int) -> AppConfig:
    return AppConfig.model_validate({"search": {"candidates": candidates}})


async def _page_through(service: SearchService, query: str, limit: int, **filters: str):  # type: ignore[no-untyped-def]
    seen: list[str] = []
    scores: list[float] = []
    pages = []
    cursor = None
    while True:
        page = await service.search(query, limit=limit, cursor=cursor, **filters)
        pages.append(page)
        seen += [r.conversation_id for r in page.results]
        scores += [r.score for r in page.results]
        cursor = page.next_cursor
        if cursor is None or len(pages) > 50:
            return seen, scores, pages


async def test_paging_reaches_every_conversation_past_the_candidates(db: Database) -> None:
    # Regression: 30 conversations mention "invoice" (two turns each: 60 matching turns)
    # but the keyword stage reads 10; paging used to stop at the conversations of those
    # 10 turns, and ``total`` said that was all.
    for i in range(30):
        await add_conversation(
            db,
            f"conv-{i:02d}",
            [("user", f"invoice {i} " + "word " * i), ("assistant", f"the invoice {i} is paid")],
            channel="telegram" if i % 2 else "email",
        )
    await add_conversation(db, "conv-other", [("user", "nothing about it")])
    service = SearchService(_config(10), db)
    first = await service.search("invoice", limit=4)
    assert not first.total_exact and first.total < 30 and first.next_cursor
    seen, scores, pages = await _page_through(service, "invoice", 4)
    assert sorted(seen) == [f"conv-{i:02d}" for i in range(30)]  # each once, none lost
    assert scores == sorted(scores, reverse=True)  # the tail ranks below the ranking
    assert pages[-1].total == 30 and pages[-1].total_exact
    # The same with a filter: the tail honours it.
    seen, _, pages = await _page_through(service, "invoice", 5, channel="telegram")
    assert sorted(seen) == [f"conv-{i:02d}" for i in range(1, 30, 2)]
    assert pages[-1].total == 15 and pages[-1].total_exact


async def test_a_page_that_ends_the_matches_hands_out_no_cursor(db: Database) -> None:
    # Regression: 4 conversations say "kayak" in 3 turns each, more turns than the
    # keyword stage reads (10): a page of 4 took every ranked conversation and handed
    # out a cursor to the unread tail, whose page was empty ("no conversation matches
    # 'kayak'", exit 0, right after the 4 were listed).
    for i in range(4):
        turns = [("user", f"kayak trip {i} part {n}") for n in range(3)]
        await add_conversation(db, f"conv-{i}", turns)
    await add_conversation(db, "conv-other", [("user", "nothing about boats")])
    service = SearchService(_config(10), db)
    page = await service.search("kayak", limit=4)
    assert len(page.results) == 4 and page.next_cursor is None
    assert page.total == 4 and page.total_exact
    # one more conversation in the tail: the cursor leads to it
    await add_conversation(db, "conv-4", [("user", "kayak, once")])
    seen, _, pages = await _page_through(SearchService(_config(10), db), "kayak", 4)
    assert sorted(seen) == [f"conv-{i}" for i in range(5)] and all(p.results for p in pages)


async def test_an_unsaturated_search_is_exact_from_the_first_page(db: Database) -> None:
    for i in range(3):
        await add_conversation(db, f"conv-{i}", [("user", f"invoice {i}")])
    page = await SearchService(_config(10), db).search("invoice", limit=2)
    assert page.total == 3 and page.total_exact and page.next_cursor
    assert page.to_dict()["total_exact"] is True


async def test_the_recall_tool_says_when_its_total_is_a_lower_bound(db: Database) -> None:
    for i in range(12):
        words = "invoice receipt" if i < 2 else "invoice"
        await add_conversation(db, f"conv-{i:02d}", [("user", f"{words} {i}")])
    config = _config(5)
    tools = RecallTools(config, SimpleNamespace(search=SearchService(config, db)))
    out = await tools.search_conversations({"query": "invoice", "limit": 3})
    found = json.loads(out.split("\n", 2)[2].rsplit("\n</recalled_data>", 1)[0])
    assert found["totalMatches"] == 5 and found["totalIsLowerBound"] is True
    out = await tools.search_conversations({"query": "receipt", "limit": 3})
    assert '"totalMatches": 2' in out and "totalIsLowerBound" not in out


async def test_paging_reaches_conversations_found_only_by_their_notes(db: Database) -> None:
    # Regression: a keyword-only search ranks the best ``candidates`` notes; the tail
    # read turns only, so notes past them were never listed and ``total`` was exact.
    for i in range(12):
        notes = f"Key points: the receipt {i} was filed."
        await add_conversation(db, f"note-{i:02d}", [("user", "plans")], abbreviation=notes)
    await add_conversation(db, "turn-only", [("user", "the receipt is here")])
    await add_conversation(db, "neither", [("user", "plans")], abbreviation="Key points: none.")
    service = SearchService(_config(5), db)
    first = await service.search("receipt", limit=3)
    assert not first.total_exact and first.next_cursor
    seen, scores, pages = await _page_through(service, "receipt", 3)
    assert sorted(seen) == sorted([f"note-{i:02d}" for i in range(12)] + ["turn-only"])
    assert scores == sorted(scores, reverse=True)
    assert pages[-1].total == 13 and pages[-1].total_exact
    tail_result = next(r for p in pages[1:] for r in p.results if r.conversation_id != "turn-only")
    assert tail_result.matched_turns == [] and "receipt" in tail_result.snippet


async def test_the_tail_lists_notes_matches_after_cut_turns_with_filters(db: Database) -> None:
    # The turns' stage cut (12 matching turns, 5 read) and notes-only conversations that
    # rank below the notes read: all reached, the channel filter honoured for both.
    for i in range(12):
        await add_conversation(
            db, f"turn-{i:02d}", [("user", f"invoice {i}")], channel="telegram" if i % 2 else "web"
        )
    for i in range(8):
        await add_conversation(
            db,
            f"note-{i}",
            [("user", "plans")],
            channel="telegram" if i % 2 else "web",
            abbreviation=f"Key points: invoice {i} " + "filler " * i,
        )
    service = SearchService(_config(5), db)
    seen, _, pages = await _page_through(service, "invoice", 4)
    assert len(seen) == len(set(seen)) == 20 and pages[-1].total_exact
    seen, _, pages = await _page_through(service, "invoice", 4, channel="telegram")
    expected = [f"turn-{i:02d}" for i in range(1, 12, 2)] + [f"note-{i}" for i in range(1, 8, 2)]
    assert sorted(seen) == sorted(expected)
    assert pages[-1].total == 10 and pages[-1].total_exact


async def test_notes_cut_then_filtered_out_still_page_to_the_rest(db: Database) -> None:
    # The best notes all on another channel: the filter left none ranked, and the
    # listing ended empty although telegram conversations hold the word in their notes.
    for i in range(6):
        notes = f"Key points: the receipt {i} " + "filler " * (i + 5)
        await add_conversation(
            db, f"web-{i}", [("user", "plans")], abbreviation="Key points: receipt"
        )
        await add_conversation(
            db, f"tg-{i}", [("user", "plans")], channel="telegram", abbreviation=notes
        )
    seen, _, pages = await _page_through(
        SearchService(_config(3), db), "receipt", 4, channel="telegram"
    )
    assert sorted(seen) == [f"tg-{i}" for i in range(6)]
    assert pages[-1].total_exact


async def test_the_tail_reads_notes_with_the_rankings_date_filter(db: Database) -> None:
    # The tail's notes pass the filter the ranking's notes do (bot.search.pool.accepted):
    # a conversation's last activity inside the range.
    for day in range(1, 9):
        notes = "Key points: the receipt " + "filler " * day
        await add_conversation(
            db, f"day-{day}", [("user", "plans")], day=f"2026-01-0{day}", abbreviation=notes
        )
    service = SearchService(_config(2), db)
    seen, _, pages = await _page_through(
        service, "receipt", 2, date_from="2026-01-03", date_to="2026-01-06"
    )
    assert sorted(seen) == ["day-3", "day-4", "day-5", "day-6"]
    assert pages[-1].total == 4 and pages[-1].total_exact
