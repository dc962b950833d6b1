"""Migration 14 of ``conversations.db``: stores from commits whose migrations were changed
after they were on main.

A migration a store has run is never run again (its number is past the store's
``user_version``), so a migration edited or renumbered after a commit of main shipped it
left the stores of that commit with another schema than a fresh one, for good:

- migration 12 was committed without ``titles.manual`` and given it five minutes later
  (c614e8a, 180db5d): a store of c614e8a failed every index update of a titled
  conversation ("table titles has no column named manual") and every search;
- migration 8 was for a while two partial indexes of replies owed (``turns_awaiting_reply``,
  ``turns_replies``), dropped since, and migration 9 the FTS text, renumbered 8 (3d9bb9d to
  613064d): those stores kept the two indexes (a fifth more bytes per message) and never
  got ``external_messages_time`` / ``external_messages_party_time`` (the hourly counts
  scanned every stranger's message);
- migration 2's ``turn_vectors`` and ``abbreviation_vectors`` once had no ``bits`` /
  ``vector`` columns (the project's first days): those tables are made again, empty (the
  vectors are derived: the daemon embeds what is missing).

Each step does nothing to a store as today's migrations make it. Found by an upgrade
audit in session 39; ``tests/test_schema_versions.py`` now pins each version's schema, so
that a shipped migration is never edited again.
"""

from __future__ import annotations

import logging

from bot.db import SyncConn

log = logging.getLogger("my_agent.db")


def _columns(conn: SyncConn, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def index_v14(conn: SyncConn) -> None:
    """Bring a store of those commits to today's schema (see the module's docstring)."""
    titles = _columns(conn, "titles")
    if titles and "manual" not in titles:
        log.warning("repairing conversations.db: titles.manual added")
        conn.execute("ALTER TABLE titles ADD COLUMN manual INTEGER NOT NULL DEFAULT 0")
        conn.execute(
            "UPDATE titles SET manual = 1 WHERE conversation_id IN "
            "(SELECT id FROM conversations WHERE manually_named)"
        )
    for index in ("turns_awaiting_reply", "turns_replies"):
        conn.execute(f"DROP INDEX IF EXISTS {index}")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS external_messages_time ON external_messages(timestamp)"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS external_messages_party_time "
        "ON external_messages(party_id, timestamp)"
    )
    turn_vectors = _columns(conn, "turn_vectors")
    notes = _columns(conn, "abbreviation_vectors")
    if (turn_vectors and not {"bits", "vector"} <= turn_vectors) or (
        notes and "vector" not in notes
    ):
        from bot.schema_recall import RECALL_MIGRATIONS

        log.warning("repairing conversations.db: vector tables made again (re-embedded)")
        conn.execute("DROP TABLE IF EXISTS turn_vectors")
        conn.execute("DROP TABLE IF EXISTS abbreviation_vectors")
        RECALL_MIGRATIONS[0](conn)
