"""Search reads the conversations' titles (``titles_fts``, migration 12).

A title was shown with every result but never searched: a conversation the owner renamed
"Homelab storage saga" was not found by "homelab" when its turns said "NAS", and ranked
below one that said "homelab" once in passing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.model import AppConfig, SearchConfig
from bot.db import apply_migrations, connect_sync
from bot.embedding import EmbeddingService
from bot.index import index_title
from bot.schema import INDEX_MIGRATIONS
from bot.search import SearchService
from bot.search.query import fts_parts, or_terms
from bot.search.titles import share
from bot.services import Services, open_services
from tests.conftest import make_config, shutdown_services
from tests.recall_helpers import add_conversation, open_index

NAS_TURNS = [
    ("user", "The NAS in the cupboard keeps dropping a disk from the RAID array."),
    ("assistant", "Check the SMART data of that disk and reseat its cable."),
    ("user", "Ordered two new 8 TB drives to rebuild the pool."),
]
PASSING_TURNS = [
    ("user", "Dinner with Sam on Friday; he wants to see my homelab afterwards."),
    ("assistant", "Friday dinner with Sam is noted."),
]


@pytest.fixture
async def services(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = await open_services(make_config(tmp_path))
    yield opened
    await shutdown_services(opened)


async def _conversation(services: Services, text: str, title: str | None = None) -> str:
    rec = await services.conversations.create("web")
    await services.conversations.append_turn(rec.id, "user", text)
    if title is not None:
        await services.conversations.rename(rec.id, title)
    return rec.id


async def _found(services: Services, query: str, **filters: str) -> list[str]:
    page = await services.search.search(query, **filters)  # type: ignore[arg-type]
    assert page.method == "keyword"
    return [r.conversation_id for r in page.results]


async def test_a_renamed_conversation_is_found_by_its_title_first(
    tmp_path: Path, embedder: EmbeddingService
) -> None:
    db = await open_index(tmp_path / "conversations.db")
    try:
        service = SearchService(AppConfig(data_dir=tmp_path), db, embedder)
        assert await service.start()
        await add_conversation(db, "conv-nas", NAS_TURNS, title="Homelab storage saga", manual=True)
        await add_conversation(db, "conv-dinner", PASSING_TURNS, title="Dinner With Sam")
        await add_conversation(db, "conv-other", [("user", "Book the dentist for Tuesday.")])
        for conv in ("conv-nas", "conv-dinner", "conv-other"):
            assert service.vectors is not None
            await service.vectors.index_turns(conv)
        page = await service.search("homelab")
        assert page.method == "hybrid"
        assert page.match == "words"
        ids = [r.conversation_id for r in page.results]
        assert ids[:2] == ["conv-nas", "conv-dinner"]
        first = page.results[0]
        assert first.title == "Homelab storage saga"
        assert first.match == "words"  # its title holds the word, though no turn does
        # without the titles the conversation that said it once came first
        off = AppConfig(data_dir=tmp_path, search=SearchConfig(title_rank_weight=0))
        plain = SearchService(off, db, embedder)
        assert await plain.start()
        first_plain = (await plain.search("homelab")).results[0]
        assert first_plain.conversation_id == "conv-dinner"
    finally:
        await db.close()


async def test_the_namings_titles_count_only_when_configured(tmp_path: Path) -> None:
    # A title the naming gave is made of the conversation's own words: by default it
    # adds nothing (LoCoMo's sessions named offline lost session_recall@5 with it).
    for weight, found in ((0.0, False), (0.5, True)):
        config = make_config(tmp_path / str(weight), search={"auto_title_rank_weight": weight})
        services = await open_services(config)
        try:
            conv = await _conversation(services, "the disks keep failing")
            await services.conversations.rename(conv, "Homelab Disks", manual=False)
            assert await _found(services, "homelab") == ([conv] if found else [])
            await services.conversations.rename(conv, "Homelab Disks")  # the owner's now
            assert await _found(services, "homelab") == [conv]
        finally:
            await shutdown_services(services)


async def test_a_title_alone_lists_its_conversation(services: Services) -> None:
    conv = await _conversation(services, "the disks keep failing", "Homelab storage saga")
    await _conversation(services, "the dentist appointment is on Tuesday")
    page = await services.search.search("homelab")
    assert [r.conversation_id for r in page.results] == [conv]
    assert page.results[0].matched_turns == []  # no turn holds the word: the title does
    assert page.total == 1 and page.total_exact


async def test_a_result_says_it_was_found_by_its_title(
    services: Services,
) -> None:
    conv = await _conversation(services, "the disks keep failing", "Homelab storage saga")
    page = await services.search.search("homelab")
    [result] = page.results
    assert result.in_title and result.to_dict()["in_title"] is True
    assert result.found_in() == "its title"  # not "its notes": no notes were written
    assert result.conversation_id == conv


async def test_a_new_title_replaces_the_old_one(services: Services) -> None:
    conv = await _conversation(services, "the disks keep failing", "Homelab storage saga")
    await services.conversations.rename(conv, "Cupboard NAS")
    assert await _found(services, "homelab") == []
    assert await _found(services, "cupboard") == [conv]


async def test_the_weaker_title_match_ranks_below_the_stronger(services: Services) -> None:
    both = await _conversation(services, "notes", "Homelab storage saga")
    one = await _conversation(services, "notes", "Homelab network")
    assert await _found(services, "homelab storage") == [both, one]


async def test_titles_in_languages_written_without_spaces(services: Services) -> None:
    ja = await _conversation(services, "plans", "東京タワーの旅行")
    assert await _found(services, "東京") == [ja]


@pytest.mark.parametrize(
    "query", ['homelab" OR saga', "homelab*", "NEAR(homelab saga)", "text:homelab", "^homelab"]
)
async def test_fts_syntax_in_the_query_never_errors(services: Services, query: str) -> None:
    conv = await _conversation(services, "the disks keep failing", "Homelab storage saga")
    assert await _found(services, query) == [conv]


async def test_filters_apply_to_conversations_found_by_their_title(services: Services) -> None:
    conv = await _conversation(services, "the disks", "Homelab storage saga")
    other = await _conversation(services, "the disks", "Homelab network")
    assert await _found(services, "homelab", conversation_id=conv) == [conv]
    assert await _found(services, "homelab", channel="telegram") == []
    assert await _found(services, "homelab", date_to="2001-01-01") == []
    assert set(await _found(services, "homelab")) == {conv, other}


async def test_paging_past_the_ranked_titles_reaches_every_one(tmp_path: Path) -> None:
    # more titles hold the word than a source ranks (candidates): the tail lists the rest
    config = make_config(tmp_path, search={"candidates": 3})
    services = await open_services(config)
    try:
        convs = {await _conversation(services, f"note {n}", f"Homelab part {n}") for n in range(7)}
        seen: list[str] = []
        cursor = None
        while True:
            page = await services.search.search("homelab", limit=2, cursor=cursor)
            seen += [r.conversation_id for r in page.results]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert sorted(seen) == sorted(convs)
        assert page.total == 7 and page.total_exact
    finally:
        await shutdown_services(services)


async def test_no_title_weight_no_title_search(tmp_path: Path) -> None:
    services = await open_services(make_config(tmp_path, search={"title_rank_weight": 0}))
    try:
        await _conversation(services, "the disks keep failing", "Homelab storage saga")
        assert await _found(services, "homelab") == []
    finally:
        await shutdown_services(services)


async def test_a_rebuilt_index_has_the_titles(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        conv = await _conversation(services, "the disks keep failing", "Homelab storage saga")
    finally:
        await shutdown_services(services)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.index_path}{suffix}").unlink(missing_ok=True)
    services = await open_services(config)  # recovery rebuilds it from the transcripts
    try:
        assert await _found(services, "homelab") == [conv]
    finally:
        await shutdown_services(services)


async def test_index_title_follows_writes_and_deletes(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "conversations.db")
    try:
        await add_conversation(db, "conv-a", [("user", "summer plans")])

        def match(word: str):  # type: ignore[no-untyped-def]
            def read(conn):  # type: ignore[no-untyped-def]
                rows = conn.execute(
                    "SELECT n.conversation_id FROM titles_fts JOIN titles n "
                    "ON n.id = titles_fts.rowid WHERE titles_fts MATCH ?",
                    (f'"{word}"',),
                )
                return [r[0] for r in rows]

            return read

        await db.run(lambda c: index_title(c, "conv-a", "Kayak Trips", manual=True))
        assert await db.run(match("trip"), write=False) == ["conv-a"]  # porter stems
        await db.run(lambda c: index_title(c, "conv-a", "  "))  # a blank title is none
        assert await db.run(match("kayak"), write=False) == []
        await db.run(lambda c: index_title(c, "conv-a", "Canoe on Garda"))
        await db.run(lambda c: c.execute("DELETE FROM conversations WHERE id = 'conv-a'"))
        assert await db.run(match("canoe"), write=False) == []  # cascade + trigger
        await db.run(
            lambda c: c.execute("INSERT INTO titles_fts (titles_fts) VALUES ('integrity-check')")
        )
    finally:
        await db.close()


def test_migration_12_backfills_the_titles_of_an_existing_store(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:11]) == 11
        titles = {"conv-en": "Homelab Storage", "conv-ja": "東京タワー", "conv-none": None}
        for conv, title in titles.items():
            conn.execute(
                "INSERT INTO conversations (id, channel, created, updated, title, "
                "manually_named) VALUES (?, 'web', 't', 't', ?, ?)",
                (conv, title, int(conv == "conv-en")),
            )
        conn.commit()
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        rows = conn.execute(
            "SELECT n.conversation_id FROM titles_fts JOIN titles n ON n.id = titles_fts.rowid "
            "WHERE titles_fts MATCH ? ORDER BY 1",
            (or_terms(fts_parts("homelab 東京")),),
        ).fetchall()
        assert [r[0] for r in rows] == ["conv-en", "conv-ja"]
        manual = conn.execute("SELECT conversation_id FROM titles WHERE manual = 1").fetchall()
        assert manual == [("conv-en",)]
        conn.execute("INSERT INTO titles_fts (titles_fts) VALUES ('integrity-check')")
    finally:
        conn.close()


def test_share_counts_the_query_words_a_title_holds() -> None:
    assert share("Homelab Storage Saga", ["homelab", "storage"]) == 1.0
    assert share("Homelab Storage Saga", ["homelab", "power", "bill"]) == pytest.approx(1 / 3)
    assert share("Planning the Move", ["plans", "move"]) == 1.0  # singular, word start
    assert share("Art Supplies", ["start"]) == 1.0  # FTS5 matched it: at least one part
    assert share("Anything", []) == 0.0
