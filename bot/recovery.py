"""Start-up recovery and reindexing (seed 000 "Flow 6: Process Restart Recovery").

The transcripts are the truth. On every start the index catches up with them: unknown
conversations are registered, lines written after the last indexed byte are applied
(turns missing from FTS included), party records are replayed, and unanswered user
turns are found so their replies are produced. ``reindex`` sets the index aside
(:mod:`bot.index_files`) and rebuilds it from nothing through the same code path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.db import SyncConn
from bot.index import SELECT_CONVERSATION, ConversationRecord, row_to_record
from bot.index_files import delete_index as delete_index  # re-exported: tests rebuild with it
from bot.index_writes import apply_lines, meta_from_record, record_from_meta
from bot.recovery_parties import catch_up_parties
from bot.transcript import TranscriptStore
from bot.transcript_lines import encode
from bot.transcript_rescue import numbering_line, save_lost_turns, save_removed_copy

if TYPE_CHECKING:
    from bot.start_progress import StartProgress

log = logging.getLogger("my_agent.recovery")

CATCHING_UP = "catching up the index"  # the step's name in the daemon's status line


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
    # a stop came before every transcript was caught up: the rest is left for the next
    # start, and no owed reply was looked for (the next start finds them all)
    stopped: bool = False
    # transcripts missing at start (file name -> the copy of what the index held, turns)
    saved: dict[str, tuple[Path, int]] = field(default_factory=dict)
    # transcripts that shrank (file name -> the copy of the turns they lost, turns)
    shrunk: dict[str, tuple[Path, int]] = field(default_factory=dict)
    # party records missing at start (file name -> the copy, messages)
    saved_parties: dict[str, tuple[Path, int]] = field(default_factory=dict)
    # replies the start did not send again: state.db older than the index (bot.resume)
    unchecked_replies: int = 0
    # ... and answers to known parties, likewise (bot.party_resume)
    unchecked_answers: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "registered": self.registered,
            "caughtUpLines": self.caught_up_lines,
            "removed": self.removed,
            "shrunk": len(self.shrunk),
            "parties": self.parties,
            "removedParties": self.removed_parties,
            "pendingReplies": len(self.pending_replies),
            "needsAbbreviation": len(self.needs_abbreviation),
            "unreadable": len(self.unreadable),
            "stopped": self.stopped,
        }


# Whether a stop was asked for (the daemon's SIGTERM); called on the db thread.
Stopping = Callable[[], bool]


def _never() -> bool:
    return False


def catch_up_conversations(
    conn: SyncConn,
    store: TranscriptStore,
    report: RecoveryReport,
    stopping: Stopping = _never,
    progress: StartProgress | None = None,
) -> None:
    """Bring every conversation's rows up to its transcript (runs on the db thread).

    ``stopping()`` is asked before each conversation: once true, the rest is left as it
    is (``report.stopped``). Each conversation's rows and its indexed size change
    together, so the next start goes on where this one stopped. ``progress`` is told
    how many are done (the daemon's systemd status, and more start time)."""
    # Only the size each conversation reflects: a restart finds almost every transcript
    # indexed already, and building the records of a year's 10,000 conversations cost
    # more than the stats that show it. The record of one that changed is read then.
    known = dict(conn.execute("SELECT id, indexed_bytes FROM conversations").fetchall())
    present = store.conversation_ids()
    if progress is not None:
        progress.begin(CATCHING_UP, len(present), "conversations")
    if store.directory.is_dir():  # a missing directory (not mounted?) proves nothing
        for conv_id in sorted(set(known) - set(present)):
            if stopping():
                report.stopped = True
                return
            _take_out(conn, store, conv_id, report)
    for conv_id in present:
        if stopping():
            log.info(
                "stop asked for: %d transcripts left for the next start",
                len(present) - report.conversations,
            )
            report.stopped = True
            return
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
        if progress is not None:
            progress.advance(report.conversations)


def _take_out(conn: SyncConn, store: TranscriptStore, conv_id: str, report: RecoveryReport) -> None:
    """Take a conversation whose transcript is gone out of the index, what the index held
    of it saved first (:mod:`bot.transcript_rescue`). Deleted to forget it, the index
    kept it listed and searchable for good; lost by mistake, dropping its rows silently
    lost its turns (before session 27). A copy that cannot be written keeps the rows:
    the next start tries again."""
    name = store.path(conv_id).name
    try:
        copy, turns = save_removed_copy(conn, store.directory, conv_id)
    except OSError as exc:
        log.error(
            "%s is missing, and what the index holds of it cannot be saved (%s): "
            "kept in the index until it can",
            name,
            exc,
        )
        return
    log.warning(
        "%s is missing: its conversation is taken out of the index; the %d turns the "
        "index held are saved as %s",
        name,
        turns,
        copy,
    )
    _delete_turns(conn, conv_id)
    conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))
    report.removed += 1
    report.saved[name] = (copy, turns)


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
    indexed_meta = None  # the index's meta of a transcript that shrank
    through = 0  # the highest turn number the index held of it
    if rec is not None and rec.indexed_bytes > size:
        # read before its rows go: a file that cannot be read keeps them
        lines, offset = store.read_from(conv_id, 0)
        if not _save_lost(conn, store, conv_id, lines, report):
            return
        log.warning("%s shrank below its indexed size: re-indexing it", conv_id)
        indexed_meta = meta_from_record(rec)
        through = rec.turn_count
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
        if (meta is None or meta.get("id") != conv_id) and indexed_meta is not None:
            # A shrunk file without its meta line (0 bytes): registered from its file
            # name, it became a web conversation of 1970 and the owner's pin was lost
            # (before session 39). The index knew its channel, identity and pin; the
            # next append writes that meta line back (bot.transcript_appends).
            log.warning("%s has no usable meta line: its meta is kept from the index", path.name)
            meta = indexed_meta
        elif meta is None or meta.get("id") != conv_id:
            log.warning("%s has no usable meta line: registered from its file name", path.name)
            meta = {"id": conv_id, "channel": "web", "created": _first_ts(lines)}
        rec = record_from_meta(meta)
        report.registered += 1
    apply_lines(conn, rec, lines, offset)
    report.caught_up_lines += sum(1 for line in lines if line.get("type") != "meta")
    if indexed_meta is not None:
        _keep_numbering(conn, store, rec, lines, through, [indexed_meta] if not size else [])


def _keep_numbering(
    conn: SyncConn,
    store: TranscriptStore,
    rec: ConversationRecord,
    lines: list[dict[str, Any]],
    through: int,
    meta: list[dict[str, Any]],
) -> None:
    """Give a transcript that shrank the line that numbers its next turn past the lost
    ones (:func:`bot.transcript_rescue.numbering_line`), and the index its number; ``meta``:
    the meta line to write first (a 0-byte file). A file that refuses it (a full disk)
    has the number in the index only, logged: until a reindex."""
    line = numbering_line(lines, through)
    if line is None:
        return
    path = store.path(rec.id)
    try:
        size: int | None = store.append_now(path, encode([*meta, line]))
    except OSError as exc:
        log.error(
            "%s: the line that keeps its lost turns' numbers (up to %d) cannot be written "
            "(%s): the index keeps them until a reindex",
            path.name,
            through,
            exc,
        )
        size = None
    apply_lines(conn, rec, [line], size)
    log.warning(
        "%s: its lost turns were numbered up to %d: its next message is turn %d",
        path.name,
        through,
        through + 1,
    )


def _save_lost(
    conn: SyncConn,
    store: TranscriptStore,
    conv_id: str,
    lines: list[dict[str, Any]],
    report: RecoveryReport,
) -> bool:
    """Save the index's turns a transcript that shrank no longer holds (``lines``: what
    it holds) before its rows go (:func:`bot.transcript_rescue.save_lost_turns`); False
    when the copy cannot be written: the rows are kept and the transcript is written to
    by no one this run, the next start tries again. Before session 39 the rows were
    deleted with a log line only, and the index held the last copy of those turns."""
    name = store.path(conv_id).name
    try:
        saved = save_lost_turns(conn, store.directory, conv_id, lines)
    except OSError as exc:
        why = f"it shrank, and the turns it lost cannot be saved: {exc.strerror or exc}"
        log.error(
            "%s shrank below its indexed size, and the turns it no longer holds cannot be "
            "saved (%s): kept in the index and not written to until the next start",
            name,
            exc,
        )
        store.mark_unreadable(conv_id, why)
        report.unreadable[name] = why
        return False
    if saved is not None:
        copy, turns = saved
        log.warning(
            "%s shrank below its indexed size: the %d turns it no longer holds, which the "
            "index held, are saved as %s",
            name,
            turns,
            copy,
        )
        report.shrunk[name] = saved
    return True


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
    conn: SyncConn,
    store: TranscriptStore,
    external_dir: Path,
    config: Any,
    stopping: Stopping = _never,
    progress: StartProgress | None = None,
    flag_idle: bool = True,
) -> RecoveryReport:
    """Catch the index up with the transcripts and party records, and find what a
    restart owes. A stop (``stopping()`` true) ends it between two files: what is done
    is kept, the rest is caught up (and its owed replies found) at the next start.
    ``progress``: how far the catch-up has come (:mod:`bot.start_progress`).
    ``flag_idle=False`` (a reading command on a full disk, which writes nothing it does
    not have to): idle conversations owed notes are not flagged, the daemon's start
    flags them."""
    report = RecoveryReport()
    try:
        catch_up_conversations(conn, store, report, stopping, progress)
        if not report.stopped:
            catch_up_parties(conn, external_dir, config, report, stopping, progress)
    finally:
        if progress is not None:
            progress.end()
    if report.stopped:  # the daemon stops without serving: nothing is owed this run
        return report
    # an unreadable transcript's owed reply could not be written (its store refuses)
    skipped = {name.removesuffix(".jsonl") for name in report.unreadable}
    report.pending_replies = [p for p in pending_replies(conn) if p[0] not in skipped]
    # Idle conversations with turns never abbreviated (or whose abbreviation failed).
    if flag_idle:
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
