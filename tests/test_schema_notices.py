"""Migration 11 (bot/schema_notices.py): the group membership notices an index written
before session 31 holds are taken out of recall (keyword index, turn vectors); the same
words typed anywhere else stay searchable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database, apply_migrations, connect_sync
from bot.schema import INDEX_MIGRATIONS
from bot.schema_notices import V11_NOTICE_TEXTS, index_v11
from bot.search import SearchService
from bot.services import open_services
from bot.vectors import VectorIndex, window_text
from tests.conftest import make_config, shutdown_services
from tests.recall_helpers import add_conversation

JOINED, LEFT = V11_NOTICE_TEXTS
BEFORE = 10  # the schema version of an index written before this migration
GROUP_KEY = "telegram:group:-100123"


def _keyword_hits(conn: Any, words: str) -> list[int]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? ORDER BY rowid", (words,)
        )
    ]


def _integrity_check(conn: Any) -> None:
    conn.execute("INSERT INTO turns_fts (turns_fts, rank) VALUES ('integrity-check', 1)")


# (conversation, role, channel, awaits_reply, content): turns as the index writer of
# version 10 wrote them (every one recallable and in turns_fts). Only the first two are
# membership notices; each of the others differs from one by a single property (some
# never written so: they show that each property counts).
_ROWS = [
    ("group", "user", "telegram", 0, JOINED),
    ("group", "user", "telegram", 0, LEFT),
    ("group", "user", "telegram", 1, JOINED),  # a member answering the bot with the text
    ("group", "assistant", "telegram", 0, JOINED),
    ("group", "user", "web", 0, JOINED),  # the owner, continuing the group from the web
    ("group", "user", "telegram", 0, f"{JOINED} (joking)"),
    ("chat", "user", "telegram", 1, JOINED),  # the owner's 1:1 chat with the bot
    ("chat", "user", "telegram", 0, JOINED),
    ("mail", "user", "email", 1, JOINED),
    ("web", "user", "web", 1, LEFT),
]
# conversation -> (channel, identity_key), as bot/resolver.py keys them
_CONVERSATIONS = {
    "group": ("telegram", GROUP_KEY),
    "chat": ("telegram", "telegram:424242"),
    "mail": ("email", "email-thread:<a@example.com>"),
    "web": ("web", None),
}


def _fill(conn: Any) -> None:
    for conv, (channel, key) in _CONVERSATIONS.items():
        conn.execute(
            "INSERT INTO conversations (id, channel, created, updated, identity_key) "
            "VALUES (?, ?, 't', 't', ?)",
            (conv, channel, key),
        )
    for turn_id, (conv, role, channel, awaits, content) in enumerate(_ROWS, start=1):
        conn.execute(
            "INSERT INTO turns (id, conversation_id, turn_number, role, content, timestamp, "
            "channel, awaits_reply) VALUES (?, ?, ?, ?, ?, 't', ?, ?)",
            (turn_id, conv, turn_id, role, content, channel, awaits),
        )
        conn.execute(
            "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
            "VALUES (?, ?, ?, ?, 't')",
            (turn_id, content, conv, turn_id),
        )
    conn.commit()


def test_only_the_group_notices_leave_the_keyword_index(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:BEFORE]) == BEFORE
        _fill(conn)
        assert _keyword_hits(conn, "joined OR left") == list(range(1, len(_ROWS) + 1))
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        recall = [r[0] for r in conn.execute("SELECT recall FROM turns ORDER BY id")]
        assert recall == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
        assert _keyword_hits(conn, "joined OR left") == list(range(3, len(_ROWS) + 1))
        _integrity_check(conn)
        # Run again (a fresh database runs every migration, over rows the current
        # writer left out already): nothing to change.
        before = conn.total_changes
        index_v11(conn)
        assert conn.total_changes == before
        _integrity_check(conn)
    finally:
        conn.close()


def test_a_fresh_index_runs_the_migration_over_nothing(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        _integrity_check(conn)
        assert conn.execute("SELECT count(*) FROM turns").fetchone() == (0,)
    finally:
        conn.close()


async def _group_and_chat(db: Database, group: list[tuple[str, str]]) -> list[int]:
    """A group whose notices were written recallable (version 10) and a 1:1 chat where
    the owner typed a notice's text; returns the group's turn ids."""
    ids = await add_conversation(db, "conv-group", group, channel="telegram")
    await add_conversation(db, "conv-chat", [("user", JOINED)], channel="telegram")
    await db.execute(
        "UPDATE conversations SET identity_key = ? WHERE id = 'conv-group'", (GROUP_KEY,)
    )
    await db.execute("UPDATE conversations SET identity_key = 'telegram:7' WHERE id = 'conv-chat'")
    await db.execute(
        "UPDATE turns SET awaits_reply = 0 WHERE conversation_id = 'conv-group' "
        "AND content IN (?, ?)",
        V11_NOTICE_TEXTS,
    )
    return ids


async def _open_before(path: Path) -> Database:
    return await Database.open(path, INDEX_MIGRATIONS[:BEFORE])


async def test_who_joined_finds_the_typed_text_and_no_notice(tmp_path: Path) -> None:
    # Regression: an index written before session 31 kept the notices searchable until
    # `my-agent reindex`: "who joined?" found "[joined the group]" in every group.
    path = tmp_path / "conversations.db"
    db = await _open_before(path)
    group = [
        ("user", "the kayak trip is on saturday"),
        ("user", JOINED),
        ("user", "who brings the paddles for the kayak trip?"),
        ("user", LEFT),
    ]
    await _group_and_chat(db, group)
    await db.close()
    db = await Database.open(path, INDEX_MIGRATIONS)
    try:
        search = SearchService(AppConfig(), db)
        page = await search.search("who joined the group?")
        assert [r.conversation_id for r in page.results] == ["conv-chat"]
        page = await search.search("left")
        assert page.results == []
        page = await search.search("kayak")  # the group itself is still found
        assert [(r.conversation_id, r.matched_turns) for r in page.results] == [
            ("conv-group", [1, 3])
        ]
        await db.run(_integrity_check)
    finally:
        await db.close()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_windows_holding_a_notice_are_embedded_again_without_it(
    tmp_path: Path, embedder: Any
) -> None:
    """The vectors from the first notice on go; the rebuild at start embeds them again
    from the recallable turns (none for the notice itself, pruned from ``turns_vec``),
    and the history before keeps its vectors, unchanged."""
    config = AppConfig.model_validate({"embedding": {"turn_window": 2}})
    path = tmp_path / "conversations.db"
    db = await _open_before(path)
    texts = [
        "we rented two kayaks for the lake",
        "the paddles are in the garage",
        "saturday morning works for everyone",
        "bring sandwiches and sunscreen",
        JOINED,
        "count me in for the lake trip",
    ]
    ids = await _group_and_chat(db, [("user", text) for text in texts])
    # the vectors as that version wrote them: no text_hash yet (migration 16) nor
    # turns.forwarded (19), the columns lent for this code's writes and reads and dropped
    # again before the upgrade
    await db.execute("ALTER TABLE turn_vectors ADD COLUMN text_hash TEXT")
    await db.execute("ALTER TABLE turns ADD COLUMN forwarded TEXT")
    old = VectorIndex(config, db, embedder)
    assert await old.open()
    assert await old.index_turns("conv-group") == len(texts)
    assert await old.index_turns("conv-chat") == 1
    kept = await db.fetchall(
        "SELECT turn_id, vector FROM turn_vectors WHERE turn_id IN (?, ?)", tuple(ids[:2])
    )
    await db.execute("ALTER TABLE turn_vectors DROP COLUMN text_hash")
    await db.execute("ALTER TABLE turns DROP COLUMN forwarded")
    await db.close()

    db = await Database.open(path, INDEX_MIGRATIONS)
    try:
        # the windows ending at the notice or later (turns 3-6 with two neighbours a side)
        rows = await db.fetchall("SELECT turn_id FROM turn_vectors ORDER BY turn_id")
        chat = await db.fetchone("SELECT id FROM turns WHERE conversation_id = 'conv-chat'")
        assert [r[0] for r in rows] == [*ids[:2], chat[0]]
        vectors = VectorIndex(config, db, embedder)
        assert await vectors.open()
        done = await vectors.reindex_all()
        assert done["turns"] == 3  # turns 3, 4 and 6; none for the notice
        stored = dict(await db.fetchall("SELECT turn_id, vector FROM turn_vectors"))
        assert set(stored) == {*ids[:4], ids[5], chat[0]}
        assert {r[0]: r[1] for r in kept} == {i: stored[i] for i in ids[:2]}
        in_vec = {r[0] for r in await db.fetchall("SELECT rowid FROM turns_vec")}
        assert ids[4] not in in_vec and set(stored) <= in_vec
        # Turn 4's window reached the last turn with and without the notice: its record
        # (window_last) did not change, its text did.
        said = [t for t in texts if t != JOINED]
        without, with_notice = await embedder.embed(
            [window_text(said, 3, 2), window_text(texts, 3, 2)]
        )
        turn_4 = np.frombuffer(stored[ids[3]], dtype=np.float16).astype(np.float32)
        assert _cosine(turn_4, without) > 0.999 > _cosine(turn_4, with_notice)
    finally:
        await db.close()


async def _write_group_and_chat(services: Any) -> None:
    """Through the manager, as the Telegram channel records them (notices since session 30)."""
    manager = services.conversations
    group = await manager.create("telegram", identity_key=GROUP_KEY, pinned=True, conv_id="conv-g")
    said = [("Ann", "the kayak trip is on saturday", None), ("Bob", JOINED, "joined")]
    said += [("Bob", "who brings the paddles for the kayak trip?", None), ("Cy", LEFT, "left")]
    for sender, text, change in said:
        await manager.append_turn(
            group.id,
            "user",
            text,
            channel="telegram",
            sender=sender,
            metadata={"membership": change} if change else {},
            awaitReply=False,
        )
    chat = await manager.create(
        "telegram", identity_key="telegram:7", pinned=True, conv_id="conv-c"
    )
    await manager.append_turn(chat.id, "user", JOINED, channel="telegram", sender="owner")


def _as_written_before(path: Path) -> None:
    """The index as the version before session 31 wrote it: the notices recallable and
    in turns_fts, at schema version 10."""
    conn = connect_sync(path)
    try:
        rows = conn.execute(
            "SELECT id, content, conversation_id, turn_number, timestamp FROM turns "
            "WHERE recall = 0"
        ).fetchall()
        assert len(rows) == 2
        conn.execute("UPDATE turns SET recall = 1")
        conn.executemany(
            "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        # nor the tables of the migrations after it (12: the titles' keyword index; 13:
        # the failed notes' column; 15: the parties' costs; 16: the vectors' text hashes;
        # 17: when a party's message was written; 18: what an answer answers; 19: the
        # forwards)
        conn.execute("DROP TABLE titles_fts")
        conn.execute("DROP TABLE titles")
        conn.execute("ALTER TABLE conversations DROP COLUMN abbreviation_failed")
        for column in ("tokens_in", "tokens_out", "cost_total"):
            conn.execute(f"ALTER TABLE external_parties DROP COLUMN {column}")
        conn.execute("ALTER TABLE turn_vectors DROP COLUMN text_hash")
        conn.execute("ALTER TABLE external_messages DROP COLUMN sent_at")
        conn.execute("ALTER TABLE external_messages DROP COLUMN answers")
        conn.execute("ALTER TABLE turns DROP COLUMN forwarded")
        conn.execute(f"PRAGMA user_version = {BEFORE}")
        conn.commit()
    finally:
        conn.close()


async def _found(config: AppConfig, query: str) -> list[str]:
    services = await open_services(config)
    try:
        page = await services.search.search(query)
        await services.index_db.run(_integrity_check)
        return [r.conversation_id for r in page.results]
    finally:
        await shutdown_services(services)


async def test_a_start_migrates_and_a_reindex_keeps_the_notices_out(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        await _write_group_and_chat(services)
    finally:
        await shutdown_services(services)
    _as_written_before(config.index_path)
    assert await _found(config, "who left?") == []  # migrated by the start
    assert await _found(config, "who joined the group?") == ["conv-c"]
    for suffix in ("", "-wal", "-shm"):  # what `my-agent reindex` does first
        Path(f"{config.index_path}{suffix}").unlink(missing_ok=True)
    assert await _found(config, "who joined the group?") == ["conv-c"]
    assert await _found(config, "kayak") == ["conv-g"]
