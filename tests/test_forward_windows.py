"""An owner's forward is found by meaning too: its turn's embedded window holds it after
the owner's words, labelled (bot/forwards.py ``window_part``, ``turns.forwarded``), and
migration 19 (bot/schema_forwards.py) gives it to the turns indexed before. Before
session 42 only keyword search found a forwarded mail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bot.config.model import AppConfig, EmbeddingConfig
from bot.db import apply_migrations, connect_sync
from bot.embedding import EmbeddingService
from bot.forwards import FORWARD_IN_WINDOW, searchable_with, window_part
from bot.fts_text import fts_content
from bot.index_writes import apply_lines, conversation_meta, record_from_meta
from bot.schema import INDEX_MIGRATIONS
from bot.schema_forwards import index_v19
from bot.vectors import WINDOW_CHARS, VectorIndex
from tests.recall_helpers import open_index

DIMS = 8
NOTE = "What should I answer her?"
FORWARD = "---------- Forwarded message ---------\nFrom: Ana <ana@x.example>\n\nThe kayak rental"


class _Model:
    def embed(self, texts: list[str], batch_size: int = 32) -> Any:
        for _ in texts:
            yield np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)


class _Recording(EmbeddingService):
    """The real service around a stand-in model, recording every text embedded."""

    def __init__(self) -> None:
        super().__init__(EmbeddingConfig(dimensions=DIMS))
        self.texts: list[str] = []

    def _load(self) -> Any:
        return _Model()

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return await super().embed(texts)


def _turn(number: int, role: str, content: str, forwarded: str | None = None) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "turn",
        "role": role,
        "content": content,
        "turnNumber": number,
        "timestamp": f"2026-01-10T12:0{number}:00+00:00",
        "channel": "email",
    }
    if forwarded is not None:
        line["metadata"] = {"forwarded": {"text": forwarded, "from": "Ana <ana@x.example>"}}
    return line


async def _embedded(tmp_path: Path, forward: str) -> list[str]:
    """The texts the vector index embeds for a conversation: an owner's forward with
    their note, the reply, then the owner's next message."""
    db = await open_index(tmp_path / "c.db")
    rec = record_from_meta(conversation_meta("conv-f", "email", ["o@x.example"], created="t"))
    lines = [
        _turn(1, "user", NOTE, forward),
        _turn(1, "assistant", "Say yes."),
        _turn(2, "user", "Thanks"),
    ]
    await db.run(lambda c: apply_lines(c, rec, lines))
    embedder = _Recording()
    vectors = VectorIndex(AppConfig(), db, embedder)
    try:
        assert await vectors.open()
        assert await vectors.index_turns("conv-f") == 3
    finally:
        await db.close()
        embedder.close()
    return embedder.texts


async def test_a_forward_is_embedded_with_its_turn_after_a_label(tmp_path: Path) -> None:
    texts = await _embedded(tmp_path, FORWARD)
    own = f"{NOTE}\n{FORWARD_IN_WINDOW}\n{FORWARD}"
    assert texts[0] == f"{own}\nSay yes."  # the forward's own window: centre first
    assert texts[1].startswith("Say yes.") and own in texts[1]  # a neighbour's window too
    assert FORWARD not in texts[2]  # radius 1: turn 3's window reaches the reply only
    for text in texts:  # never read as the owner's words: always after the label
        assert "The kayak rental" not in text.split(FORWARD_IN_WINDOW)[0]


async def test_a_long_forward_keeps_the_window_bounded(tmp_path: Path) -> None:
    texts = await _embedded(tmp_path, FORWARD + " and more" * 1000)
    assert all(len(t) <= WINDOW_CHARS for t in texts)
    assert texts[0].startswith(f"{NOTE}\n{FORWARD_IN_WINDOW}\n{FORWARD}")
    # a neighbour's window leaves out a turn too long to fit, as any long turn today
    assert texts[1] == "Say yes."


def test_window_part() -> None:
    assert window_part("hello", None, 100) == "hello"
    assert window_part("hello", "Pay me", 100) == f"hello\n{FORWARD_IN_WINDOW}\nPay me"
    assert window_part("hello", "x" * 500, 100) == f"hello\n{FORWARD_IN_WINDOW}\n" + "x" * (
        100 - len(f"hello\n{FORWARD_IN_WINDOW}\n")
    )
    assert window_part("y" * 300, "x", 100) == "y" * 300  # the owner's words never cut here


BEFORE = 15  # the schema version of an index written in session 41


def test_migration_19_gives_the_forwards_indexed_before_to_their_windows(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:BEFORE]) == BEFORE
        rows = [
            # (conversation, role, content, fts_text as session 41's writer left it)
            ("fwd", "user", NOTE, searchable_with(NOTE, FORWARD)),
            ("fwd", "user", "Näin", searchable_with("Näin", "Mañana à Zürich")),
            ("plain", "user", "東京タワー", searchable_with("東京タワー", None)),
            ("plain", "user", "hello", None),
            ("plain", "assistant", "hello", "hello\n\nnot a forward of the owner"),
        ]
        for conv in ("fwd", "plain"):
            conn.execute(
                "INSERT INTO conversations (id, channel, created, updated) "
                "VALUES (?, 'email', 't', 't')",
                (conv,),
            )
        for turn_id, (conv, role, content, fts) in enumerate(rows, start=1):
            conn.execute(
                "INSERT INTO turns (id, conversation_id, turn_number, role, content, "
                "timestamp, fts_text) VALUES (?, ?, ?, ?, ?, 't', ?)",
                (turn_id, conv, turn_id, role, content, fts),
            )
            conn.execute(
                "INSERT INTO turn_vectors (turn_id, conversation_id, window_last, bits, vector)"
                " VALUES (?, ?, ?, x'00', x'00')",
                (turn_id, conv, turn_id),
            )
        conn.commit()
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        got = [r[0] for r in conn.execute("SELECT forwarded FROM turns ORDER BY id")]
        assert got == [FORWARD, "Mañana à Zürich", None, None, None]
        # the forwards' conversation is embedded again (at the daemon's start), no other
        kept = conn.execute("SELECT DISTINCT conversation_id FROM turn_vectors").fetchall()
        assert kept == [("plain",)]
        conn.execute("ALTER TABLE turns DROP COLUMN forwarded")
        index_v19(conn)  # the same rows again: the same texts
        assert [r[0] for r in conn.execute("SELECT forwarded FROM turns ORDER BY id")] == got
    finally:
        conn.close()


def test_migration_19_finds_a_forward_under_a_note_its_keyword_text_changes(
    tmp_path: Path,
) -> None:
    # Regression (session 42): migration 19 compared fts_text with the content itself, so
    # a note whose searchable form differs (NFKC rewrites "…" and a no-break space; the
    # words of Chinese or Japanese are spaced) hid its forward: the conversation kept its
    # vectors without the mail, and search by meaning never found it until a reindex.
    notes = [
        "Subject: Fwd: Sailing\n\nWas meinst du… soll ich zusagen?",
        "Qu'en penses-tu\u00a0?",
        "これ、どう返事すればいい",
        "ＯＫ?",
    ]
    forwards = [FORWARD, FORWARD, FORWARD, "東京タワーの予約"]
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:BEFORE]) == BEFORE
        for turn_id, (note, forward) in enumerate(zip(notes, forwards, strict=True), start=1):
            conv = f"conv-{turn_id}"
            conn.execute(
                "INSERT INTO conversations (id, channel, created, updated) "
                "VALUES (?, 'email', 't', 't')",
                (conv,),
            )
            for number, (role, content, fts) in enumerate(
                [
                    ("user", note, searchable_with(note, forward)),  # session 41's writer
                    ("user", note, searchable_with(note, None)),  # the same note alone
                ],
                start=1,
            ):
                row = conn.execute(
                    "INSERT INTO turns (conversation_id, turn_number, role, content, "
                    "timestamp, fts_text) VALUES (?, ?, ?, ?, 't', ?)",
                    (conv, number, role, content, fts),
                )
                conn.execute(
                    "INSERT INTO turn_vectors (turn_id, conversation_id, window_last, bits,"
                    " vector) VALUES (?, ?, ?, x'00', x'00')",
                    (row.lastrowid, conv, row.lastrowid),
                )
        conn.commit()
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        got = conn.execute(
            "SELECT conversation_id, turn_number, forwarded FROM turns "
            "WHERE forwarded IS NOT NULL ORDER BY id"
        ).fetchall()
        assert got == [
            ("conv-1", 1, FORWARD),
            ("conv-2", 1, FORWARD),
            ("conv-3", 1, FORWARD),
            ("conv-4", 1, fts_content(forwards[3])),  # its spaced form (module docstring)
        ]
        assert conn.execute("SELECT count(*) FROM turn_vectors").fetchone()[0] == 0
    finally:
        conn.close()
