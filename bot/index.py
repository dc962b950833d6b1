"""The SQLite index of conversations (seed 000 "Index"), derived from the transcripts.

Here: :class:`ConversationRecord` (a row of ``conversations``), its mapping to and from
SQL, and :class:`ConversationIndex`, the async reads. Everything in the index can be
rebuilt from the JSONL files: transcript lines become rows through
:func:`bot.index_writes.apply_lines` alone, kept apart from the reads as the one write
path (every append, recovery and ``my-agent reindex``).
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from bot.db import Database, SyncConn
from bot.reffilter import RefFilter, line_refs
from bot.schema_notes import notes_text
from bot.schema_titles import title_text

log = logging.getLogger("my_agent.index")


# The conversations the lifecycle owes notes: flagged by a failed or unfinished pass, or
# with turns since their last notes (left before their idle timeout). One predicate for
# the lifecycle's queue and every count of it (/status, `my-agent status`, the systemd
# status line, which counted the flag alone).
NOTES_OWED = "turn_count > 0 AND (needs_abbreviation = 1 OR abbreviated_turn < turn_count)"


@dataclass
class ConversationRecord:
    """A row of ``conversations`` (seed 000 "Conversation Interface" plus routing state)."""

    id: str
    channel: str
    created: str
    updated: str
    title: str | None = None
    topics: list[str] = field(default_factory=list)
    turn_count: int = 0
    participants: list[str] = field(default_factory=list)
    abbreviation: str | None = None
    needs_abbreviation: bool = False
    manually_named: bool = False
    identity_key: str | None = None
    pinned: bool = False
    model: str | None = None
    channel_meta: dict[str, Any] = field(default_factory=dict)
    last_named_turn: int = 0
    abbreviated_turn: int = 0
    cost_total: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    indexed_bytes: int = 0

    def to_meta(self) -> dict[str, Any]:
        """The dashboard's ConversationMeta (seed 000) plus display fields."""
        return {
            "id": self.id,
            "channel": self.channel,
            "title": self.title,
            "topics": list(self.topics),
            "created": self.created,
            "updated": self.updated,
            "turnCount": self.turn_count,
            "pinned": self.pinned,
            "model": self.model,
            "manuallyNamed": self.manually_named,
            "channelMeta": dict(self.channel_meta),
            "participants": list(self.participants),
            "cost": round(self.cost_total, 6),
        }


_COLUMNS = [f.name for f in fields(ConversationRecord)]
_JSON_COLUMNS = {"topics", "participants", "channel_meta"}
_BOOL_COLUMNS = {"needs_abbreviation", "manually_named", "pinned"}
SELECT_CONVERSATION = f"SELECT {', '.join(_COLUMNS)} FROM conversations"


def row_to_record(row: Iterable[Any]) -> ConversationRecord:
    values: dict[str, Any] = {}
    for name, value in zip(_COLUMNS, row, strict=True):
        if name in _JSON_COLUMNS:
            value = json.loads(value) if value else ([] if name != "channel_meta" else {})
        elif name in _BOOL_COLUMNS:
            value = bool(value)
        values[name] = value
    return ConversationRecord(**values)


def record_params(rec: ConversationRecord) -> list[Any]:
    out: list[Any] = []
    for name in _COLUMNS:
        value = getattr(rec, name)
        if name in _JSON_COLUMNS:
            value = json.dumps(value, ensure_ascii=False)
        elif name in _BOOL_COLUMNS:
            value = int(value)
        out.append(value)
    return out


def upsert_conversation(conn: SyncConn, rec: ConversationRecord) -> None:
    """Insert or replace ``rec``'s row, and its notes' and title's keyword indexes."""
    placeholders = ", ".join("?" for _ in _COLUMNS)
    updates = ", ".join(f"{c}=excluded.{c}" for c in _COLUMNS if c != "id")
    conn.execute(
        f"INSERT INTO conversations ({', '.join(_COLUMNS)}) VALUES ({placeholders}) "
        f"ON CONFLICT(id) DO UPDATE SET {updates}",
        record_params(rec),
    )
    index_notes(conn, rec.id, rec.abbreviation)
    index_title(conn, rec.id, rec.title, manual=rec.manually_named)


def index_notes(conn: SyncConn, conv_id: str, notes: str | None) -> None:
    """Keep ``notes`` (and through its triggers ``notes_fts``, migration 10) in step with
    a conversation's notes: written when new, replaced when changed, deleted when gone.
    Every write of a conversation row comes through here; unchanged notes write nothing
    (the ``WHERE`` of the upsert), so an event that only moves a counter costs a lookup."""
    if not notes:
        conn.execute("DELETE FROM notes WHERE conversation_id = ?", (conv_id,))
        return
    conn.execute(
        "INSERT INTO notes (conversation_id, text) VALUES (?, ?) ON CONFLICT(conversation_id) "
        "DO UPDATE SET text = excluded.text WHERE notes.text IS NOT excluded.text",
        (conv_id, notes_text(notes)),
    )


def index_title(conn: SyncConn, conv_id: str, title: str | None, *, manual: bool = False) -> None:
    """Keep ``titles`` (and through its triggers ``titles_fts``, migration 12) in step
    with a conversation's title, as :func:`index_notes` does with its notes; ``manual``:
    the owner's title (a rename)."""
    if not title or not title.strip():
        conn.execute("DELETE FROM titles WHERE conversation_id = ?", (conv_id,))
        return
    conn.execute(
        "INSERT INTO titles (conversation_id, text, manual) VALUES (?, ?, ?) "
        "ON CONFLICT(conversation_id) DO UPDATE SET text = excluded.text, "
        "manual = excluded.manual "
        "WHERE titles.text IS NOT excluded.text OR titles.manual IS NOT excluded.manual",
        (conv_id, title_text(title), int(manual)),
    )


class ConversationIndex:
    """Async read helpers over ``conversations.db``; writes go through
    :func:`bot.index_writes.apply_lines`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # "certainly never recorded" in memory (bot.reffilter); None: ask the database
        self.refs: RefFilter | None = None
        self._refs_loading: list[tuple[str, str]] | None = None

    async def load_refs(self) -> None:
        """Build the message-ref filter from ``message_refs`` (after recovery)."""
        self._refs_loading = []

        try:
            refs = await self.db.run(RefFilter.from_index, write=False)
        finally:
            added, self._refs_loading = self._refs_loading, None
        for channel, ref in added:  # recorded while the snapshot was read
            refs.add(channel, ref)
        self.refs = refs
        log.info("message-ref filter: %d refs, capacity %d", refs.count, refs.capacity)

    def note_refs(self, lines: Iterable[Mapping[str, Any]], channel: str) -> None:
        """Lines just committed: their refs go into the filter."""
        for line in lines:
            for ref_channel, ref, _ in line_refs(line, channel):
                if self._refs_loading is not None:
                    self._refs_loading.append((ref_channel, ref))
                if self.refs is not None:
                    self.refs.add(ref_channel, ref)
                    if self.refs.full:
                        log.info("message-ref filter full; duplicate checks ask the database")
                        self.refs = None

    async def get(self, conv_id: str) -> ConversationRecord | None:
        row = await self.db.fetchone(f"{SELECT_CONVERSATION} WHERE id = ?", (conv_id,))
        return row_to_record(row) if row else None

    async def all_records(self) -> list[ConversationRecord]:
        rows = await self.db.fetchall(SELECT_CONVERSATION)
        return [row_to_record(r) for r in rows]

    async def list(
        self,
        channel: str | None = None,
        limit: int = 50,
        offset: int = 0,
        pinned: bool | None = None,
    ) -> list[ConversationRecord]:
        where: list[str] = []
        params: list[Any] = []
        if channel:
            where.append("channel = ?")
            params.append(channel.strip().lower())  # channel names are lower case
        if pinned is not None:
            where.append("pinned = ?")
            params.append(int(pinned))
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = await self.db.fetchall(
            f"{SELECT_CONVERSATION}{clause} ORDER BY updated DESC, id DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [row_to_record(r) for r in rows]

    async def count(self) -> int:
        row = await self.db.fetchone("SELECT count(*) FROM conversations")
        return int(row[0]) if row else 0

    async def turn_rows(self) -> int:
        row = await self.db.fetchone("SELECT count(*) FROM turns")
        return int(row[0]) if row else 0

    async def conversation_for_ref(self, channel: str, ref: str) -> str | None:
        if self.refs is not None and not self.refs.might_contain(channel, ref):
            return None  # never recorded: no hop to the database
        row = await self.db.fetchone(
            "SELECT conversation_id FROM message_refs WHERE channel = ? AND ref = ?",
            (channel, ref),
        )
        return str(row[0]) if row else None

    async def notes_owed(self) -> int:
        """Conversations whose notes are missing, stale or failed (:data:`NOTES_OWED`)."""
        row = await self.db.fetchone(f"SELECT count(*) FROM conversations WHERE {NOTES_OWED}")
        return int(row[0]) if row else 0

    async def needing_abbreviation(self) -> builtins.list[str]:  # ``list`` is a method here
        rows = await self.db.fetchall(
            "SELECT id FROM conversations WHERE needs_abbreviation = 1 ORDER BY updated"
        )
        return [r[0] for r in rows]
