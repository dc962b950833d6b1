"""Migration 12 of ``conversations.db``: the conversations' titles in a keyword index.

A title was shown with every result but never searched: a conversation the owner had
renamed "Homelab storage saga" was not found by "homelab" when its turns said "NAS" and
"disks", and a named conversation ranked no higher for the words of its own name than
one that used them once in passing. ``titles`` holds the text ``titles_fts`` indexes for
each titled conversation (:func:`title_text`: the title in its
:func:`bot.fts_text.fts_content` form, so Chinese, Japanese, Korean and Thai are split as
in ``turns_fts``); ``titles_fts`` (porter unicode61, like ``turns_fts``) takes its external
content from it and is kept in step by triggers, so a title written, changed or deleted
(a conversation deleted: ``ON DELETE CASCADE``) changes the index in the same statement,
as migration 10 does for the notes. The writers only maintain ``titles``
(:func:`bot.index.upsert_conversation`); search reads it in :mod:`bot.search.titles`.
"""

from __future__ import annotations

from bot.db import SyncConn
from bot.fts_text import fts_content


def title_text(title: str) -> str:
    """What ``titles_fts`` indexes for a conversation's title."""
    return fts_content(title)


# One statement each: a trigger's body holds ";", which run_script would split.
_STATEMENTS = (
    """
    CREATE TABLE titles (
        id INTEGER PRIMARY KEY,
        conversation_id TEXT NOT NULL UNIQUE REFERENCES conversations(id) ON DELETE CASCADE,
        text TEXT NOT NULL,  -- title_text(title): what titles_fts indexes
        manual INTEGER NOT NULL DEFAULT 0  -- the owner's title (conversations.manually_named)
    )
    """,
    """
    CREATE VIRTUAL TABLE titles_fts USING fts5(
        text, content='titles', content_rowid='id', tokenize='porter unicode61'
    )
    """,
    """
    CREATE TRIGGER titles_fts_insert AFTER INSERT ON titles BEGIN
        INSERT INTO titles_fts (rowid, text) VALUES (new.id, new.text);
    END
    """,
    """
    CREATE TRIGGER titles_fts_delete AFTER DELETE ON titles BEGIN
        INSERT INTO titles_fts (titles_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END
    """,
    """
    CREATE TRIGGER titles_fts_update AFTER UPDATE ON titles BEGIN
        INSERT INTO titles_fts (titles_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO titles_fts (rowid, text) VALUES (new.id, new.text);
    END
    """,
)


def index_v12(conn: SyncConn) -> None:
    """``titles``, ``titles_fts`` and their triggers, filled from the titles already
    written (``conversations.title``) inside the migration's transaction."""
    for statement in _STATEMENTS:
        conn.execute(statement)
    rows = conn.execute(
        "SELECT id, title, manually_named FROM conversations "
        "WHERE title IS NOT NULL AND trim(title) != ''"
    ).fetchall()
    conn.executemany(
        "INSERT INTO titles (conversation_id, text, manual) VALUES (?, ?, ?)",
        [(conv_id, title_text(title), int(bool(manual))) for conv_id, title, manual in rows],
    )
