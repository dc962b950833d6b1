"""Migration 8 of ``conversations.db``: ``turns_fts`` indexes a derived text
(:mod:`bot.fts_text`), so words of Chinese, Japanese, Korean and Thai are found inside the
runs of characters they are written in."""

from __future__ import annotations

from bot.db import SyncConn
from bot.fts_text import searchable
from bot.sqlite_conn import run_script

# Non-ASCII content (a GLOB range over code points): the only rows whose indexed text
# can differ from their content.
_NON_ASCII = "content GLOB '*[^' || char(1) || '-' || char(127) || ']*'"


def index_v8(conn: SyncConn) -> None:
    """``turns.fts_text`` (NULL: the content itself) and ``recall_turns`` handing FTS5
    ``coalesce(fts_text, content)``; the turns already indexed whose text changes are
    taken out of ``turns_fts`` with their old text and put back with the new one (a
    targeted update instead of a ``rebuild`` of every turn)."""
    conn.execute("ALTER TABLE turns ADD COLUMN fts_text TEXT")
    run_script(
        conn,
        """
        DROP VIEW recall_turns;
        CREATE VIEW recall_turns AS
            SELECT id, coalesce(fts_text, content) AS content, conversation_id,
                turn_number, timestamp FROM turns
            WHERE recall = 1
        """,
    )
    rows = conn.execute(
        "SELECT id, content, conversation_id, turn_number, timestamp, recall FROM turns "
        f"WHERE {_NON_ASCII}"
    ).fetchall()
    for turn_id, content, conv_id, number, stamp, recall in rows:
        derived = searchable(content)
        if derived is None:
            continue
        if recall:  # readouts were never in turns_fts
            conn.execute(
                "INSERT INTO turns_fts (turns_fts, rowid, content, conversation_id, "
                "turn_number, timestamp) VALUES ('delete', ?, ?, ?, ?, ?)",
                (turn_id, content, conv_id, number, stamp),
            )
        conn.execute("UPDATE turns SET fts_text = ? WHERE id = ?", (derived, turn_id))
        if recall:
            conn.execute(
                "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, "
                "timestamp) VALUES (?, ?, ?, ?, ?)",
                (turn_id, derived, conv_id, number, stamp),
            )
