"""The SQLite index (seed 000 "Index"): schema, pragmas, numbered migrations, FTS5 with
porter stemming, sqlite-vec tables or the FTS-only fallback, one pin per identity."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from bot.db import Database, MigrationFailed, apply_migrations, connect_sync, select_driver
from bot.schema import INDEX_MIGRATIONS, STATE_MIGRATIONS
from bot.search import SearchService
from bot.services import open_services
from tests.conftest import make_config, shutdown_services

SEED_COLUMNS = {
    "id",
    "channel",
    "title",
    "topics",
    "created",
    "updated",
    "turn_count",
    "participants",
    "abbreviation",
    "needs_abbreviation",
    "manually_named",
}


async def _pragma(db: Database, name: str) -> Any:
    row = await db.fetchone(f"PRAGMA {name}")
    assert row is not None
    return row[0]


async def test_schema_and_pragmas(services: Any) -> None:
    db = services.index_db
    columns = {r[1] for r in await db.fetchall("PRAGMA table_info(conversations)")}
    assert columns >= SEED_COLUMNS | {"identity_key", "pinned", "model", "channel_meta"}
    tables = {r[0] for r in await db.fetchall("SELECT name FROM sqlite_master")}
    assert {"turns", "turns_fts", "message_refs", "external_parties", "external_messages"} <= tables
    assert "escalations" in tables
    fts_sql = (await db.fetchone("SELECT sql FROM sqlite_master WHERE name = 'turns_fts'"))[0]
    assert "fts5" in fts_sql.lower() and "porter unicode61" in fts_sql
    for database in (db, services.state):
        assert await _pragma(database, "journal_mode") == "wal"
        assert await _pragma(database, "foreign_keys") == 1
        assert await _pragma(database, "busy_timeout") == 10000
    assert await _pragma(db, "user_version") == len(INDEX_MIGRATIONS)
    assert await _pragma(services.state, "user_version") == len(STATE_MIGRATIONS)


async def test_porter_stemming_and_unicode(services: Any) -> None:
    rec = await services.conversations.create("web")
    await services.conversations.append_turn(rec.id, "user", "The NAS runs hot")
    await services.conversations.append_turn(rec.id, "assistant", "Überprüfe die Lüfter")
    for query in ("running", "run", "RUNS", "uberprufe", "lüfter"):
        page = await services.search.search(query)
        assert [r.conversation_id for r in page.results] == [rec.id], query


async def test_vector_tables_follow_the_configured_dimension(tmp_path: Path) -> None:
    config = make_config(tmp_path, embedding={"enabled": False, "dimensions": 16})
    services = await open_services(config)
    try:
        assert services.index_db.vec_available, services.index_db.driver.reason
        rows = await services.index_db.fetchall(
            "SELECT name, sql FROM sqlite_master WHERE name IN ('abbreviations_vec', 'turns_vec')"
        )
        sql = dict(rows)
        assert set(sql) == {"abbreviations_vec", "turns_vec"}
        assert "vec0" in sql["abbreviations_vec"] and "FLOAT[16]" in sql["abbreviations_vec"]
        assert "FLOAT[16]" in sql["turns_vec"]
    finally:
        await shutdown_services(services)


def test_this_machine_loads_sqlite_vec() -> None:
    """SPEC.md: the standard module or pysqlite3 must load sqlite-vec on this machine kind."""
    driver = select_driver()
    assert driver.vec_available, driver.reason


async def test_fts_only_fallback_is_logged_and_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "my_agent.db")
    driver = select_driver(force="novec")
    assert driver.vec_available is False
    assert any("FTS only" in r.getMessage() for r in caplog.records)
    config = make_config(tmp_path)
    db = await Database.open(config.index_path, INDEX_MIGRATIONS, driver=driver)
    try:
        from bot.conversations import ConversationManager
        from bot.hooks import EventBus
        from bot.index import ConversationIndex
        from bot.transcript import TranscriptStore

        manager = ConversationManager(
            config, TranscriptStore(config.conversations_dir), ConversationIndex(db), EventBus()
        )
        rec = await manager.create("web")
        await manager.append_turn(rec.id, "user", "keyword search still works")
        search = SearchService(config, db)
        page = await search.search("keyword")
        assert [r.conversation_id for r in page.results] == [rec.id]
        names = {r[0] for r in await db.fetchall("SELECT name FROM sqlite_master")}
        assert "abbreviations_vec" not in names
    finally:
        await db.close()


def test_migrations_are_numbered_and_atomic(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "m.db")
    try:
        ran: list[int] = []

        def first(c: Any) -> None:
            ran.append(1)
            c.execute("CREATE TABLE a (x)")

        def broken(c: Any) -> None:
            ran.append(2)
            c.execute("CREATE TABLE b (x)")
            raise RuntimeError("migration 2 fails half-way")

        assert apply_migrations(conn, [first]) == 1
        with pytest.raises(MigrationFailed, match=r"migration 2 of .* stays at schema version 1"):
            apply_migrations(conn, [first, broken])
        assert ran == [1, 2]  # migration 1 not applied twice
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "a" in names and "b" not in names  # rolled back
        conn.execute("DROP TABLE IF EXISTS b")
        assert apply_migrations(conn, [first, lambda c: c.execute("CREATE TABLE b (x)")]) == 2
    finally:
        conn.close()


def test_a_new_database_is_created_in_one_line_and_an_upgrade_step_by_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a new file logged "schema version 0, migrating to 8" and then each of
    its eight steps, twelve INFO lines (with state.db) of a first start or a reindex."""
    path = tmp_path / "conversations.db"
    conn = connect_sync(path)
    try:
        with caplog.at_level(logging.INFO, logger="my_agent.db"):
            apply_migrations(conn, INDEX_MIGRATIONS[:3])
        assert [r.getMessage() for r in caplog.records] == [f"{path}: created (schema version 3)"]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="my_agent.db"):
            apply_migrations(conn, INDEX_MIGRATIONS[:5])
        said = [r.getMessage() for r in caplog.records]
        assert said[0] == f"{path}: schema version 3, migrating to 5"
        assert [m.split(" (")[0] for m in said[1:]] == [
            f"applied migration 4 of {path}",
            f"applied migration 5 of {path}",
        ]
    finally:
        conn.close()


async def test_reopening_keeps_the_schema_version(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    for _ in range(2):
        db = await Database.open(config.index_path, INDEX_MIGRATIONS)
        assert await _pragma(db, "user_version") == len(INDEX_MIGRATIONS)
        await db.close()


def test_migration_4_keeps_every_message_ref(tmp_path: Path) -> None:
    """v4 rebuilds ``message_refs`` without a rowid and drops two indexes: no row lost,
    lookups and the cascade from a deleted conversation still work."""
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:3]) == 3
        conn.execute(
            "INSERT INTO conversations (id, channel, created, updated) VALUES "
            "('conv-a', 'email', 't', 't'), ('conv-b', 'telegram', 't', 't')"
        )
        refs = [("email", f"<m{i}@x>", "conv-a", "in") for i in range(50)]
        refs += [("telegram", str(i), "conv-b", "out") for i in range(50)]
        conn.executemany("INSERT INTO message_refs VALUES (?, ?, ?, ?)", refs)
        conn.commit()
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        assert sorted(conn.execute("SELECT * FROM message_refs")) == sorted(refs)
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'message_refs'")
        assert "WITHOUT ROWID" in sql.fetchone()[0]
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert not {"message_refs_conversation", "conversations_channel"} & names
        assert "conversations_updated" in names
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT conversation_id FROM message_refs "
            "WHERE channel = 'email' AND ref = '<m7@x>'"
        ).fetchall()
        assert "PRIMARY KEY" in " ".join(str(row[-1]) for row in plan)
        conn.execute("DELETE FROM conversations WHERE id = 'conv-a'")  # the repair path
        left = conn.execute("SELECT DISTINCT conversation_id FROM message_refs").fetchall()
        assert left == [("conv-b",)]
        conn.commit()
    finally:
        conn.close()


async def test_one_pinned_conversation_per_identity(services: Any) -> None:
    first = await services.conversations.create("telegram", identity_key="telegram:1", pinned=True)
    second = await services.conversations.create("telegram", identity_key="telegram:1", pinned=True)
    other = await services.conversations.create("telegram", identity_key="telegram:2", pinned=True)
    assert (await services.conversations.pinned_for("telegram:1")).id == second.id
    assert (await services.conversations.pinned_for("telegram:2")).id == other.id
    row = await services.index_db.fetchone(
        "SELECT count(*) FROM conversations WHERE identity_key = 'telegram:1' AND pinned = 1"
    )
    assert row[0] == 1
    fresh = await services.index.get(first.id)
    assert fresh is not None and fresh.pinned is False


async def test_message_refs_map_messages_to_conversations(services: Any) -> None:
    rec = await services.conversations.create("email")
    await services.conversations.append_turn(
        rec.id, "user", "hello", channel="email", metadata={"messageId": "<m1@x>"}
    )
    await services.conversations.record_message_ref(rec.id, "email", "<reply1@us>", "out")
    assert await services.index.conversation_for_ref("email", "<m1@x>") == rec.id
    assert await services.index.conversation_for_ref("email", "<reply1@us>") == rec.id
    assert await services.index.conversation_for_ref("telegram", "<m1@x>") is None


async def test_a_shrunken_transcript_is_reindexed(tmp_path: Path) -> None:
    """If a transcript loses lines (restored from a backup), recovery re-indexes it and
    the external-content FTS index stays consistent."""
    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        rec = await services.conversations.create("web")
        for i in range(4):
            await services.conversations.append_turn(rec.id, "user", f"word{i} apricot")
    finally:
        await shutdown_services(services)
    path = config.conversations_dir / f"{rec.id}.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:3]))
    services = await open_services(config)
    try:
        fresh = await services.index.get(rec.id)
        # the lost turns' numbers stay taken (session 40): the next message is turn 5
        assert fresh is not None and fresh.turn_count == 4
        page = await services.search.search("apricot")
        assert sorted(page.results[0].matched_turns) == [1, 2]
        assert (await services.search.search("word3")).results == []
        await services.index_db.run(
            lambda c: c.execute(
                "INSERT INTO turns_fts(turns_fts, rank) VALUES ('integrity-check', 1)"
            )
        )
    finally:
        await shutdown_services(services)


async def test_the_pending_replies_are_the_unanswered_turns(services: Any) -> None:
    # Read at every start, by every command and by `my-agent status` (a scan of the
    # turns: partial indexes for it cost ingest a fifth more bytes written per message).
    from bot.recovery import PENDING_REPLIES

    conv = await services.conversations.create("web")
    await services.conversations.append_turn(conv.id, "user", "answered")
    await services.conversations.append_turn(conv.id, "assistant", "yes", turn_number=1)
    await services.conversations.append_turn(conv.id, "user", "waiting")
    rows = await services.index_db.fetchall(PENDING_REPLIES)
    assert [tuple(r) for r in rows] == [(conv.id, 2)]
