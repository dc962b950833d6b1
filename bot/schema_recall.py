"""Recall tables of ``conversations.db`` (appended by the lead to ``INDEX_MIGRATIONS``).

The float vectors live in sqlite-vec tables (``turns_vec``, ``abbreviations_vec``, created
by :func:`bot.schema.create_vector_tables` when the extension loads). These plain tables
record what each vector was made from, so new turns, edited abbreviations and a changed
model can be detected, and keep what interactive search reads: the sign bits of every
turn vector (the in-memory prefilter of :mod:`bot.vector_knn`) and a float16 copy of each
vector. sqlite-vec 0.1.9 reads a vec0 row by rowid in about 0.4 ms (a scan per lookup),
a plain table in microseconds, and rescoring needs hundreds of rows per query.
"""

from __future__ import annotations

from bot.db import SyncConn


def _recall_v1(conn: SyncConn) -> None:
    # Statement by statement: executescript() would commit the migration's transaction.
    for statement in _RECALL_V1.split(";"):
        if statement.strip():
            conn.execute(statement)


_RECALL_V1 = """
        CREATE TABLE turn_vectors (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE,
            conversation_id TEXT NOT NULL,
            -- id of the last turn inside the embedded window: when a later neighbour
            -- arrives the window changes and the vector is re-embedded
            window_last INTEGER NOT NULL,
            bits BLOB NOT NULL,     -- sign bits, the in-memory prefilter
            vector BLOB NOT NULL    -- float16 copy for rescoring (vec0 point reads are slow)
        );
        CREATE INDEX turn_vectors_conversation ON turn_vectors(conversation_id);
        CREATE TABLE abbreviation_vectors (
            conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            text_hash TEXT NOT NULL,
            vector BLOB NOT NULL    -- float16, loaded into memory for the KNN
        )
"""


def _recall_v2(conn: SyncConn) -> None:
    # one vector per distinct content word (bot.term_vectors): the ranker's soft coverage
    conn.execute(
        """
        CREATE TABLE term_vectors (
            term TEXT PRIMARY KEY,
            vector BLOB NOT NULL    -- float16, the word embedded alone
        ) WITHOUT ROWID
        """
    )


RECALL_MIGRATIONS = [_recall_v1, _recall_v2]
