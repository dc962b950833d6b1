"""Transcript lines into index rows: the one write path of ``conversations.db``.

:func:`apply_lines` turns transcript lines into rows, used both in real time (every
append, bot/conversations.py) and by recovery / ``my-agent reindex`` (bot/recovery.py),
so a rebuilt index answers searches identically. Separate from the reads of bot/index.py
because this is the code that decides what the index holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from bot.brain.cost import stored_input
from bot.db import SyncConn
from bot.forwards import forwarded_text, searchable_with
from bot.index import ConversationRecord, upsert_conversation
from bot.reffilter import line_refs
from bot.transcript import recallable
from bot.transcript_lines import meta_line


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


def conversation_meta(
    conv_id: str,
    channel: str,
    participants: Iterable[str],
    *,
    created: str | None = None,
    identity_key: str | None = None,
    pinned: bool = False,
    model: str | None = None,
    channel_meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A conversation's ``meta`` line (:func:`record_from_meta` reads it back)."""
    meta: dict[str, Any] = meta_line(conv_id, channel, participants, created)
    if identity_key:
        meta["identityKey"] = identity_key
    if pinned:
        meta["pinned"] = True
    if model:
        meta["model"] = model
    if channel_meta:
        meta["channelMeta"] = dict(channel_meta)
    return meta


def meta_from_record(rec: ConversationRecord) -> dict[str, Any]:
    """The ``meta`` line :func:`record_from_meta` reads ``rec`` back from (a transcript
    deleted under the running daemon is recreated with it)."""
    return conversation_meta(
        rec.id,
        rec.channel,
        rec.participants,
        created=rec.created,
        identity_key=rec.identity_key,
        pinned=rec.pinned,
        model=rec.model,
        channel_meta=rec.channel_meta,
    )


# Events that may carry the ``usage`` and ``cost`` of the model call that produced them.
COSTED_EVENTS = frozenset(
    {
        "compression",
        "compression_failed",
        "abbreviation",
        "title_assigned",
        "meta_update",
        "naming_failed",
    }
)


# The event a shrunk transcript is given: the turn numbers it lost went up to
# ``throughTurn`` (bot.transcript_rescue.keep_numbering).
TURNS_LOST = "turns_lost"


def apply_line(conn: SyncConn, rec: ConversationRecord, line: Mapping[str, Any]) -> None:
    """Reflect one transcript line in the index and in ``rec`` (the caller saves ``rec``)."""
    kind = line.get("type")
    ts = line.get("timestamp")
    first = rec.turn_count == 0  # (before this line)
    if kind == "turn":
        role = line.get("role")
        content = line.get("content")
        number = line.get("turnNumber")
        if role not in ("user", "assistant") or not isinstance(content, str):
            return
        if not isinstance(number, int):
            return
        recall = recallable(line)
        # what turns_fts indexes, when not the content: with a mail the owner forwarded
        # (kept apart from their words, bot/forwards.py), found by its words too
        forwarded = forwarded_text(line)
        derived = searchable_with(content, forwarded)
        cur = conn.execute(
            "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp, channel,"
            " sender, awaits_reply, recall, fts_text, forwarded)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                derived,
                # and what its window embeds with it (bot/vectors.py, session 42)
                forwarded,
            ),
        )
        if recall:  # a readout stays out of the keyword index (bot.transcript.recallable)
            conn.execute(
                "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp)"
                " VALUES (?, ?, ?, ?, ?)",
                (cur.lastrowid, derived or content, rec.id, number, ts or rec.updated),
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
                # Offline notes standing in while the model is down stay owed to it.
                rec.needs_abbreviation = bool(line.get("needsAbbreviation"))
                if line.get("answered") is False and _answered(conn, rec.id, rec.abbreviated_turn):
                    # The reply to their last turn landed while they were written (it
                    # shares the turn's number): they are behind it.
                    rec.abbreviated_turn -= 1
        elif event == "notes_behind":
            # A reply landed after the notes of its turn number (bot.lifecycle): the next
            # pass writes them again. Until the next ``abbreviation`` event, which resets it.
            rec.abbreviated_turn = min(rec.abbreviated_turn, rec.turn_count - 1)
        elif event == TURNS_LOST and isinstance(line.get("throughTurn"), int):
            # A transcript that shrank lost turns numbered up to here (bot.recovery): the
            # next message goes on past them, as their replies' outbox rows keep their
            # keys (before session 40 it took turn 3 again, and its reply the lost turn
            # 3's key: dropped as already queued, never sent).
            rec.turn_count = max(rec.turn_count, line["throughTurn"])
        elif event == "message_ref":
            for channel, ref, direction in line_refs(line, rec.channel):
                _add_ref(conn, channel, ref, rec.id, direction)
        elif event in ("reply_merged", "reply_refused") and isinstance(line.get("turnNumber"), int):
            # answered by the reply to a later message of the same burst (the debounce),
            # or refused (a group's hourly budget, bot.group_budget; a member's message
            # while offline, bot.replies): not a pending reply for recovery
            conn.execute(
                "UPDATE turns SET awaits_reply = 0 WHERE conversation_id = ? AND "
                "turn_number = ? AND role = 'user'",
                (rec.id, line["turnNumber"]),
            )
        if event in COSTED_EVENTS:
            # The summary call (and the silent flush turn), the notes and the title cost
            # tokens too.
            _add_usage(rec, line)
    if isinstance(ts, str) and kind == "turn":
        date_by_turn(rec, ts, first=first)


def date_by_turn(rec: ConversationRecord, ts: str, *, first: bool) -> None:
    """Date ``rec`` by a turn stamped ``ts``: its last turn's time is ``updated``, and a
    turn older than its creation (history imported with its turns' own times) is its
    start, ``created``: the conversation list sorts, and search's date filters read,
    the span of its turns (an import was dated by the import's time: listed as today's,
    and a filter ending before the import dropped its notes)."""
    if first or ts > rec.updated:
        rec.updated = ts
    if ts < rec.created:
        rec.created = ts


def _answered(conn: SyncConn, conv_id: str, number: int) -> bool:
    """Whether turn ``number`` of ``conv_id`` has a recallable reply in the index."""
    row = conn.execute(
        "SELECT 1 FROM turns WHERE conversation_id = ? AND turn_number = ? AND "
        "role = 'assistant' AND recall = 1 LIMIT 1",
        (conv_id, number),
    ).fetchone()
    return row is not None


def _add_usage(rec: ConversationRecord, line: Mapping[str, Any]) -> None:
    usage = line.get("usage") or {}
    if isinstance(usage, Mapping):
        rec.tokens_in += stored_input(usage)
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
            "UPDATE conversations SET created = ?, updated = ?, turn_count = ?, tokens_in = ?, "
            "tokens_out = ?, cost_total = ?, indexed_bytes = ? WHERE id = ?",
            (
                rec.created,
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
