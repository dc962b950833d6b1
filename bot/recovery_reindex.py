"""What ``my-agent reindex`` saves from the old index before it deletes it.

Start-up recovery saves what the index held of a deleted transcript or party record
before taking it out (:mod:`bot.transcript_rescue`, :mod:`bot.party_rescue`). A reindex
deletes the whole index first and rebuilds it from the files, so those rows went with
it, silently (before session 28): a transcript lost by mistake, then a reindex (the
remedy ``status`` gives for a damaged index), and its turns were gone for good. The
same copies are now written from the old index before it is deleted, and the reindex
report names them; the daemon tells the owner at its next start
(:mod:`bot.recovery_notices`). So are the turns a transcript that shrank since the last
start no longer holds (session 39), and such a transcript is given the line that keeps
the lost turns' numbers taken (session 40), as start-up recovery does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bot.party_rescue import save_removed_party
from bot.recovery_notices import party_notice, shrunk_notice, transcript_notice
from bot.status_reads import connect_readonly
from bot.transcript import TranscriptStore
from bot.transcript_lines import Line, encode
from bot.transcript_rescue import index_lines, numbering_line, save_lost_turns, save_removed_copy

log = logging.getLogger("my_agent.recovery")


def save_before_reindex(index_path: Path, conversations_dir: Path, external_dir: Path) -> list[str]:
    """Save what the index at ``index_path`` holds of each conversation and party whose
    file is gone, and of each transcript that shrank; the lines of the reindex report
    naming each copy. An index that cannot be read (damaged: the reason for many a
    reindex) saves what it can and says what it could not. Raises :class:`OSError` when
    a copy cannot be written: the caller must not delete the index then."""
    if not index_path.is_file():
        return []
    try:
        conn = connect_readonly(index_path)
    except Exception as exc:  # sqlite3 and pysqlite3 raise their own classes
        return [_unreadable(index_path, exc)]
    saved: list[str] = []
    try:
        try:
            conversations = dict(conn.execute("SELECT id, indexed_bytes FROM conversations"))
            parties = [r[0] for r in conn.execute("SELECT id FROM external_parties")]
        except Exception as exc:
            return [_unreadable(index_path, exc)]
        if conversations_dir.is_dir():  # a missing directory (not mounted?) proves nothing
            store = TranscriptStore(conversations_dir)
            present = set(store.conversation_ids())
            for conv_id in sorted(present & set(conversations)):
                saved.extend(_save_shrunk(conn, store, conv_id, conversations[conv_id]))
            for conv_id in sorted(set(conversations) - present):
                try:
                    copy, turns = save_removed_copy(conn, conversations_dir, conv_id)
                except OSError:
                    raise
                except Exception as exc:  # a damaged page of its rows
                    saved.append(f"{conv_id}.jsonl is missing and its rows cannot be read: {exc}")
                    continue
                log.warning("%s is missing: %d turns saved as %s", conv_id, turns, copy)
                saved.append(transcript_notice(f"{conv_id}.jsonl", copy, turns))
        if external_dir.is_dir():
            present = {path.stem for path in external_dir.glob("p*.jsonl")}
            for party_id in sorted(set(parties) - present):
                try:
                    copy, lines = save_removed_party(conn, external_dir, party_id)
                except OSError:
                    raise
                except Exception as exc:
                    saved.append(f"{party_id}.jsonl is missing and its rows cannot be read: {exc}")
                    continue
                log.warning("party %s has no record any more: saved as %s", party_id, copy)
                saved.append(party_notice(f"{party_id}.jsonl", copy, lines))
    finally:
        conn.close()
    return saved


def _save_shrunk(conn: Any, store: TranscriptStore, conv_id: str, indexed: int) -> list[str]:
    """Save the turns of a transcript shorter than the index says that the file no
    longer holds (:func:`bot.transcript_rescue.save_lost_turns`): the rebuilt index
    would not have them (session 39). Its report line, if any."""
    try:
        if store.path(conv_id).stat().st_size >= (indexed or 0):
            return []
        lines = store.read_lines(conv_id)
    except OSError as exc:  # the rebuild skips it as well (bot.recovery)
        log.warning("%s cannot be read: %s", conv_id, exc)
        return []
    try:
        saved = save_lost_turns(conn, store.directory, conv_id, lines)
    except OSError:
        raise
    except Exception as exc:  # a damaged page of its rows
        return [f"{conv_id}.jsonl shrank and its rows cannot be read: {exc}"]
    if saved is None:
        return []
    copy, turns = saved
    log.warning("%s shrank: the %d turns it lost are saved as %s", conv_id, turns, copy)
    _keep_numbering(conn, store, conv_id, lines)
    return [shrunk_notice(f"{conv_id}.jsonl", copy, turns)]


def _keep_numbering(conn: Any, store: TranscriptStore, conv_id: str, lines: list[Line]) -> None:
    """Write the line that numbers the shrunk transcript's next turn past the ones it
    lost (:func:`bot.transcript_rescue.numbering_line`), as start-up recovery does: the
    rebuilt index takes its numbers from the files (session 40). Raises
    :class:`OSError` when it cannot be written: the caller must not delete the index."""
    path = store.path(conv_id)
    try:
        row = conn.execute(
            "SELECT turn_count FROM conversations WHERE id = ?", (conv_id,)
        ).fetchone()
        line = numbering_line(lines, int(row[0] or 0) if row else 0)
        # a 0-byte file: its meta line first (the rebuild registers it from that)
        meta = index_lines(conn, conv_id)[:1] if path.stat().st_size == 0 else []
    except OSError:
        raise
    except Exception as exc:  # a damaged page: numbered from the file, as before
        log.warning("%s: the numbers of the turns it lost cannot be read: %s", conv_id, exc)
        return
    if line is not None:
        store.append_now(path, encode([*meta, line]))


def _unreadable(index_path: Path, exc: BaseException) -> str:
    return (
        f"the old {index_path.name} could not be read ({exc}): the rows of transcripts or"
        " party records deleted since the last start (if any) could not be saved"
    )
