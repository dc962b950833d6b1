"""The SQLite index of conversations (seed 000 "Index"), derived from the transcripts.

Everything here can be rebuilt from the JSONL files: :func:`apply_lines` is the single
code path that turns transcript lines into rows, used both in real time (every append)
and by recovery / ``my-agent reindex``, so a rebuilt index answers searches identically.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from bot.db import Database, SyncConn
from bot.reffilter import RefFilter, line_refs
from bot.transcript import recallable

log = logging.getLogger("my_agent.index")


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
    placeholders = ", ".join("?" for _ in _COLUMNS)
    updates = ", ".join(f"{c}=excluded.{c}" for c in _COLUMNS if c != "id")
    conn.execute(
        f"INSERT INTO conversations ({', '.join(_COLUMNS)}) VALUES ({placeholders}) "
        f"ON CONFLICT(id) DO UPDATE SET {updates}",
        record_params(rec),
    )


def record_from_meta(meta: Mapping[str, Any]) -> ConversationRecord:
    """A fresh record from a transcript ``meta`` line (with our routing extensions)."""
    return ConversationRecord(
        id=meta["id"],
        channel=meta.get("channel", "web"),
        created=meta.get("created", ""),
        updated=meta.get("created", ""),
        participants=list(meta.get("participants", [])),
        identity_key=meta.get("identityKey"),
        pinned=bool(meta.get("pinned", False)),
        model=meta.get("model"),
        channel_meta=dict(meta.get("channelMeta", {})),
    )


# Events that may carry the ``usage`` and ``cost`` of the model call that produced them.
COSTED_EVENTS = frozenset(
    {"compression", "compression_failed", "abbreviation", "title_assigned", "meta_update"}
)


def apply_line(conn: SyncConn, rec: ConversationRecord, line: Mapping[str, Any]) -> None:
    """Reflect one transcript line in the index and in ``rec`` (the caller saves ``rec``)."""
    kind = line.get("type")
    ts = line.get("timestamp")
    if kind == "turn":
        role = line.get("role")
        content = line.get("content")
        number = line.get("turnNumber")
        if role not in ("user", "assistant") or not isinstance(content, str):
            return
        if not isinstance(number, int):
            return
        recall = recallable(line)
        cur = conn.execute(
            "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp, channel,"
            " sender, awaits_reply, recall) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rec.id,
                number,
                role,
                content,
                ts or rec.updated,
                line.get("channel"),
                line.get("sender"),
                0 if line.get("awaitReply") is False else 1,
                int(recall),
            ),
        )
        if recall:  # a readout stays out of the keyword index (bot.transcript.recallable)
            conn.execute(
                "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp)"
                " VALUES (?, ?, ?, ?, ?)",
                (cur.lastrowid, content, rec.id, number, ts or rec.updated),
            )
        rec.turn_count = max(rec.turn_count, number)
        _add_usage(rec, line)
        for channel, ref, direction in line_refs(line, rec.channel):
            _add_ref(conn, channel, ref, rec.id, direction)
    elif kind == "event":
        event = line.get("event")
        if event in ("title_assigned", "meta_update"):
            _apply_meta_update(rec, line)
        elif event == "abbreviation":
            text = line.get("text")
            if isinstance(text, str):
                rec.abbreviation = text
                rec.abbreviated_turn = int(line.get("throughTurn", rec.turn_count) or 0)
                rec.needs_abbreviation = False
        elif event == "message_ref":
            for channel, ref, direction in line_refs(line, rec.channel):
                _add_ref(conn, channel, ref, rec.id, direction)
        elif event == "reply_merged" and isinstance(line.get("turnNumber"), int):
            # answered by the reply to a later message of the same burst (the debounce):
            # not a pending reply for recovery
            conn.execute(
                "UPDATE turns SET awaits_reply = 0 WHERE conversation_id = ? AND "
                "turn_number = ? AND role = 'user'",
                (rec.id, line["turnNumber"]),
            )
        if event in COSTED_EVENTS:
            # The summary call (and the silent flush turn), the notes and the title cost
            # tokens too.
            _add_usage(rec, line)
    if isinstance(ts, str) and ts > rec.updated and kind == "turn":
        rec.updated = ts


def _add_usage(rec: ConversationRecord, line: Mapping[str, Any]) -> None:
    usage = line.get("usage") or {}
    if isinstance(usage, Mapping):
        rec.tokens_in += int(usage.get("input", 0) or 0)
        rec.tokens_out += int(usage.get("output", 0) or 0)
    cost = line.get("cost")
    if isinstance(cost, int | float):
        rec.cost_total += float(cost)


def _apply_meta_update(rec: ConversationRecord, line: Mapping[str, Any]) -> None:
    if "title" in line:
        rec.title = line["title"]
        if line.get("event") == "title_assigned" or not line.get("manual"):
            rec.last_named_turn = int(line.get("throughTurn", rec.turn_count) or 0)
    if "name" in line and "title" not in line:  # seed's meta_update example uses "name"
        rec.title = line["name"]
    if isinstance(line.get("topics"), list):
        rec.topics = [str(t) for t in line["topics"]]
    if "manuallyNamed" in line:
        rec.manually_named = bool(line["manuallyNamed"])
    if "model" in line:
        rec.model = line["model"]
    if "pinned" in line:
        rec.pinned = bool(line["pinned"])
    if isinstance(line.get("channelMeta"), Mapping):
        rec.channel_meta.update(line["channelMeta"])
    if line.get("needsAbbreviation") is not None:
        rec.needs_abbreviation = bool(line["needsAbbreviation"])


def _add_ref(conn: SyncConn, channel: str, ref: str, conv_id: str, direction: str) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO message_refs (channel, ref, conversation_id, direction)"
        " VALUES (?, ?, ?, ?)",
        (channel, ref, conv_id, direction if direction in ("in", "out") else "out"),
    )


def apply_lines(
    conn: SyncConn,
    rec: ConversationRecord,
    lines: Iterable[Mapping[str, Any]],
    indexed_bytes: int | None = None,
) -> ConversationRecord:
    """Apply transcript lines and save the record (inside the caller's transaction)."""
    fresh = not rec.indexed_bytes
    if fresh:
        # A record not in the index yet (recovery, reindex): its row must exist before
        # its turns reference it (turns.conversation_id is a foreign key). It goes in
        # unpinned and its pin is settled below: inserted pinned, an older transcript
        # indexed again (edited by hand) broke the one-pin index and recovery failed.
        upsert_conversation(conn, replace(rec, pinned=False))
    only_turns = True
    for line in lines:
        if line.get("type") == "meta":
            continue
        only_turns = only_turns and line.get("type") == "turn"
        apply_line(conn, rec, line)
    if indexed_bytes is not None:
        rec.indexed_bytes = indexed_bytes
    if only_turns and rec.indexed_bytes and not fresh:
        # The hot path (a message or a reply): only the counters change.
        conn.execute(
            "UPDATE conversations SET updated = ?, turn_count = ?, tokens_in = ?, "
            "tokens_out = ?, cost_total = ?, indexed_bytes = ? WHERE id = ?",
            (
                rec.updated,
                rec.turn_count,
                rec.tokens_in,
                rec.tokens_out,
                rec.cost_total,
                rec.indexed_bytes,
                rec.id,
            ),
        )
        return rec
    if rec.pinned and rec.identity_key:
        # Only one pinned conversation per identity: the newer pin wins (the transcript
        # of the older one records its unpin first, so this only heals partial writes).
        # Newer by creation, not by which was applied last: recovery may index an old
        # transcript again after the current one.
        newer = conn.execute(
            "SELECT 1 FROM conversations WHERE identity_key = ? AND pinned = 1 AND id != ? "
            "AND (created, id) > (?, ?)",
            (rec.identity_key, rec.id, rec.created, rec.id),
        ).fetchone()
        if newer is not None:
            rec.pinned = False
        else:
            conn.execute(
                "UPDATE conversations SET pinned = 0 WHERE identity_key = ? AND pinned = 1 "
                "AND id != ?",
                (rec.identity_key, rec.id),
            )
    upsert_conversation(conn, rec)
    return rec


class ConversationIndex:
    """Async read helpers over ``conversations.db``; writes go through :func:`apply_lines`."""

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

    async def needing_abbreviation(self) -> builtins.list[str]:  # ``list`` is a method here
        rows = await self.db.fetchall(
            "SELECT id FROM conversations WHERE needs_abbreviation = 1 ORDER BY updated"
        )
        return [r[0] for r in rows]
