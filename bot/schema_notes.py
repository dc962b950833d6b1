"""Migration 10 of ``conversations.db``: the conversations' notes in a keyword index.

Without an embedding model (keyword-only search) the notes (abbreviations, extractive or
by the model) were only read by the vector stage, so a query whose words were only in a
conversation's notes, say of turns long since compacted, found nothing by keyword.
``notes`` holds the text ``notes_fts`` indexes for each conversation's notes
(:func:`notes_text`: the abbreviation without the offline notes' label line, in its
:func:`bot.fts_text.fts_content` form, so Chinese, Japanese, Korean and Thai are split
like in ``turns_fts``). ``notes_fts`` (porter unicode61, like ``turns_fts``) takes its
external content from it and is kept in step by triggers, so a note written, replaced
or deleted (a conversation deleted: ``ON DELETE CASCADE``) changes the index in the
same statement, whichever code path wrote it. The writers only maintain
``notes`` (:func:`bot.index.upsert_conversation`).
"""

from __future__ import annotations

from bot.db import SyncConn
from bot.fts_text import fts_content

# The first line of the offline brain's notes (bot.extractive.HEADER; not imported:
# bot.extractive imports bot.search, which reaches this module through bot.index). It is
# the same in every offline note, so "notes", "language" or "model" would find them all.
EXTRACTIVE_HEADER = "Extractive notes (no language model):"


def notes_text(notes: str) -> str:
    """What ``notes_fts`` indexes for a conversation's notes: their
    :func:`~bot.fts_text.fts_content` without the offline notes' label line."""
    if notes.startswith(EXTRACTIVE_HEADER):
        notes = notes[len(EXTRACTIVE_HEADER) :].lstrip("\n")
    return fts_content(notes)


# One statement each: a trigger's body holds ";", which run_script would split.
_STATEMENTS = (
    """
    CREATE TABLE notes (
        id INTEGER PRIMARY KEY,
        conversation_id TEXT NOT NULL UNIQUE REFERENCES conversations(id) ON DELETE CASCADE,
        text TEXT NOT NULL  -- notes_text(abbreviation): what notes_fts indexes
    )
    """,
    """
    CREATE VIRTUAL TABLE notes_fts USING fts5(
        text, content='notes', content_rowid='id', tokenize='porter unicode61'
    )
    """,
    """
    CREATE TRIGGER notes_fts_insert AFTER INSERT ON notes BEGIN
        INSERT INTO notes_fts (rowid, text) VALUES (new.id, new.text);
    END
    """,
    """
    CREATE TRIGGER notes_fts_delete AFTER DELETE ON notes BEGIN
        INSERT INTO notes_fts (notes_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END
    """,
    """
    CREATE TRIGGER notes_fts_update AFTER UPDATE ON notes BEGIN
        INSERT INTO notes_fts (notes_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO notes_fts (rowid, text) VALUES (new.id, new.text);
    END
    """,
)


def index_v10(conn: SyncConn) -> None:
    """``notes``, ``notes_fts`` and their triggers, filled from the notes already
    written (``conversations.abbreviation``) inside the migration's transaction."""
    for statement in _STATEMENTS:
        conn.execute(statement)
    rows = conn.execute(
        "SELECT id, abbreviation FROM conversations WHERE abbreviation IS NOT NULL "
        "AND abbreviation != ''"
    ).fetchall()
    conn.executemany(
        "INSERT INTO notes (conversation_id, text) VALUES (?, ?)",
        [(conv_id, notes_text(text)) for conv_id, text in rows],
    )
