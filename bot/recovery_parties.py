"""Start-up recovery of the third parties' rows (:mod:`bot.recovery`): each party's
record file (:mod:`bot.external`) caught up, a deleted one taken out of the index."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.db import SyncConn
from bot.parties import apply_party_lines
from bot.party_rescue import message_count, save_removed_party
from bot.transcript import parse_lines

if TYPE_CHECKING:
    from bot.recovery import RecoveryReport
    from bot.start_progress import StartProgress

log = logging.getLogger("my_agent.recovery")


def catch_up_parties(
    conn: SyncConn,
    directory: Path,
    config: Any,
    report: RecoveryReport,
    stopping: Callable[[], bool],
    progress: StartProgress | None = None,
) -> None:
    """Bring every third party's rows up to its record file (runs on the db thread);
    ``stopping`` and ``progress`` as for :func:`bot.recovery.catch_up_conversations`."""
    if not directory.is_dir():  # a missing directory (not mounted?) proves nothing
        return
    offsets = dict(conn.execute("SELECT key, value FROM index_meta WHERE key LIKE 'ext:%'"))
    paths = {path.stem: path for path in sorted(directory.glob("p*.jsonl"))}
    known = [row[0] for row in conn.execute("SELECT id FROM external_parties")]
    if progress is not None:  # a flood of strangers leaves thousands of records
        from bot.recovery import CATCHING_UP  # (loaded: it calls this; not at the top, a cycle)

        progress.begin(CATCHING_UP, len(paths), "third parties")
    for party_id in sorted(set(known) - set(paths)):
        if stopping():
            report.stopped = True
            return
        _take_out(conn, directory, party_id, report)
    for party_id, path in paths.items():
        if stopping():
            report.stopped = True
            return
        report.parties += 1
        if progress is not None:
            progress.advance(report.parties - 1)
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


def _take_out(conn: SyncConn, directory: Path, party_id: str, report: RecoveryReport) -> None:
    """Take a party whose record was deleted out of the index, what the index held of
    them saved first (:mod:`bot.party_rescue`). The index is derived from the records
    (before session 15 it kept a deleted party for good); before session 28 their rows
    were dropped with a log line only, every message they sent lost with them. A copy
    that cannot be written keeps the rows: the next start tries again."""
    try:
        copy, lines = save_removed_party(conn, directory, party_id)
    except OSError as exc:
        log.error(
            "party %s has no record any more, and what the index holds of them cannot be "
            "saved (%s): kept in the index until it can",
            party_id,
            exc,
        )
        return
    messages = message_count(lines)
    log.warning(
        "party %s has no record any more: taken out of the index; the %d messages the "
        "index held are saved as %s",
        party_id,
        messages,
        copy,
    )
    _forget_party(conn, party_id)
    report.removed_parties += 1
    report.saved_parties[f"{party_id}.jsonl"] = (copy, messages)


def _forget_party(conn: SyncConn, party_id: str) -> None:
    # external_messages and escalations go with the party (ON DELETE CASCADE)
    conn.execute("DELETE FROM external_parties WHERE id = ?", (party_id,))
    conn.execute("DELETE FROM index_meta WHERE key = ?", (f"ext:{party_id}",))
