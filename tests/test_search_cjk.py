"""Search in languages written without spaces (Chinese, Japanese, Thai), Korean and
full-width forms (bot/fts_text.py, migration 8, bot/search/query.py).

``porter unicode61`` made a whole run of such characters one token: "東京" did not find
"東京タワーに行った" (docs/search.md "Languages written without spaces")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bot import cli
from bot.config.model import AppConfig
from bot.db import apply_migrations, connect_sync
from bot.fts_text import fts_content, run_phrases, searchable
from bot.schema import INDEX_MIGRATIONS
from bot.search import SearchService, fts_query
from bot.services import Services, open_services
from tests.conftest import make_config, owner_identities, raw_config, shutdown_services

TURNS = {
    "ja": "日本語のテキストを書きました",
    "tower": "東京タワーに行った",
    "zh": "我们明天去北京看长城",
    "ko": "서울에서 친구를 만났어",
    "th": "สวัสดีครับ ผมชื่อสมชาย",
    "latin": "The Tokyo trip was planned for spring",
    "width": "The locker code is ＡＢＣ１２３",
    "cat": "昨日は猫と遊んだ",
}


async def _fill(services: Services) -> dict[str, str]:
    ids = {}
    for key, text in TURNS.items():
        rec = await services.conversations.create("web")
        await services.conversations.append_turn(rec.id, "user", text)
        ids[key] = rec.id
    return ids


@pytest.fixture
async def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    services = await open_services(make_config(tmp_path))
    ids = await _fill(services)
    yield services, ids
    await shutdown_services(services)


async def _found(services: Services, ids: dict[str, str], query: str) -> list[str]:
    page = await services.search.search(query)
    names = {conv: key for key, conv in ids.items()}
    return [names.get(r.conversation_id, r.conversation_id) for r in page.results]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("日本語", ["ja"]),  # the brief's two examples
        ("東京", ["tower"]),
        ("タワー", ["tower"]),
        ("北京", ["zh"]),
        ("长城", ["zh"]),
        ("서울", ["ko"]),  # a Korean word without its particle
        ("친구", ["ko"]),
        ("สวัสดี", ["th"]),
        ("สมชาย", ["th"]),
        ("猫", ["cat"]),  # one character
    ],
)
async def test_a_word_is_found_inside_a_run_of_characters(
    store: tuple[Services, dict[str, str]], query: str, expected: list[str]
) -> None:
    services, ids = store
    page = await services.search.search(query)
    assert page.method == "keyword"
    assert await _found(services, ids, query) == expected


async def test_a_mixed_query_finds_both_scripts(store: tuple[Services, dict[str, str]]) -> None:
    services, ids = store
    assert set(await _found(services, ids, "Tokyo 東京 trip")) == {"tower", "latin"}
    # a single character next to an English word is not dropped as a stray letter
    assert set(await _found(services, ids, "猫 spring")) == {"cat", "latin"}


async def test_a_sentence_ranks_the_turn_sharing_most_of_it_first(
    store: tuple[Services, dict[str, str]],
) -> None:
    services, ids = store
    found = await _found(services, ids, "東京タワーへ行きたい")  # not verbatim in any turn
    assert found[0] == "tower"


async def test_full_width_letters_and_digits_match_their_ascii_forms(
    store: tuple[Services, dict[str, str]],
) -> None:
    services, ids = store
    assert await _found(services, ids, "abc123") == ["width"]
    assert await _found(services, ids, "ＡＢＣ１２３") == ["width"]
    assert fts_query("ＡＢＣ１２３") == '"abc123"'


@pytest.mark.parametrize(
    "text",
    ['"東京', "東京*", "NEAR(東京 北京)", "東京 AND 北京", "-東京", "東京:北京", "(「東京」)"],
)
async def test_fts_syntax_next_to_cjk_never_errors(
    store: tuple[Services, dict[str, str]], text: str
) -> None:
    services, ids = store
    assert "tower" in await _found(services, ids, text)


def test_english_queries_and_texts_are_unchanged() -> None:
    assert fts_query("deploy ERR-4521 staging") == (
        '"err-4521" OR "deploy" OR "err" OR "4521" OR "staging"'
    )
    assert fts_query("the and of") == '"the" OR "and" OR "of"'
    assert searchable("Plain English, with a café and ‘quotes’.") is None
    assert fts_content("東京 Tokyo") == " 東 京  Tokyo"
    assert run_phrases("東京タワー") == ["東 京", "京 タ", "タ ワ", "ワ ー"]


async def test_document_frequencies_keep_a_rare_character_and_never_empty_the_query(
    store: tuple[Services, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DocFreqs.selective drops phrases found in many turns; a CJK phrase is counted as
    the phrase, and a query whose every phrase is frequent keeps them all."""
    from bot.search import keyword

    services, ids = store
    monkeypatch.setattr(keyword, "FREQUENT_FLOOR", 1)
    monkeypatch.setattr(keyword, "FREQUENT_FRACTION", 0.2)  # 8 turns: frequent = in 2+
    for _ in range(3):  # "の" in many turns, "猫" in one
        rec = await services.conversations.create("web")
        await services.conversations.append_turn(rec.id, "user", "これは私の本です")
    services.search._freqs = keyword.DocFreqs()
    assert await _found(services, ids, "猫と") == ["cat"]  # "猫 と" is one phrase
    found = await _found(services, ids, "の 猫")  # "の" is dropped as frequent, not "猫"
    assert found == ["cat"]
    assert len((await services.search.search("の")).results) == 4  # only frequent: kept


async def test_migration_8_makes_existing_turns_searchable(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    conn = connect_sync(path)
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:7]) == 7
        conn.execute(
            "INSERT INTO conversations (id, channel, created, updated) "
            "VALUES ('c', 'web', 't', 't')"
        )
        texts = [(1, "東京タワーに行った"), (2, "plain English tower"), (3, "ＡＢＣ１２３")]
        for turn_id, content in texts:
            conn.execute(
                "INSERT INTO turns (id, conversation_id, turn_number, role, content, timestamp) "
                "VALUES (?, 'c', ?, 'user', ?, 't')",
                (turn_id, turn_id, content),
            )
            conn.execute(
                "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
                "VALUES (?, ?, 'c', ?, 't')",
                (turn_id, content, turn_id),
            )
        # a readout (never in turns_fts) in Japanese: not put in by the migration
        conn.execute(
            "INSERT INTO turns (id, conversation_id, turn_number, role, content, timestamp, "
            "recall) VALUES (4, 'c', 4, 'assistant', '東京の一覧', 't', 0)"
        )
        conn.commit()
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)

        def match(query: str) -> list[int]:
            sql = "SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? ORDER BY rowid"
            return [r[0] for r in conn.execute(sql, (fts_query(query),))]

        assert match("東京") == [1]
        assert match("tower") == [2]
        assert match("abc123") == [3]
        stored = conn.execute("SELECT id, fts_text FROM turns ORDER BY id").fetchall()
        assert stored == [
            (1, fts_content("東京タワーに行った")),
            (2, None),
            (3, "ABC123"),
            (4, fts_content("東京の一覧")),
        ]
        conn.execute("INSERT INTO turns_fts (turns_fts, rank) VALUES ('integrity-check', 1)")
        conn.commit()
    finally:
        conn.close()


async def test_recovery_and_reindex_index_the_same_text(tmp_path: Path) -> None:
    """Lines in the transcript but not in the index (a crash) are caught up with the
    derived text, a shrunken transcript's turns leave turns_fts with the text they were
    indexed under (a 'delete' with another text corrupts an external-content index), and
    ``my-agent reindex`` answers as before."""
    from bot.transcript import turn_line

    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        json.dumps(raw_config(tmp_path, owner={"identities": owner_identities()})),
        encoding="utf-8",
    )
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    services = await open_services(config)
    try:
        ids = await _fill(services)
        conv = ids["tower"]
        await services.store.append(conv, [turn_line("assistant", "大阪城も見ました", 1)])
    finally:
        await shutdown_services(services)
    services = await open_services(config)
    try:
        assert await _found(services, ids, "大阪") == ["tower"]  # caught up at start
        before = {q: await _found(services, ids, q) for q in ("東京", "北京", "서울", "abc123")}
    finally:
        await shutdown_services(services)
    path = config.conversations_dir / f"{conv}.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:2]))  # no reply
    services = await open_services(config)
    try:
        assert await _found(services, ids, "大阪") == []
        await services.index_db.run(
            lambda c: c.execute(
                "INSERT INTO turns_fts(turns_fts, rank) VALUES ('integrity-check', 1)"
            )
        )
    finally:
        await shutdown_services(services)
    assert await asyncio.to_thread(cli.main, ["--config", str(config_path), "reindex"]) == 0
    services = await open_services(config)
    try:
        after = {q: await _found(services, ids, q) for q in before}
        assert after == before
    finally:
        await shutdown_services(services)


async def test_hybrid_search_finds_cjk_words(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    from tests.recall_helpers import add_conversation, open_index

    db = await open_index(tmp_path / "conversations.db")
    service = SearchService(AppConfig(data_dir=tmp_path), db, embedder)
    try:
        assert await service.start()
        for key, text in TURNS.items():
            await add_conversation(db, f"conv-{key}", [("user", text)])
            assert service.vectors is not None
            await service.vectors.index_turns(f"conv-{key}")
        for query, key in (("東京", "tower"), ("日本語", "ja"), ("서울", "ko")):
            page = await service.search(query)
            assert page.method == "hybrid"
            assert page.results[0].conversation_id == f"conv-{key}", query
    finally:
        await db.close()


async def test_a_query_naming_a_participant_still_splits_its_cjk_words(tmp_path: Path) -> None:
    """Names leave the keyword query and the other words are searched alone
    (bot.search.service): those words go through the same phrases."""
    from tests.recall_helpers import add_conversation, open_index

    db = await open_index(tmp_path / "conversations.db")
    try:
        await add_conversation(db, "conv-tower", [("user", "東京タワーに行った")])
        await add_conversation(db, "conv-other", [("user", "大阪に行った, code ABC123")])
        service = SearchService(AppConfig(data_dir=tmp_path), db)
        page = await service.search("user 東京")
        assert [r.conversation_id for r in page.results] == ["conv-tower"]
        page = await service.search("user ＡＢＣ１２３")
        assert [r.conversation_id for r in page.results] == ["conv-other"]
    finally:
        await db.close()


def test_a_cjk_query_is_not_taken_for_an_identifier() -> None:
    """The learned ranker treats identifier queries apart (bot.search.learned); the
    phrases of a CJK run are not identifiers."""
    from bot.search.learned import has_identifier

    assert not has_identifier("東京タワー")
    assert has_identifier("東京 ERR-4521")
