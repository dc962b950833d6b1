"""Start-up recovery and reindexing (seed 000 "Flow 6: Process Restart Recovery").

The transcripts are the truth. On every start the index catches up with them: unknown
conversations are registered, lines written after the last indexed byte are applied
(turns missing from FTS included), party records are replayed, and unanswered user
turns are found so their replies are produced. ``reindex`` deletes the index and
rebuilds it from nothing through the same code path.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.db import SyncConn
from bot.index import SELECT_CONVERSATION, row_to_record
from bot.index_writes import apply_lines, record_from_meta
from bot.parties import apply_party_lines
from bot.transcript import TranscriptStore, parse_lines

log = logging.getLogger("my_agent.recovery")


@dataclass
class RecoveryReport:
    conversations: int = 0
    registered: int = 0
    caught_up_lines: int = 0
    removed: int = 0
    parties: int = 0
    removed_parties: int = 0
    pending_replies: list[tuple[str, int]] = field(default_factory=list)
    needs_abbreviation: list[str] = field(default_factory=list)
    # transcripts that could not be read (file name -> the error): skipped, left as they are
    unreadable: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "registered": self.registered,
            "caughtUpLines": self.caught_up_lines,
            "removed": self.removed,
            "parties": self.parties,
            "removedParties": self.removed_parties,
            "pendingReplies": len(self.pending_replies),
            "needsAbbreviation": len(self.needs_abbreviation),
            "unreadable": len(self.unreadable),
        }


def catch_up_conversations(conn: SyncConn, store: TranscriptStore, report: RecoveryReport) -> None:
    """Bring every conversation's rows up to its transcript (runs on the db thread)."""
    # Only the size each conversation reflects: a restart finds almost every transcript
    # indexed already, and building the records of a year's 10,000 conversations cost
    # more than the stats that show it. The record of one that changed is read then.
    known = dict(conn.execute("SELECT id, indexed_bytes FROM conversations").fetchall())
    present = store.conversation_ids()
    if store.directory.is_dir():  # a missing directory (not mounted?) proves nothing
        for conv_id in sorted(set(known) - set(present)):
            # Its transcript was deleted (by the owner, to forget it): the index is
            # derived from the transcripts, and kept it listed and searchable for good.
            log.warning("%s has no transcript any more: taken out of the index", conv_id)
            _delete_turns(conn, conv_id)
            conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))
            report.removed += 1
    for conv_id in present:
        report.conversations += 1
        try:
            _catch_up_one(conn, store, conv_id, known.get(conv_id), report)
        except OSError as exc:
            # One transcript the disk will not give (permissions, an I/O error) no longer
            # stops the start (exit 74) for every other conversation. Left as it is (it
            # may be readable after a chmod) and written to by no one this run; the next
            # start picks it up. A directory that cannot be listed still stops the start.
            why = exc.strerror or str(exc)
            log.error(
                "%s cannot be read (%s): skipped and left as it is; its conversation is "
                "picked up at the next start once it can be read",
                store.path(conv_id).name,
                why,
            )
            store.mark_unreadable(conv_id, why)
            report.unreadable[store.path(conv_id).name] = why


def _catch_up_one(
    conn: SyncConn, store: TranscriptStore, conv_id: str, known: int | None, report: RecoveryReport
) -> None:
    path = store.path(conv_id)
    size = path.stat().st_size
    if known is not None and known == size:
        return
    row = None
    if known is not None:
        row = conn.execute(f"{SELECT_CONVERSATION} WHERE id = ?", (conv_id,)).fetchone()
    rec = row_to_record(row) if row else None
    if rec is not None and rec.indexed_bytes > size:
        # read before its rows go: a file that cannot be read keeps them
        lines, offset = store.read_from(conv_id, 0)
        log.warning("%s shrank below its indexed size: re-indexing it", conv_id)
        # FTS rows first: deleting the conversation cascades to its turns, and the
        # external-content FTS index needs their text to delete its entries.
        _delete_turns(conn, conv_id)
        conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))
        rec = None
    elif rec is None:
        lines, offset = store.read_from(conv_id, 0)
    else:
        lines, offset = store.read_from(conv_id, rec.indexed_bytes)
    if rec is None:
        meta = next((line for line in lines if line.get("type") == "meta"), None)
        if meta is None or meta.get("id") != conv_id:
            log.warning("%s has no usable meta line: registered from its file name", path.name)
            meta = {"id": conv_id, "channel": "web", "created": _first_ts(lines)}
        rec = record_from_meta(meta)
        report.registered += 1
    apply_lines(conn, rec, lines, offset)
    report.caught_up_lines += sum(1 for line in lines if line.get("type") != "meta")


def _delete_turns(conn: SyncConn, conv_id: str) -> None:
    rows = conn.execute(
        # the text turns_fts holds (bot.fts_text); readouts were never in it
        "SELECT id, content, conversation_id, turn_number, timestamp FROM recall_turns "
        "WHERE conversation_id = ?",
        (conv_id,),
    ).fetchall()
    for row in rows:
        conn.execute(
            "INSERT INTO turns_fts (turns_fts, rowid, content, conversation_id, "
            "turn_number, timestamp) VALUES ('delete', ?, ?, ?, ?, ?)",
            row,
        )
    conn.execute("DELETE FROM turns WHERE conversation_id = ?", (conv_id,))
    conn.execute("DELETE FROM message_refs WHERE conversation_id = ?", (conv_id,))


def _first_ts(lines: list[dict[str, Any]]) -> str:
    for line in lines:
        if isinstance(line.get("timestamp"), str):
            return str(line["timestamp"])
    return "1970-01-01T00:00:00.000Z"


def catch_up_parties(conn: SyncConn, directory: Path, config: Any, report: RecoveryReport) -> None:
    """Bring every third party's rows up to its record file (runs on the db thread)."""
    if not directory.is_dir():  # a missing directory (not mounted?) proves nothing
        return
    offsets = dict(conn.execute("SELECT key, value FROM index_meta WHERE key LIKE 'ext:%'"))
    paths = {path.stem: path for path in sorted(directory.glob("p*.jsonl"))}
    known = [row[0] for row in conn.execute("SELECT id FROM external_parties")]
    for party_id in sorted(set(known) - set(paths)):
        # Its record was deleted (to forget them), as a conversation's transcript can be:
        # the index is derived from the records (before session 15 it kept the party,
        # their messages and escalations for good).
        log.warning("party %s has no record any more: taken out of the index", party_id)
        _forget_party(conn, party_id)
        report.removed_parties += 1
    for party_id, path in paths.items():
        report.parties += 1
        done = int(offsets.get(f"ext:{party_id}", 0))
        size = path.stat().st_size
        if done > size:
            log.warning("party record %s shrank below its indexed size: re-indexing it", party_id)
            _forget_party(conn, party_id)
            done = 0
        if done >= size:
            continue
        with open(path, "rb") as fh:
            fh.seek(done)
            data = fh.read()
        end = data.rfind(b"\n")
        if end < 0:
            continue
        apply_party_lines(conn, party_id, parse_lines(data[: end + 1], path.name), config)
        conn.execute(
            "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
            (f"ext:{party_id}", str(done + end + 1)),
        )


def _forget_party(conn: SyncConn, party_id: str) -> None:
    # external_messages and escalations go with the party (ON DELETE CASCADE)
    conn.execute("DELETE FROM external_parties WHERE id = ?", (party_id,))
    conn.execute("DELETE FROM index_meta WHERE key = ?", (f"ext:{party_id}",))


# User turns that expect a reply and have none (the pending-reply markers); also
# counted by `my-agent status` (bot.healthcheck).
PENDING_REPLIES = (
    "SELECT u.conversation_id, u.turn_number FROM turns u WHERE u.role = 'user' "
    "AND u.awaits_reply = 1 AND NOT EXISTS (SELECT 1 FROM turns a WHERE "
    "a.conversation_id = u.conversation_id AND a.turn_number = u.turn_number AND "
    "a.role = 'assistant')"
)


def pending_replies(conn: SyncConn) -> list[tuple[str, int]]:
    """User turns that expect a reply and have none (the pending-reply markers)."""
    return [
        (r[0], r[1])
        for r in conn.execute(f"{PENDING_REPLIES} ORDER BY u.conversation_id, u.turn_number")
    ]


def recover(
    conn: SyncConn, store: TranscriptStore, external_dir: Path, config: Any
) -> RecoveryReport:
    report = RecoveryReport()
    catch_up_conversations(conn, store, report)
    catch_up_parties(conn, external_dir, config, report)
    # an unreadable transcript's owed reply could not be written (its store refuses)
    skipped = {name.removesuffix(".jsonl") for name in report.unreadable}
    report.pending_replies = [p for p in pending_replies(conn) if p[0] not in skipped]
    # Idle conversations with turns never abbreviated (or whose abbreviation failed).
    conn.execute(
        "UPDATE conversations SET needs_abbreviation = 1 WHERE "
        "abbreviated_turn < turn_count AND needs_abbreviation = 0 AND "
        "updated < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)",
        (f"-{int(config.conversations.idle_timeout_seconds)} seconds",),
    )
    report.needs_abbreviation = [
        r[0]
        for r in conn.execute("SELECT id FROM conversations WHERE needs_abbreviation = 1")
        if r[0] not in skipped
    ]
    return report


def delete_index(path: Path) -> None:
    """Remove conversations.db and its WAL files (``my-agent reindex``)."""
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass
