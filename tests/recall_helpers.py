"""Helpers for the search / embedding / vector tests: a real conversations.db with turns.

Rows are written the way the index writes them (``turns`` + the external-content
``turns_fts``), so the tests exercise the real schema without depending on the manager.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bot.db import Database, connect_sync
from bot.fts_text import searchable
from bot.index import index_notes, index_title
from bot.schema import INDEX_MIGRATIONS

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    env = os.environ.get("MY_AGENT_SHARED")
    if env:
        return Path(env)
    rel = REPO / ".." / "shared"
    return rel if rel.exists() else Path("/work/shared")


def model_path() -> Path:
    """The local MiniLM copy; fails under CI=true, skips elsewhere, when it is missing."""
    env = os.environ.get("MY_AGENT_EMBEDDING_MODEL_PATH")
    path = Path(env) if env else shared_dir() / "models" / "all-MiniLM-L6-v2-onnx"
    if not (path / "model.onnx").exists():
        message = f"embedding model not found at {path}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def index_migrations() -> list:  # type: ignore[type-arg]
    from bot.schema_recall import RECALL_MIGRATIONS

    extra = [m for m in RECALL_MIGRATIONS if m not in INDEX_MIGRATIONS]
    return [*INDEX_MIGRATIONS, *extra]


async def open_index(path: Path) -> Database:
    """conversations.db with the index and recall migrations applied."""
    migrations = index_migrations()
    # Applied here outside apply_migrations' own transaction: a migration written with
    # executescript() commits by itself, which apply_migrations does not expect.
    conn = connect_sync(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number, migration in enumerate(migrations, start=1):
            if number > version:
                migration(conn)
                conn.execute(f"PRAGMA user_version={number}")
    finally:
        conn.close()
    return await Database.open(path, migrations)


async def add_conversation(
    db: Database,
    conv_id: str,
    turns: list[tuple[str, str]],
    *,
    channel: str = "web",
    title: str | None = None,
    day: str = "2026-01-10",
    abbreviation: str | None = None,
    topics: list[str] | None = None,
    at: str | None = None,
    manual: bool = False,
) -> list[int]:
    """Insert a conversation and its turns ((role, content) pairs); returns the turn ids.
    Every turn is stamped ``at`` (a UTC timestamp), else noon UTC of ``day``; ``manual``:
    ``title`` is the owner's (a rename)."""

    def _write(conn) -> list[int]:  # type: ignore[no-untyped-def]
        stamp = at or f"{day}T12:00:00+00:00"
        conn.execute(
            "INSERT INTO conversations (id, channel, title, topics, created, updated, "
            "turn_count, abbreviation, manually_named) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                conv_id,
                channel,
                title,
                json.dumps(topics or []),
                stamp,
                stamp,
                len(turns),
                abbreviation,
                int(manual),
            ),
        )
        ids = []
        for number, (role, content) in enumerate(turns, start=1):
            ts = at or f"{day}T12:{number % 60:02d}:00+00:00"
            derived = searchable(content)  # as bot.index_writes does
            cur = conn.execute(
                "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp, "
                "channel, sender, fts_text) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (conv_id, number, role, content, ts, channel, role, derived),
            )
            rowid = cur.lastrowid
            conn.execute(
                "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, "
                "timestamp) VALUES (?, ?, ?, ?, ?)",
                (rowid, derived or content, conv_id, number, ts),
            )
            ids.append(int(rowid))
        index_notes(conn, conv_id, abbreviation)  # as bot.index.upsert_conversation does
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'titles'").fetchone():
            index_title(conn, conv_id, title, manual=manual)  # from migration 12 on
        return ids

    return await db.run(_write)


class Relabelled:
    """A search service whose pages come back changed (``dataclasses.replace``): what a
    hybrid search says of its results, on top of a keyword-only test store."""

    def __init__(self, search: Any, **changes: Any) -> None:
        self._search = search
        self.db = getattr(search, "db", None)
        self.changes = changes

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(await self._search.search(*args, **kwargs), **self.changes)
