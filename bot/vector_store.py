"""The vector tables of ``conversations.db``: their vector space, reads, writes, pruning.

``index_meta['embedding_model']`` names the model the vectors were made with. Opening the
vector index with another model (or dimension count) drops every stored vector and marks
them for a background rebuild (:func:`prepare`); ``index_meta['embedding_turn_window']``
the ``embedding.turn_window`` the turn windows were made with, another one dropping
those alone (:func:`drop_turn_windows`); :func:`prune` drops the vectors of turns
that are gone or are readouts. Each turn window and abbreviation is written twice: float32
into sqlite-vec's ``turns_vec`` / ``abbreviations_vec``, and sign bits plus a float16 copy
into the plain ``turn_vectors`` / ``abbreviation_vectors`` that KNN reads
(:mod:`bot.vector_knn`). Every function runs on a connection's thread
(:meth:`bot.db.Database.run`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from bot.db import SyncConn
from bot.schema import create_vector_tables
from bot.term_vectors import META_KEY as TERMS_KEY
from bot.vector_codec import to_blob, to_half

META_KEY = "embedding_model"
PROBE_KEY = "embedding_probe"  # the model's vector for a fixed text (EmbeddingService.probe)
# The embedding.turn_window (neighbours a side) the stored turn windows hold. A store
# without it (before session 42) is taken as made with the configured one and records
# it: each start's rebuild re-embedded every window whose window_last disagreed with
# the configured radius, so only a conversation's last windows could be of another
# size, and taking it as the default (1) would re-embed every window of a store
# configured otherwise from the start (~30 minutes at 105,000 turns) for those few.
WINDOW_KEY = "embedding_turn_window"
# The same model gives the same probe vector up to float noise (cosine 1.0); another
# model's is unrelated to it (MiniLM against a rolled copy of itself: ~0.1).
SAME_SPACE_COSINE = 0.99


def text_digest(text: str) -> str:
    """The hash of an embedded text kept with its vector (``turn_vectors.text_hash``,
    ``abbreviation_vectors.text_hash``): SHA-1, hex."""
    return hashlib.sha1(text.encode()).hexdigest()


def _another_space(conn: SyncConn, probe: np.ndarray) -> bool:
    """Whether the stored vectors come from another model than the one giving ``probe``.
    A store without a recorded probe (made before session 16) is taken as the same."""
    row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (PROBE_KEY,)).fetchone()
    if row is None:
        return False
    try:
        stored = np.asarray(json.loads(row[0]), dtype=np.float32)
    except (ValueError, TypeError):
        return True  # unreadable: rebuilding is the safe side
    if stored.shape != probe.shape:
        return True
    return float(stored @ probe) < SAME_SPACE_COSINE * float(np.linalg.norm(stored))


def other_model(conn: SyncConn, model_id: str, probe: np.ndarray | None = None) -> str | None:
    """The model the stored vectors were made with when it is not ``model_id`` (or the
    same name for another vector space, told by ``probe``: see :func:`prepare`); None
    when they are this model's, or none is recorded yet."""
    row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (META_KEY,)).fetchone()
    if row is None:
        return None
    if row[0] != model_id:
        return str(row[0])
    if probe is not None and _another_space(conn, probe):
        return f"another model named {row[0]}"
    return None


def not_searchable_here(conn: SyncConn, model_id: str, probe: np.ndarray | None) -> str | None:
    """Why a process that does not build vectors (a reading command) cannot search the
    stored ones with the model ``model_id``: none stored yet, or another model's (which
    :func:`prepare` would drop); None when it can. Reads only."""
    if conn.execute("SELECT 1 FROM index_meta WHERE key = ?", (META_KEY,)).fetchone() is None:
        return "no vectors are stored yet (the daemon builds them)"
    other = other_model(conn, model_id, probe)
    if other is None:
        return None
    return (
        f"the stored vectors are of {other}, this configuration loads {model_id} (the "
        "daemon rebuilds them when restarted with this model)"
    )


def terms_complete(conn: SyncConn, model_id: str, build_terms: bool) -> bool:
    """Whether the word vectors of soft coverage cover every turn in ``model_id``'s
    space, as :func:`prepare` finds them, for a process that writes nothing. Reads only."""
    row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (TERMS_KEY,)).fetchone()
    return build_terms and row is not None and row[0] == model_id


def other_window(conn: SyncConn, radius: int) -> str | None:
    """The ``embedding.turn_window`` the stored turn windows were made with when it is
    not ``radius`` (as recorded: unreadable is another one too); None when it is, or
    none is recorded (see :data:`WINDOW_KEY`)."""
    row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (WINDOW_KEY,)).fetchone()
    return None if row is None or row[0] == str(radius) else str(row[0])


def drop_turn_windows(conn: SyncConn) -> None:
    """Drop every turn window's vector (another ``embedding.turn_window``): the notes'
    vectors and the word vectors of soft coverage do not depend on it and are kept."""
    conn.execute("DELETE FROM turns_vec")
    conn.execute("DELETE FROM turn_vectors")


def prepare(
    conn: SyncConn,
    model_id: str,
    dims: int,
    build_terms: bool,
    probe: np.ndarray | None = None,
    *,
    radius: int,
) -> tuple[bool, bool]:
    """Create the vector tables for ``model_id`` (dropping another model's vectors) and
    turn windows of ``radius`` neighbours a side (dropping windows of another size).

    ``probe`` (the loaded model's unit vector for a fixed text) also tells another model
    apart when it has the same name and dimensions (``embedding.model_path`` pointed at
    another model): the name alone kept the old vectors, compared with the new model's.

    Returns ``(rebuild, terms_ready)``: whether vectors must be rebuilt in the background
    (a model change, another window size, or turns indexed before any vector), and
    whether the word vectors of soft coverage cover every turn.
    """
    row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (META_KEY,)).fetchone()
    stale = other_model(conn, model_id, probe) is not None
    if stale:
        conn.execute("DROP TABLE IF EXISTS turns_vec")
        conn.execute("DROP TABLE IF EXISTS abbreviations_vec")
        conn.execute("DELETE FROM turn_vectors")
        conn.execute("DELETE FROM abbreviation_vectors")
        conn.execute("DELETE FROM term_vectors")
    create_vector_tables(conn, dims)
    # Before session 42 another embedding.turn_window was never noticed: the stored
    # windows kept their old size, and window_last, compared as if the size were the
    # same, left a conversation's last windows at it for good.
    resized = not stale and other_window(conn, radius) is not None
    if resized:
        drop_turn_windows(conn)
    conn.executemany(
        "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
        [(META_KEY, model_id), (WINDOW_KEY, str(radius))],
    )
    if probe is not None:
        conn.execute(
            "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
            (PROBE_KEY, json.dumps([round(float(x), 6) for x in probe])),
        )
    has_turns = bool(conn.execute("SELECT 1 FROM turns LIMIT 1").fetchone())
    if not build_terms:
        # turns stored from now on get no word vectors: the table stops being
        # complete, and a later start with soft coverage on completes it
        conn.execute("DELETE FROM index_meta WHERE key = ?", (TERMS_KEY,))
        return stale or resized or (row is None and has_turns), False
    terms = conn.execute("SELECT value FROM index_meta WHERE key = ?", (TERMS_KEY,)).fetchone()
    terms_ready = not stale and terms is not None and terms[0] == model_id
    if not has_turns and not terms_ready:
        # an empty index: every word arrives with its turn (index_turns)
        conn.execute(
            "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
            (TERMS_KEY, model_id),
        )
        terms_ready = True
    rebuild = stale or resized or (row is None and has_turns) or not terms_ready
    return rebuild, terms_ready


def _has_vectors(conn: SyncConn) -> bool:
    return conn.execute("SELECT 1 FROM turn_vectors LIMIT 1").fetchone() is not None


def prepare_telling(conn: SyncConn, **kwargs: Any) -> tuple[bool, bool, str | None]:
    """:func:`prepare`, plus why stored vectors were dropped (another model, the same
    name for another vector space, another ``embedding.turn_window``), or None when
    nothing was lost: a first build, or vectors only missing (turns indexed while
    keyword-only)."""
    row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (META_KEY,)).fetchone()
    other = other_model(conn, kwargs["model_id"], kwargs.get("probe"))
    window = other_window(conn, kwargs["radius"])
    had = _has_vectors(conn)
    rebuild, terms_ready = prepare(conn, **kwargs)
    lost = None
    if row is not None and row[0] != kwargs["model_id"]:
        lost = f"the model changed from {row[0]}"
    elif had and other is not None:
        lost = "the model is another one under the same name"
    elif had and window is not None:
        lost = f"embedding.turn_window changed from {window} to {kwargs['radius']}"
    return rebuild, terms_ready, lost


def vectors_missing(conn: SyncConn) -> bool:
    """Whether a recallable turn has no window vector, or a conversation's notes none:
    what search by meaning reads is incomplete. The word vectors of soft coverage are
    not counted: without them the ranker leaves out its soft features, and every turn
    is still found by meaning. (They alone made ``my-agent search`` say search by
    meaning was being rebuilt, with every turn and note embedded.)"""
    turn = conn.execute(
        "SELECT 1 FROM turns t WHERE t.recall = 1 AND NOT EXISTS "
        "(SELECT 1 FROM turn_vectors v WHERE v.turn_id = t.id) LIMIT 1"
    ).fetchone()
    if turn is not None:
        return True
    note = conn.execute(
        # (notes of only blanks get no vector: VectorIndex.index_abbreviation)
        "SELECT 1 FROM conversations c WHERE trim(c.abbreviation, ' ' || char(9, 10, 13)) <> '' "
        "AND NOT EXISTS "
        "(SELECT 1 FROM abbreviation_vectors a WHERE a.conversation_id = c.id) LIMIT 1"
    ).fetchone()
    return note is not None


def vectors_owed(conn: SyncConn) -> tuple[int, int]:
    """How many recallable turns have no window vector, and conversations' notes none:
    :func:`vectors_missing` counted (what ``my-agent reindex`` leaves to the daemon)."""
    turns = conn.execute(
        "SELECT count(*) FROM turns t WHERE t.recall = 1 AND NOT EXISTS "
        "(SELECT 1 FROM turn_vectors v WHERE v.turn_id = t.id)"
    ).fetchone()[0]
    notes = conn.execute(
        "SELECT count(*) FROM conversations c "
        "WHERE trim(c.abbreviation, ' ' || char(9, 10, 13)) <> '' AND NOT EXISTS "
        "(SELECT 1 FROM abbreviation_vectors a WHERE a.conversation_id = c.id)"
    ).fetchone()[0]
    return int(turns), int(notes)


def prune(conn: SyncConn) -> list[int]:
    """Drop vectors whose turn no longer exists (a rebuilt or trimmed index) or is a
    readout (``turns.recall = 0``, embedded before index version 5); returns the turn
    ids dropped (from ``turns_vec`` or ``turn_vectors``: the in-memory matrix, read from
    the latter, drops them too)."""
    gone = [
        int(r[0])
        for r in conn.execute(
            "SELECT rowid FROM turns_vec WHERE rowid NOT IN (SELECT id FROM turns WHERE recall = 1)"
        )
    ]
    conn.executemany("DELETE FROM turns_vec WHERE rowid = ?", [(g,) for g in gone])
    bits_gone = [
        int(r[0])
        for r in conn.execute(
            "SELECT turn_id FROM turn_vectors "
            "WHERE turn_id NOT IN (SELECT id FROM turns WHERE recall = 1)"
        )
    ]
    conn.executemany("DELETE FROM turn_vectors WHERE turn_id = ?", [(g,) for g in bits_gone])
    conn.execute(
        "DELETE FROM abbreviations_vec WHERE conversation_id NOT IN (SELECT id FROM conversations)"
    )
    return sorted(set(gone) | set(bits_gone))


def read_windows(conn: SyncConn, conversation_id: str) -> tuple[list[Any], dict[int, int]]:
    """A conversation's recallable turns ``(id, content, forwarded)`` in order (the mail
    an owner's turn keeps apart from its content, bot/forwards.py, or None), and the
    ``window_last`` each stored window saw (turn id -> last turn id)."""
    # A user turn and its reply share a turn number: order by id within it.
    turns = conn.execute(
        "SELECT id, content, forwarded FROM turns WHERE conversation_id = ? AND recall = 1 "
        "ORDER BY turn_number, id",
        (conversation_id,),
    ).fetchall()
    done = dict(
        conn.execute(
            "SELECT turn_id, window_last FROM turn_vectors WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchall()
    )
    return turns, done


def store_turn_vectors(
    conn: SyncConn,
    conversation_id: str,
    todo: list[tuple[int, int, str]],
    vectors: np.ndarray,
    bits: np.ndarray,
) -> None:
    """Write the windows ``todo`` ((turn id, window_last, text)) with their vectors, and
    the hash of each text (what ``my-agent reindex`` compares: bot/reindex_carry.py)."""
    ids = [int(t[0]) for t in todo]
    # vec0 has no upsert: delete then insert.
    conn.executemany("DELETE FROM turns_vec WHERE rowid = ?", [(i,) for i in ids])
    conn.executemany(
        "INSERT INTO turns_vec (rowid, embedding) VALUES (?, ?)",
        [(i, to_blob(v)) for i, v in zip(ids, vectors, strict=True)],
    )
    conn.executemany(
        "INSERT OR REPLACE INTO turn_vectors (turn_id, conversation_id, window_last, "
        "text_hash, bits, vector) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (t[0], conversation_id, t[1], text_digest(t[2]), b.tobytes(), to_half(v))
            for t, b, v in zip(todo, bits, vectors, strict=True)
        ],
    )


def abbreviation_hash(conn: SyncConn, conversation_id: str) -> str | None:
    """The hash of the abbreviation text whose vector is stored, if any."""
    row = conn.execute(
        "SELECT text_hash FROM abbreviation_vectors WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def store_abbreviation(
    conn: SyncConn, conversation_id: str, text_hash: str, vector: np.ndarray
) -> None:
    """Write (replace) one conversation's abbreviation vector."""
    conn.execute("DELETE FROM abbreviations_vec WHERE conversation_id = ?", (conversation_id,))
    conn.execute(
        "INSERT INTO abbreviations_vec (conversation_id, embedding) VALUES (?, ?)",
        (conversation_id, to_blob(vector)),
    )
    conn.execute(
        "INSERT OR REPLACE INTO abbreviation_vectors (conversation_id, text_hash, "
        "vector) VALUES (?, ?, ?)",
        (conversation_id, text_hash, to_half(vector)),
    )


def delete_abbreviation(conn: SyncConn, conversation_id: str) -> None:
    """Drop one conversation's abbreviation vector (its notes are empty now)."""
    conn.execute("DELETE FROM abbreviations_vec WHERE conversation_id = ?", (conversation_id,))
    conn.execute("DELETE FROM abbreviation_vectors WHERE conversation_id = ?", (conversation_id,))


__all__ = [
    "META_KEY",
    "WINDOW_KEY",
    "abbreviation_hash",
    "delete_abbreviation",
    "drop_turn_windows",
    "other_window",
    "prepare",
    "prune",
    "read_windows",
    "store_abbreviation",
    "store_turn_vectors",
    "terms_complete",
    "text_digest",
    "vectors_missing",
    "vectors_owed",
]
