"""Keyword-only search reads the conversations' notes (``notes_fts``, migration 10).

Without an embedding model the notes were read by nothing: a conversation whose words
are only in its notes (its turns compacted, or the notes naming what the turns only
circled around) was not found by keyword.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.db import apply_migrations, connect_sync
from bot.extractive import HEADER
from bot.fts_text import fts_content
from bot.index import index_notes
from bot.schema import INDEX_MIGRATIONS
from bot.schema_notes import EXTRACTIVE_HEADER, notes_text
from bot.services import Services, open_services
from tests.conftest import make_config, shutdown_services
from tests.recall_helpers import add_conversation, open_index

KAYAK_NOTES = (
    f"{HEADER}\nParticipants: user, assistant.\n"
    "Key points: the kayak trip to Lake Tahoe is booked for June."
)


@pytest.fixture
async def services(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = await open_services(make_config(tmp_path))
    yield opened
    await shutdown_services(opened)


async def _conversation(services: Services, text: str, notes: str | None = None) -> str:
    rec = await services.conversations.create("web")
    await services.conversations.append_turn(rec.id, "user", text)
    if notes is not None:
        await services.conversations.set_abbreviation(rec.id, notes)
    return rec.id


async def _found(services: Services, query: str) -> list[str]:
    page = await services.search.search(query)
    assert page.method == "keyword"
    return [r.conversation_id for r in page.results]


async def test_a_word_only_in_the_notes_finds_the_conversation(services: Services) -> None:
    conv = await _conversation(services, "we talked about the summer plans", KAYAK_NOTES)
    await _conversation(services, "the dentist appointment is on Tuesday")
    page = await services.search.search("tahoe kayak")
    assert page.method == "keyword"
    assert [r.conversation_id for r in page.results] == [conv]
    found = page.results[0]
    assert found.matched_turns == []  # no turn holds the words: the notes do
    assert "Tahoe" in found.snippet
    assert found.abbreviation == KAYAK_NOTES
    assert page.total == 1


async def test_replaced_notes_no_longer_match_their_old_words(services: Services) -> None:
    conv = await _conversation(services, "we talked about the summer plans", KAYAK_NOTES)
    await services.conversations.set_abbreviation(conv, "Key points: a canoe on Lake Garda.")
    assert await _found(services, "tahoe") == []
    assert await _found(services, "garda") == [conv]


async def test_the_notes_label_line_is_not_searched(services: Services) -> None:
    # every offline note starts with it: "notes" or "model" would find them all
    await _conversation(services, "summer plans", KAYAK_NOTES)
    assert EXTRACTIVE_HEADER == HEADER
    assert await _found(services, "extractive notes language model") == []


async def test_words_in_a_turn_and_in_notes_both_list(services: Services) -> None:
    in_turn = await _conversation(services, "the kayak needs a new paddle")
    in_notes = await _conversation(services, "summer plans", KAYAK_NOTES)
    assert set(await _found(services, "kayak")) == {in_turn, in_notes}


async def test_the_weakest_note_match_is_still_listed(services: Services) -> None:
    # Two conversations found only by their notes, one matching both words and one only
    # the rarer: min-max scaling (as for the vectors' cosines) gave the weaker 0, which
    # dropped it from the list.
    both = await _conversation(services, "plans", "Key points: kayak rental at Tahoe.")
    one = await _conversation(services, "plans", "Key points: a hike near Tahoe.")
    await _conversation(services, "plans", "Key points: the dentist on Tuesday.")
    assert await _found(services, "kayak tahoe") == [both, one]


async def test_notes_in_languages_written_without_spaces(services: Services) -> None:
    ja = await _conversation(services, "plans", "要点: 東京タワーに行った")
    th = await _conversation(services, "plans", "สรุป: จองโต๊ะร้านอาหารสยาม")
    assert await _found(services, "東京") == [ja]
    assert await _found(services, "ร้านอาหาร") == [th]


@pytest.mark.parametrize(
    "query",
    [
        'tahoe" OR kayak',
        "tahoe*",
        "NEAR(tahoe kayak)",
        "tahoe AND -kayak",
        "text:tahoe",
        "(tahoe)",
        "^tahoe",
        "tahoe 🚣",
    ],
)
async def test_fts_syntax_in_the_query_never_errors(services: Services, query: str) -> None:
    conv = await _conversation(services, "summer plans", KAYAK_NOTES)
    assert await _found(services, query) == [conv]


async def test_filters_apply_to_conversations_found_by_their_notes(services: Services) -> None:
    conv = await _conversation(services, "summer plans", KAYAK_NOTES)
    other = await _conversation(services, "summer plans", KAYAK_NOTES)
    search = services.search
    only = await search.search("tahoe", conversation_id=conv)
    assert [r.conversation_id for r in only.results] == [conv]
    assert (await search.search("tahoe", channel="telegram")).results == []
    assert (await search.search("tahoe", date_to="2001-01-01")).results == []
    assert {r.conversation_id for r in (await search.search("tahoe")).results} == {conv, other}


async def test_a_rebuilt_index_has_the_notes(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        conv = await _conversation(services, "summer plans", KAYAK_NOTES)
    finally:
        await shutdown_services(services)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.index_path}{suffix}").unlink(missing_ok=True)
    services = await open_services(config)  # recovery rebuilds it from the transcripts
    try:
        assert await _found(services, "tahoe") == [conv]
    finally:
        await shutdown_services(services)


async def test_index_notes_follows_writes_and_deletes(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "conversations.db")
    try:
        await add_conversation(db, "conv-a", [("user", "summer plans")])

        def match(word: str) -> list[str]:
            def read(conn):  # type: ignore[no-untyped-def]
                rows = conn.execute(
                    "SELECT n.conversation_id FROM notes_fts JOIN notes n "
                    "ON n.id = notes_fts.rowid WHERE notes_fts MATCH ?",
                    (f'"{word}"',),
                )
                return [r[0] for r in rows]

            return read  # type: ignore[no-any-return]

        await db.run(lambda c: index_notes(c, "conv-a", "a kayak on Tahoe"))
        assert await db.run(match("kayaks"), write=False) == ["conv-a"]  # porter stems
        await db.run(lambda c: index_notes(c, "conv-a", "a kayak on Tahoe"))  # unchanged
        await db.run(lambda c: index_notes(c, "conv-a", None))  # notes gone
        assert await db.run(match("kayak"), write=False) == []
        await db.run(lambda c: index_notes(c, "conv-a", "a canoe on Garda"))
        await db.run(lambda c: c.execute("DELETE FROM conversations WHERE id = 'conv-a'"))
        assert await db.run(match("canoe"), write=False) == []  # cascade + trigger
        await db.run(
            lambda c: c.execute("INSERT INTO notes_fts (notes_fts) VALUES ('integrity-check')")
        )
    finally:
        await db.close()


def test_migration_10_backfills_the_notes_of_an_existing_store(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:9]) == 9
        notes = {
            "conv-en": KAYAK_NOTES,
            "conv-ja": "要点: 東京タワーに行った",
            "conv-none": None,
            "conv-empty": "",
        }
        for conv, text in notes.items():
            conn.execute(
                "INSERT INTO conversations (id, channel, created, updated, abbreviation) "
                "VALUES (?, 'web', 't', 't', ?)",
                (conv, text),
            )
        conn.commit()
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)

        def match(expression: str) -> list[str]:
            rows = conn.execute(
                "SELECT n.conversation_id FROM notes_fts JOIN notes n ON n.id = notes_fts.rowid "
                "WHERE notes_fts MATCH ? ORDER BY n.conversation_id",
                (expression,),
            )
            return [r[0] for r in rows]

        assert match('"tahoe"') == ["conv-en"]
        assert match('"東 京"') == ["conv-ja"]
        assert match('"extractive"') == []
        stored = dict(conn.execute("SELECT conversation_id, text FROM notes").fetchall())
        assert stored == {
            "conv-en": notes_text(KAYAK_NOTES),
            "conv-ja": fts_content("要点: 東京タワーに行った"),
        }
        conn.execute("INSERT INTO notes_fts (notes_fts) VALUES ('integrity-check')")
    finally:
        conn.close()
