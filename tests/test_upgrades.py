"""Upgrading a data directory made by an older my-agent, and refusing one from a newer
version (bot/sqlite_conn.py ``apply_migrations``, docs/operations.md "Upgrades")."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.db import MigrationFailed, SchemaTooNew, apply_migrations, connect_sync
from bot.ftsmerge import open_index_database
from bot.index_rescue import is_storage_refusal
from bot.schema import INDEX_MIGRATIONS, STATE_MIGRATIONS
from bot.services import DatabaseOpenError, open_services
from tests.conftest import make_config, shutdown_services
from tests.sqlite_driver import sqlite3
from tests.support import fill_disk, mount_tmpfs

_TURNS = [
    ("conv-a", 1, "user", "when is the dentist appointment", "2025-01-02T10:00:00Z"),
    ("conv-a", 2, "assistant", "Tuesday at nine", "2025-01-02T10:00:05Z"),
    ("conv-b", 1, "user", "東京の天気はどうですか", "2025-02-03T08:00:00Z"),
    ("conv-b", 2, "assistant", "晴れです", "2025-02-03T08:00:04Z"),
]


def _fill_index(conn: Any) -> None:
    """Rows as the code of every version wrote them (their columns exist since v1)."""
    conn.execute("BEGIN")
    for conv, channel in (("conv-a", "web"), ("conv-b", "telegram")):
        conn.execute(
            "INSERT INTO conversations (id, channel, title, created, updated, turn_count, "
            "identity_key) VALUES (?, ?, ?, 't0', 't1', 2, ?)",
            (conv, channel, f"title {conv}", f"{channel}:1"),
        )
    for number, (conv, turn, role, content, stamp) in enumerate(_TURNS, start=1):
        conn.execute(
            "INSERT INTO turns (id, conversation_id, turn_number, role, content, timestamp) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (number, conv, turn, role, content, stamp),
        )
        conn.execute(
            "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
            "VALUES (?, ?, ?, ?, ?)",
            (number, content, conv, turn, stamp),
        )
    conn.execute("INSERT INTO message_refs VALUES ('telegram', '42', 'conv-b', 'in')")
    conn.execute(
        "INSERT INTO external_parties (id, channel, party_key, tier, created, updated) "
        "VALUES ('p1', 'email', 'bob@example.com', 'known', 't0', 't1')"
    )
    conn.execute(
        "INSERT INTO external_messages (party_id, direction, content, timestamp) "
        "VALUES ('p1', 'in', 'invoice attached', 't1')"
    )
    conn.execute("COMMIT")


def _contents(conn: Any) -> dict[str, list[Any]]:
    return {
        "conversations": conn.execute(
            "SELECT id, channel, title, turn_count, identity_key FROM conversations ORDER BY id"
        ).fetchall(),
        "turns": conn.execute(
            "SELECT id, conversation_id, turn_number, role, content, timestamp FROM turns "
            "ORDER BY id"
        ).fetchall(),
        "refs": conn.execute("SELECT * FROM message_refs").fetchall(),
        "parties": conn.execute(
            "SELECT id, channel, party_key, tier FROM external_parties"
        ).fetchall(),
        "external": conn.execute("SELECT party_id, content FROM external_messages").fetchall(),
    }


def _schema(conn: Any) -> set[tuple[str, str]]:
    return {
        (kind, name)
        for kind, name in conn.execute("SELECT type, name FROM sqlite_master")
        if not name.startswith("sqlite_")
    }


@pytest.mark.parametrize("old", range(1, len(INDEX_MIGRATIONS)))
def test_an_index_of_every_older_version_upgrades_and_keeps_its_rows(
    tmp_path: Path, old: int
) -> None:
    fresh = connect_sync(tmp_path / "fresh.db")
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        apply_migrations(fresh, INDEX_MIGRATIONS)
        assert apply_migrations(conn, INDEX_MIGRATIONS[:old]) == old
        _fill_index(conn)
        before = _contents(conn)
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        assert _contents(conn) == before
        assert _schema(conn) == _schema(fresh)
        conn.execute("INSERT INTO turns_fts (turns_fts) VALUES ('integrity-check')")
        found = conn.execute(
            "SELECT rowid FROM turns_fts WHERE turns_fts MATCH 'dentist'"
        ).fetchall()
        assert found == [(1,)]
    finally:
        conn.close()
        fresh.close()


@pytest.mark.parametrize("old", range(1, len(STATE_MIGRATIONS)))
def test_a_state_db_of_every_older_version_keeps_its_outbox(tmp_path: Path, old: int) -> None:
    conn = connect_sync(tmp_path / "state.db")
    try:
        apply_migrations(conn, STATE_MIGRATIONS[:old])
        conn.execute(
            "INSERT INTO outbox (channel, payload, dedup_key, created) "
            "VALUES ('telegram', '{}', 'conv-a:2:reply', 't0')"
        )
        conn.execute("INSERT INTO channel_cursors VALUES ('telegram', 'offset', '7', 't0')")
        before = conn.execute("SELECT * FROM outbox").fetchall()
        assert apply_migrations(conn, STATE_MIGRATIONS) == len(STATE_MIGRATIONS)
        assert conn.execute("SELECT * FROM outbox").fetchall() == before
        assert conn.execute("SELECT value FROM channel_cursors").fetchall() == [("7",)]
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["conversations.db", "state.db"])
async def test_a_store_from_a_newer_version_is_refused_untouched(tmp_path: Path, name: str) -> None:
    # Regression: a store written by a newer my-agent (a downgrade) opened without a
    # word; the older code then wrote rows the newer schema does not expect.
    config = make_config(tmp_path)
    services = await open_services(config, download_models=False)
    rec = await services.conversations.create("web")
    await services.conversations.append_turn(rec.id, "user", "kept as it was")
    await shutdown_services(services)
    path = config.index_path if name == "conversations.db" else config.state_path
    conn = sqlite3.connect(path)
    known = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.execute(f"PRAGMA user_version={known + 1}")
    conn.close()
    digest = _digest(path)
    with pytest.raises(DatabaseOpenError) as raised:
        await open_services(config, download_models=False)
    message = str(raised.value)
    assert f"{path} has schema version {known + 1}" in message
    assert f"newer than this my-agent knows ({known})" in message
    assert _digest(path) == digest
    assert path.exists()  # not set aside as if it were damaged
    # the index is derived: it can be rebuilt by this version; state.db cannot
    assert ("my-agent reindex" in message) == (name == "conversations.db")


def test_apply_migrations_refuses_a_newer_version(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "m.db")
    try:
        conn.execute("PRAGMA user_version=3")
        with pytest.raises(SchemaTooNew, match=r"schema version 3, newer than .* knows \(2\)"):
            apply_migrations(conn, [lambda c: None, lambda c: None])
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    finally:
        conn.close()


def test_a_failed_migration_names_itself_and_the_version_kept(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "m.db")
    try:

        def broken(c: Any) -> None:
            c.execute("CREATE TABLE b (x)")
            raise sqlite3.OperationalError("database or disk is full")

        with pytest.raises(MigrationFailed) as raised:
            apply_migrations(conn, [lambda c: c.execute("CREATE TABLE a (x)"), broken])
        message = str(raised.value)
        assert "migration 2 of" in message and "m.db" in message
        assert "database or disk is full" in message
        assert "stays at schema version 1" in message
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    finally:
        conn.close()


async def test_an_upgrade_on_a_full_disk_keeps_the_old_version_and_says_so(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path)
    mount_tmpfs(config.data_dir, "4m")
    try:
        config.index_path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect_sync(config.index_path)
        old = len(INDEX_MIGRATIONS) - 1
        apply_migrations(conn, INDEX_MIGRATIONS[:old])
        conn.execute("BEGIN")
        # enough non-Latin text that the last migration (CJK words) must write pages
        for n in range(400):
            conn.execute(
                "INSERT INTO conversations (id, channel, created, updated) "
                "VALUES (?, 'web', 't', 't')",
                (f"conv-{n}",),
            )
            conn.execute(
                "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp) "
                "VALUES (?, 1, 'user', ?, 't')",
                (f"conv-{n}", "東京の天気はどうですか" * 20),
            )
        conn.execute("INSERT INTO turns_fts (turns_fts) VALUES ('rebuild')")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # kept open: its -wal and -shm files stay, as beside a daemon that ran before
        filler = fill_disk(config.data_dir)
        # (open_services stops earlier here: its probe of the data directory fails)
        with pytest.raises(MigrationFailed) as raised:
            await open_index_database(config.index_path)
        message = str(raised.value)
        assert f"migration {old + 1} of {config.index_path} failed" in message
        assert f"stays at schema version {old}" in message
        assert is_storage_refusal(raised.value)  # so the daemon says: free space
        conn.close()
        filler.unlink()
        check = sqlite3.connect(config.index_path)
        assert check.execute("PRAGMA user_version").fetchone()[0] == old
        assert check.execute("SELECT count(*) FROM turns").fetchone()[0] == 400
        check.close()
    finally:
        subprocess.run(["umount", "-l", str(config.data_dir)], capture_output=True)


@pytest.mark.parametrize(
    "module",
    [
        "bot.schema_fts",
        "bot.schema_notes",
        "bot.schema_notices",
        "bot.schema_recall",
        "bot.schema_state",
        "bot.schema",
    ],
)
def test_each_migration_module_imports_on_its_own(module: str) -> None:
    # Regression: bot.schema_fts imported run_script from bot.schema, which imports
    # bot.schema_fts while it is being built: importing it first (a script, a test run
    # alone, a tool) failed with a circular import.
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def _sql(conn: Any) -> dict[str, Any]:
    """Every table's columns (name, type, not null, default, key) and every index's and
    trigger's SQL: the schema, whatever comments its CREATE statements held."""
    shape: dict[str, Any] = {}
    for kind, name, sql in conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql NOT NULL"
    ).fetchall():
        if kind == "table":
            shape[name] = [tuple(c[1:]) for c in conn.execute(f"PRAGMA table_info({name})")]
        else:
            shape[name] = " ".join(str(sql).split())
    return shape


def test_stores_of_commits_whose_migrations_changed_since_are_repaired(tmp_path: Path) -> None:
    # Regression (session 39, migration 14): a store of a commit of main whose migration
    # 12 had no titles.manual (c614e8a) failed every search and every index update of a
    # titled conversation; one from the days of the first migration 8 and 9 (3d9bb9d to
    # 613064d) kept two indexes since dropped and lacked the party-time ones; one from the
    # project's first days had vector tables without their vector columns.
    fresh = connect_sync(tmp_path / "fresh.db")
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        apply_migrations(fresh, INDEX_MIGRATIONS)
        assert apply_migrations(conn, INDEX_MIGRATIONS[:13]) == 13
        _fill_index(conn)
        conn.execute("UPDATE conversations SET manually_named = 1 WHERE id = 'conv-a'")
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO titles (conversation_id, text) "
            "SELECT id, title FROM conversations WHERE title IS NOT NULL"
        )
        # the shapes those commits left
        conn.execute("ALTER TABLE titles DROP COLUMN manual")
        conn.execute("DROP INDEX external_messages_time")
        conn.execute("DROP INDEX external_messages_party_time")
        conn.execute("CREATE INDEX turns_awaiting_reply ON turns(conversation_id)")
        conn.execute("CREATE INDEX turns_replies ON turns(turn_number)")
        conn.execute("DROP TABLE turn_vectors")
        conn.execute("CREATE TABLE turn_vectors (turn_id INTEGER PRIMARY KEY, window_last INT)")
        conn.execute("COMMIT")
        before = _contents(conn)
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        assert _contents(conn) == before
        assert _sql(conn) == _sql(fresh)  # today's schema, to the letter
        manual = conn.execute(
            "SELECT conversation_id, manual FROM titles ORDER BY conversation_id"
        ).fetchall()
        assert manual == [("conv-a", 1), ("conv-b", 0)]
        found = conn.execute(
            "SELECT rowid FROM titles_fts WHERE titles_fts MATCH 'title'"
        ).fetchall()
        assert len(found) == 2
    finally:
        conn.close()
        fresh.close()


def test_two_processes_migrating_one_old_store_at_once_both_open_it(tmp_path: Path) -> None:
    # Regression (session 39): the schema version was read once, before the migrations'
    # transactions; a second process (the daemon and a `search` started together)
    # applied one again after the first had ("table titles already exists") and exited
    # 74, naming the wrong version.
    import logging

    path = tmp_path / "conversations.db"
    setup = connect_sync(path)
    apply_migrations(setup, INDEX_MIGRATIONS[:11])
    setup.close()
    other = connect_sync(path)
    first = connect_sync(path)

    class Race(logging.Handler):
        fired = False

        def emit(self, record: logging.LogRecord) -> None:
            if "migrating to" in record.getMessage() and not self.fired:
                self.fired = True  # the other process migrates between our read and BEGIN
                apply_migrations(other, INDEX_MIGRATIONS)

    logger = logging.getLogger("my_agent.db")
    race, level = Race(), logger.level
    logger.addHandler(race)
    logger.setLevel(logging.INFO)
    try:
        assert apply_migrations(first, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        assert race.fired
    finally:
        logger.removeHandler(race)
        logger.setLevel(level)
        first.close()
        other.close()
