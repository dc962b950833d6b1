"""The stores, read from outside the daemon (part of ``my-agent status``).

- counts from ``conversations.db`` (opened read-only) and the outbox from ``state.db``;
- index consistency: turn lines in every transcript against ``turns`` rows per
  conversation, FTS documents against ``turns``, bytes not yet indexed, and FTS5's own
  ``integrity-check`` (which compares the index with its content table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.events import iso, utcnow
from bot.health_pages import NOT_CHECKED, fts_integrity, page_check, pages_checked
from bot.index import NOTES_OWED
from bot.index_rescue import PAGES_DAMAGED, PAGES_OK
from bot.outbox_withdrawals import WITHDRAWN
from bot.recovery import PENDING_REPLIES
from bot.schema_failures import FAILED_COLUMN
from bot.status_reads import connect_readonly
from bot.transcript_lines import line_value, well_formed

# The first line of the offline notes (bot.extractive.HEADER, which is not imported: it
# would load the search package into every `my-agent status`; a test keeps them equal).
OFFLINE_NOTES_HEADER = "Extractive notes (no language model):"
# Conversations whose notes are the offline stand-in written while the model was down,
# still owed to the model (bot.lifecycle.abbreviation: flagged, labelled offline).
STAND_INS = (
    "SELECT count(*), min(updated) FROM conversations WHERE needs_abbreviation = 1"
    " AND substr(abbreviation, 1, ?) = ?"
)
STAND_IN_ARGS = (len(OFFLINE_NOTES_HEADER), OFFLINE_NOTES_HEADER)
# Of the conversations owed notes, those whose last pass failed (bot/schema_failures.py)
# or that have a stand-in (written because the model failed; a rebuilt index keeps it
# from the transcript, not the failure): "failed, to retry". The others have simply not
# been written yet (idle, queued at a start or after a reindex, a stop's unfinished queue).
FAILED_NOTES = (
    f"SELECT count(*) FROM conversations WHERE {NOTES_OWED} AND ({{failed}}"
    "(needs_abbreviation = 1 AND substr(abbreviation, 1, ?) = ?))"
)


def connect_ro(path: Path) -> Any:
    """A read-only connection (busy timeout 10 s) to the database at ``path``, also on
    a full disk (:func:`bot.status_reads.connect_readonly`)."""
    return connect_readonly(path)


def unbuilt(path: Path) -> bool:
    """Whether the database at ``path`` holds no table yet: an empty file, left by a
    first start or a reindex stopped right after making it (the next open builds it).
    False when it cannot be read: the caller's read says why."""
    try:
        conn = connect_ro(path)
    except Exception:  # sqlite3 and pysqlite3 raise their own classes
        return False
    try:
        return conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    except Exception:
        return False
    finally:
        conn.close()


def _scalar(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> int:
    row = conn.execute(sql, params).fetchone()
    return int(row[0] or 0) if row else 0


def index_counts(conn: Any) -> dict[str, Any]:
    """Counts from ``conversations.db``."""
    by_channel = dict(
        conn.execute("SELECT channel, count(*) FROM conversations GROUP BY channel").fetchall()
    )
    return {
        "conversations": _scalar(conn, "SELECT count(*) FROM conversations"),
        "by_channel": by_channel,
        # Stored messages (a question and its reply are two); the key keeps its name for
        # the scripts that read it. turn_numbers counts turns as /status and the
        # dashboard's Analytics do, a question and its replies sharing one: the text
        # said "N turns" of the messages, twice their figure (before session 40).
        "turns": _scalar(conn, "SELECT count(*) FROM turns"),
        "turn_numbers": _scalar(conn, "SELECT sum(turn_count) FROM conversations"),
        # Notes missing or behind the last turn: what the daemon will write (at the idle
        # timeout, or at its next start), as bot.lifecycle.records.pending_abbreviations
        # selects them. The flag alone missed conversations left before their timeout.
        "pending_abbreviations": _scalar(
            conn,
            f"SELECT count(*) FROM conversations WHERE {NOTES_OWED}",
        ),
        # of those, the ones whose notes failed: retried by the sweep (the flag alone
        # counted the idle ones a reindex or a start queues, never tried)
        "abbreviations_to_retry": _failed_notes(conn),
        # of those, summarised meanwhile by the offline stand-in (searchable, not the
        # model's notes); without a model, only offline notes whose embedding failed
        "offline_stand_ins": _scalar(conn, STAND_INS, STAND_IN_ARGS),
        # Owner messages with no reply yet (bot.recovery.pending_replies): in flight
        # while the daemon runs; after a stop or during an outage, answered later.
        "replies_pending": _scalar(conn, f"SELECT count(*) FROM ({PENDING_REPLIES})"),
        "external_parties": _scalar(conn, "SELECT count(*) FROM external_parties"),
        "pending_escalations": _scalar(
            conn, "SELECT count(*) FROM escalations WHERE status = 'pending'"
        ),
        **vector_counts(conn),
    }


def _failed_notes(conn: Any) -> int:
    """:data:`FAILED_NOTES`, on an index the daemon has not migrated to version 13 yet
    (status reads it as it is) by the stand-ins alone."""
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(conversations)")}
    failed = "abbreviation_failed = 1 OR " if FAILED_COLUMN in columns else ""
    return _scalar(conn, FAILED_NOTES.format(failed=failed), STAND_IN_ARGS)


def vector_counts(conn: Any) -> dict[str, Any]:
    """What the semantic half of search has: turns and notes with a vector, and the
    model they were made with (``bot.vector_store.META_KEY``; None before any). Fewer
    vectors than turns while the daemon runs: it is embedding them (after a model change
    every vector is dropped and rebuilt, search answering by keyword meanwhile)."""
    row = conn.execute("SELECT value FROM index_meta WHERE key = 'embedding_model'").fetchone()
    return {
        "turn_vectors": _scalar(conn, "SELECT count(*) FROM turn_vectors"),
        # the turns that get one: not the readouts kept out of recall (the offline
        # brain's replies), counted against all turns ("27 of 54") the vectors read as
        # half missing for good
        "recall_turns": _scalar(conn, "SELECT count(*) FROM turns WHERE recall = 1"),
        "notes": _scalar(conn, "SELECT count(*) FROM conversations WHERE abbreviation <> ''"),
        "note_vectors": _scalar(conn, "SELECT count(*) FROM abbreviation_vectors"),
        "embedding_model": str(row[0]) if row else None,
    }


def outbox_counts(state_path: Path, now: float | None = None) -> dict[str, Any]:
    """Outbox sizes from ``state.db`` (pending, failed, oldest pending age)."""
    conn = connect_ro(state_path)
    try:
        # a row withdrawn (bot.outbox.Outbox.withdraw) is not a message that failed
        rows = dict(
            conn.execute(
                "SELECT CASE WHEN status = 'failed' AND substr(last_error, 1, ?) = ?"
                " THEN 'withdrawn' ELSE status END AS s, count(*) FROM outbox GROUP BY s",
                (len(WITHDRAWN), WITHDRAWN),
            ).fetchall()
        )
        oldest = conn.execute(
            "SELECT min(created) FROM outbox WHERE status = 'pending'"
        ).fetchone()[0]
    finally:
        conn.close()
    return {
        "pending": int(rows.get("pending", 0)),
        "failed": int(rows.get("failed", 0)),
        "sent": int(rows.get("sent", 0)),
        "oldest_pending": oldest,
    }


def _valid_turn(line: dict[str, Any]) -> bool:
    # What the index takes (bot.index_writes.apply_line): a well-formed turn with a number.
    return (
        line.get("type") == "turn" and well_formed(line) and isinstance(line.get("turnNumber"), int)
    )


def transcript_turns(
    conversations_dir: Path,
    count_lines: bool = True,
    unreadable: list[str] | None = None,
    damaged: list[str] | None = None,
) -> dict[str, tuple[int | None, int]]:
    """conv id -> (turn lines, size of the complete-line prefix in bytes); without
    ``count_lines``, (None, size of the file): a stat per transcript, no read.

    A transcript that cannot be read is listed as (None, its size) and, with
    ``unreadable``, named there with the error (it made the whole report exit 74).
    Complete lines that reads skip (not JSON, or of the wrong shape) are named in
    ``damaged`` as ``conv-....jsonl:LINE``: the index skips them too, so its turn count
    agreed with the file's and status called a transcript with a lost message healthy."""
    out: dict[str, tuple[int | None, int]] = {}
    if not conversations_dir.is_dir():
        return out
    for path in sorted(conversations_dir.glob("conv-*.jsonl")):
        if not count_lines:
            out[path.stem] = (None, path.stat().st_size)
            continue
        try:
            data = path.read_bytes()
        except OSError as exc:
            if unreadable is None:
                raise
            unreadable.append(f"transcript {path.name} cannot be read ({exc.strerror or exc})")
            out[path.stem] = (None, path.stat().st_size)
            continue
        end = data.rfind(b"\n") + 1  # a torn last line is not counted (nor indexed)
        count = 0
        for number, raw in enumerate(data[:end].split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                line, _ = line_value(raw)
            except ValueError:
                line = None
            if not isinstance(line, dict) or not well_formed(line):
                if damaged is not None:
                    damaged.append(f"{path.name}:{number}")
            elif _valid_turn(line):
                count += 1
        out[path.stem] = (count, end)
    return out


def index_consistency(
    conn: Any, conversations_dir: Path, count_lines: bool = True, read_pages: bool = False
) -> dict[str, Any]:
    """Compare the index with the transcripts; ``problems`` lists every mismatch found.

    Without ``count_lines`` (``status --quick``) each transcript is compared by its size with
    the bytes its conversation reflects, not read: counting every turn line of a year's
    transcripts (10,000, 330,000 lines) took 4 of the 5 s of a quick status.
    ``read_pages`` (``status --pages``): SQLite's quick check of every page now; else the
    daemon's last one is reported (:func:`pages_checked`).
    """
    problems: list[str] = []
    damaged: list[str] = []
    files = transcript_turns(conversations_dir, count_lines, problems, damaged)
    rows = {
        cid: (int(turns), int(indexed))
        for cid, turns, indexed in conn.execute(
            "SELECT c.id, (SELECT count(*) FROM turns t WHERE t.conversation_id = c.id),"
            " c.indexed_bytes FROM conversations c"
        ).fetchall()
    }
    missing = sorted(set(files) - set(rows))
    orphans = sorted(set(rows) - set(files))
    mismatched = []
    lag_bytes = 0
    for cid, (count, size) in files.items():
        if cid not in rows:
            continue
        indexed_turns, indexed_bytes = rows[cid]
        if indexed_bytes < size:
            lag_bytes += size - indexed_bytes
        elif count is not None and indexed_turns != count:
            mismatched.append({"id": cid, "transcript": count, "index": indexed_turns})
    if missing:
        problems.append(f"{len(missing)} transcript(s) not in the index")
    if orphans:
        problems.append(f"{len(orphans)} indexed conversation(s) without a transcript")
    if mismatched:
        problems.append(f"{len(mismatched)} conversation(s) with a different turn count")
    if damaged:
        shown = ", ".join(damaged[:5]) + (", ..." if len(damaged) > 5 else "")
        problems.append(
            f"{len(damaged)} transcript line(s) that cannot be read, left out of the index"
            f" and the history (the log of the start that read them says more): {shown}"
        )
    checked: str | None = None
    if read_pages:
        pages, checked = page_check(conn), iso(utcnow())
    elif count_lines:
        pages, checked = pages_checked(conn)
    else:
        pages = "skipped"
    if pages.startswith(PAGES_DAMAGED) or (read_pages and pages != PAGES_OK):
        found = pages.removeprefix(PAGES_DAMAGED)
        when = "" if read_pages else f" by the daemon's page check at {checked}"
        problems.append(
            f"conversations.db was found damaged{when} ({found}): stop my-agent and run"
            " `my-agent reindex` to rebuild it from the transcripts"
        )
    turns = _scalar(conn, "SELECT count(*) FROM turns")
    fts_docs = _scalar(conn, "SELECT count(*) FROM turns_fts_docsize")
    searchable = turns
    if any(row[1] == "recall" for row in conn.execute("PRAGMA table_info(turns)")):
        # readouts are not searchable; an index from before version 5 has no such column
        searchable = _scalar(conn, "SELECT count(*) FROM turns WHERE recall = 1")
    if fts_docs != searchable:
        problems.append(f"FTS holds {fts_docs} documents for {searchable} searchable turns")
    return {
        "ok": not problems,
        "transcripts": len(files),
        "transcript_turns": sum(c or 0 for c, _ in files.values()) if count_lines else None,
        "index_turns": turns,
        "searchable_turns": searchable,
        "fts_documents": fts_docs,
        "fts_integrity": "skipped",
        "pages": pages,
        "pages_checked": checked,
        "unindexed_bytes": lag_bytes,
        "missing_from_index": missing[:20],
        "without_transcript": orphans[:20],
        "mismatched": mismatched[:20],
        "damaged_lines": damaged[:20],
        "problems": problems,
    }


__all__ = [
    "NOT_CHECKED",
    "OFFLINE_NOTES_HEADER",
    "STAND_INS",
    "STAND_IN_ARGS",
    "connect_ro",
    "fts_integrity",
    "index_consistency",
    "index_counts",
    "outbox_counts",
    "page_check",
    "pages_checked",
    "transcript_turns",
]
