"""``my-agent reindex`` keeps the vectors that are still valid (:func:`carry_vectors`).

The rebuilt index starts with no vector. Before session 42 every one was embedded again
after a reindex: at 105,000 turns the daemon re-embedded for ~30 minutes under load,
search by meaning incomplete all that time, though the model and nearly every text were
the same. Now, once the rows are rebuilt, the vectors of the old index (set aside until
then, :mod:`bot.index_files`) that provably embed the same text with the same model are
copied into the new one:

- the model: the old ``index_meta.embedding_model`` is the configured one (``model@dims``,
  :attr:`bot.embedding.EmbeddingService.model_id`). Its probe is copied with it, so the
  daemon's open still drops every vector should another model answer to that name
  (:func:`bot.vector_store.prepare`), as it would have with the old index;
- a turn window: its text is the one the old vector embedded, by its hash
  (bot/reindex_windows.py); none when the old index records another
  ``embedding.turn_window`` (``index_meta.embedding_turn_window``: the daemon would drop
  every window at its start, :func:`bot.vector_store.prepare`); an old index without
  that record is taken as made with the configured one, as the daemon takes it;
- a note: ``abbreviation_vectors.text_hash`` is the hash of the rebuilt notes;
- a word vector of soft coverage: the word is its text. The old index's mark that they
  cover every turn (``index_meta.term_vectors``, :mod:`bot.term_vectors`) is kept when
  every word of the rebuilt turns has one after the copy (:func:`_keep_terms_mark`).

The bytes are copied as they are (float32, float16 copy, sign bits) once the three are
seen to agree. Whatever is not carried is left owed and embedded as before (the daemon's
start, ``reindex --vectors``). An old index whose vectors cannot be read (damage, the
usual reason for a reindex) carries nothing: logged, what was copied removed, every
vector embedded again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bot.db import SyncConn, connect_sync
from bot.reindex_windows import Windows, matched_windows
from bot.schema import create_vector_tables
from bot.term_vectors import META_KEY as TERMS_KEY
from bot.term_vectors import all_covered
from bot.vector_codec import sign_bits
from bot.vector_store import META_KEY, PROBE_KEY, WINDOW_KEY, text_digest

log = logging.getLogger("my_agent.vectors")

ROWS_AT_ONCE = 2048  # vectors read from the old index, and written, at a time

KEPT_NONE = {"turns": 0, "abbreviations": 0, "terms": 0}
UNREADABLE = (
    "the vectors of the old index could not be read ({error}): none kept, every vector is"
    " embedded again"
)


async def carry_vectors(s: Any, aside: Path, warnings: list[str]) -> dict[str, int] | None:
    """Copy the still-valid vectors of the old index ``aside`` into the rebuilt one of the
    services ``s``; returns how many turn windows (``turns``), notes (``abbreviations``)
    and words (``terms``) were kept, None when this store has no vectors. Nothing is
    carried (zeros) when the old index is of another model or has none; when it cannot
    be read, what was copied is removed, and a warning logged and added to ``warnings``
    (the reindex's report)."""
    if not s.config.embedding.enabled or not s.index_db.vec_available:
        return None
    if not aside.exists():
        return dict(KEPT_NONE)
    old: SyncConn | None = None
    try:
        old = await asyncio.to_thread(connect_sync, aside, s.index_db.driver)
        kept = await _carry(s, old, s.search.embedder.model_id)
    except asyncio.CancelledError:
        if old is not None:  # (its thread may still read: closed with the process)
            old.interrupt()
            old = None
        raise  # (what was copied is valid: kept)
    except Exception as exc:
        log.warning("the old index %s cannot be read: %s", aside.name, exc)
        warnings.append(UNREADABLE.format(error=exc))
        await s.index_db.run(drop_carried)
        return dict(KEPT_NONE)
    finally:
        if old is not None:
            old.close()
    log.info(
        "kept from the old index: %d turn windows, %d notes, %d words",
        kept["turns"],
        kept["abbreviations"],
        kept["terms"],
    )
    return kept


async def _carry(s: Any, old: SyncConn, model_id: str) -> dict[str, int]:
    meta = await asyncio.to_thread(_old_meta, old)
    # (not copied with the rest: kept only once the rebuilt turns are seen covered)
    terms_were_complete = meta.pop(TERMS_KEY, None) == model_id
    if meta.get(META_KEY) != model_id:
        if META_KEY in meta:  # (none: the old index had no vectors)
            log.info(
                "the old index's vectors are of %s, not %s: none kept", meta[META_KEY], model_id
            )
        return dict(KEPT_NONE)
    dims = int(model_id.rsplit("@", 1)[1])
    radius = s.config.embedding.turn_window
    # Before session 42 a window stored before its text_hash was matched as if made with
    # the configured radius, whatever the old index's was: a window of another size
    # was carried, and the daemon never noticed (now it drops such windows at start).
    resized = meta.get(WINDOW_KEY, str(radius)) != str(radius)
    if resized:
        log.info(
            "the old index's turn windows hold %s neighbours a side, not %d: none kept",
            meta[WINDOW_KEY],
            radius,
        )
    # (the windows carried, or embedded later, are of the configured radius)
    meta[WINDOW_KEY] = str(radius)
    await s.index_db.run(functools.partial(_start_new, dims=dims, meta=meta))
    notes: dict[str, str] = {}  # conversation id -> the hash of its rebuilt notes
    ids = await s.index_db.run(
        lambda c: c.execute("SELECT id, abbreviation FROM conversations ORDER BY id").fetchall(),
        write=False,
    )
    for conv_id, abbreviation in ids:
        text = str(abbreviation or "").strip()
        if text:
            notes[str(conv_id)] = text_digest(text)
    conv_ids = [] if resized else [str(i) for i, _ in ids]
    windows = await matched_windows(s, old, conv_ids, radius)
    kept = dict(KEPT_NONE)
    kept["turns"] = await _copy(s, old, _turn_rows(old, windows, dims), _store_turns)
    kept["abbreviations"] = await _copy(s, old, _note_rows(old, notes, dims), _store_notes)
    if s.config.search.soft_coverage:
        kept["terms"] = await _copy(s, old, _term_rows(old, dims), _store_terms)
        if terms_were_complete:
            await _keep_terms_mark(s, model_id)
    return kept


async def _keep_terms_mark(s: Any, model_id: str) -> None:
    """Mark the word vectors complete in the rebuilt index when every word of its turns
    has one after the copy. Before session 42 the mark stayed with the old index: the
    daemon's start scanned every turn's words again (minutes on a large store, though
    none was missing), ranking without soft coverage until it was done. A word of the
    rebuilt turns the old index lacks (a transcript edited) leaves it unmarked, the
    daemon's start completing the table as before."""
    if await all_covered(s.index_db):
        await s.index_db.run(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
                (TERMS_KEY, model_id),
            )
        )
    else:
        log.info("the rebuilt turns have words the old index has no vector for: owed")


def _old_meta(old: SyncConn) -> dict[str, str]:
    old.execute("PRAGMA query_only=ON")  # read, never written: it may be put back
    rows = old.execute(
        "SELECT key, value FROM index_meta WHERE key IN (?, ?, ?, ?)",
        (META_KEY, PROBE_KEY, WINDOW_KEY, TERMS_KEY),
    ).fetchall()
    return {str(k): str(v) for k, v in rows}


def _start_new(conn: SyncConn, dims: int, meta: dict[str, str]) -> None:
    """The rebuilt index gets the vector tables and the old model's record (and probe),
    with the configured window size."""
    create_vector_tables(conn, dims)
    conn.executemany(
        "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)", list(meta.items())
    )


def drop_carried(conn: SyncConn) -> None:
    """Back to a rebuilt index without vectors (an old index that failed to read)."""
    for table in ("turns_vec", "abbreviations_vec"):
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            conn.execute(f"DELETE FROM {table}")
    for table in ("turn_vectors", "abbreviation_vectors", "term_vectors"):
        conn.execute(f"DELETE FROM {table}")
    conn.execute(
        "DELETE FROM index_meta WHERE key IN (?, ?, ?, ?)",
        (META_KEY, PROBE_KEY, WINDOW_KEY, TERMS_KEY),
    )


Rows = Iterator[list[tuple[Any, ...]]]


async def _copy(
    s: Any, old: SyncConn, rows: Rows, store: Callable[[SyncConn, list[tuple[Any, ...]]], None]
) -> int:
    """Read ``rows`` batch by batch (on a thread: the old index) and write each with
    ``store`` (a unit of work of the rebuilt index); how many rows were written."""
    written = 0
    while True:
        batch = await asyncio.to_thread(next, rows, None)
        if batch is None:
            return written
        if batch:
            await s.index_db.run(lambda c, b=batch: store(c, b))
            written += len(batch)


def _agree(floats: list[bytes], halves: list[bytes], dims: int) -> np.ndarray:
    """Which vectors' float16 copies (``halves``) are the float32 ``floats`` rounded."""
    ok = np.array(
        [len(f) == 4 * dims and len(h) == 2 * dims for f, h in zip(floats, halves, strict=True)],
        dtype=bool,
    )
    if not ok.any():
        return ok
    at = np.flatnonzero(ok)
    matrix = np.frombuffer(b"".join(floats[i] for i in at), dtype=np.float32).reshape(-1, dims)
    rounded = matrix.astype(np.float16)
    given = np.frombuffer(b"".join(halves[i] for i in at), dtype=np.float16).reshape(-1, dims)
    ok[at] = (rounded.view(np.uint16) == given.view(np.uint16)).all(axis=1)
    return ok


def _turn_rows(old: SyncConn, windows: Windows, dims: int) -> Rows:
    """The carried windows' rows for :func:`_store_turns`, by a scan of the old
    ``turns_vec`` (a point read of vec0 costs a scan of its own: 0.4 ms each)."""
    if not windows:
        return
    cursor = old.execute("SELECT rowid, embedding FROM turns_vec")
    while True:
        found = [(int(r[0]), bytes(r[1])) for r in cursor.fetchmany(ROWS_AT_ONCE)]
        if not found:
            return
        wanted = [(i, f) for i, f in found if i in windows]
        if not wanted:
            yield []
            continue
        marks = ",".join("?" * len(wanted))
        copies = {
            int(r[0]): (bytes(r[1]), bytes(r[2]))
            for r in old.execute(
                f"SELECT turn_id, bits, vector FROM turn_vectors WHERE turn_id IN ({marks})",
                [i for i, _ in wanted],
            )
        }
        wanted = [(i, f) for i, f in wanted if i in copies]
        ok = _agree([f for _, f in wanted], [copies[i][1] for i, _ in wanted], dims)
        batch: list[tuple[Any, ...]] = []
        for (old_id, floats), good in zip(wanted, ok, strict=True):
            bits, half = copies[old_id]
            vector = np.frombuffer(floats, dtype=np.float32).reshape(1, dims)
            if not good or sign_bits(vector)[0].tobytes() != bits:
                continue  # a copy that disagrees: embedded again
            for new_id, conv_id, last, digest in windows[old_id]:
                batch.append((new_id, conv_id, last, digest, floats, bits, half))
        yield batch


def _store_turns(conn: SyncConn, rows: list[tuple[Any, ...]]) -> None:
    conn.executemany(
        "INSERT INTO turns_vec (rowid, embedding) VALUES (?, ?)", [(r[0], r[4]) for r in rows]
    )
    conn.executemany(
        "INSERT INTO turn_vectors (turn_id, conversation_id, window_last, text_hash, bits,"
        " vector) VALUES (?, ?, ?, ?, ?, ?)",
        [(r[0], r[1], r[2], r[3], r[5], r[6]) for r in rows],
    )


def _note_rows(old: SyncConn, notes: dict[str, str], dims: int) -> Rows:
    """The notes' vectors whose text is the rebuilt notes', for :func:`_store_notes`."""
    if not notes:
        return
    cursor = old.execute("SELECT conversation_id, embedding FROM abbreviations_vec")
    while True:
        found = [(str(r[0]), bytes(r[1])) for r in cursor.fetchmany(ROWS_AT_ONCE)]
        if not found:
            return
        wanted = [(c, f) for c, f in found if c in notes]
        copies: dict[str, bytes] = {}
        if wanted:
            marks = ",".join("?" * len(wanted))
            copies = {
                str(r[0]): bytes(r[2])
                for r in old.execute(
                    "SELECT conversation_id, text_hash, vector FROM abbreviation_vectors "
                    f"WHERE conversation_id IN ({marks})",
                    [c for c, _ in wanted],
                )
                if r[1] == notes[str(r[0])]
            }
        wanted = [(c, f) for c, f in wanted if c in copies]
        ok = _agree([f for _, f in wanted], [copies[c] for c, _ in wanted], dims)
        yield [(c, notes[c], f, copies[c]) for (c, f), good in zip(wanted, ok, strict=True) if good]


def _store_notes(conn: SyncConn, rows: list[tuple[Any, ...]]) -> None:
    conn.executemany(
        "INSERT INTO abbreviations_vec (conversation_id, embedding) VALUES (?, ?)",
        [(r[0], r[2]) for r in rows],
    )
    conn.executemany(
        "INSERT INTO abbreviation_vectors (conversation_id, text_hash, vector) VALUES (?, ?, ?)",
        [(r[0], r[1], r[3]) for r in rows],
    )


def _term_rows(old: SyncConn, dims: int) -> Rows:
    """The old index's word vectors (the rebuild embeds only the words it lacks)."""
    cursor = old.execute("SELECT term, vector FROM term_vectors")
    while True:
        found = cursor.fetchmany(ROWS_AT_ONCE * 4)
        if not found:
            return
        yield [(str(t), bytes(v)) for t, v in found if len(v) == 2 * dims]


def _store_terms(conn: SyncConn, rows: list[tuple[Any, ...]]) -> None:
    conn.executemany("INSERT OR IGNORE INTO term_vectors (term, vector) VALUES (?, ?)", rows)


__all__ = ["carry_vectors", "drop_carried"]
