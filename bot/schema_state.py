"""Numbered migrations of ``state.db``: the operational state no transcript holds.

The outbox of replies not yet delivered and the channel cursors (v1), the claims of
commands with effects in progress (v2), when the owner was last given an hourly notice
(v3), the numeric ids that configured Telegram @usernames were first seen with (v4).
Unlike ``conversations.db`` it cannot be rebuilt, so reindex never deletes it;
:data:`bot.schema.STATE_MIGRATIONS` is this list.
"""

from __future__ import annotations

from bot.db import Migration, SyncConn

# Statement by statement, as bot.schema.run_script runs a script (executescript would
# commit the migration's transaction first); that helper is not imported here, because
# bot.schema imports this module.


def _state_v1(conn: SyncConn) -> None:
    conn.execute(
        """
        CREATE TABLE outbox (
            id INTEGER PRIMARY KEY,
            channel TEXT NOT NULL,
            payload TEXT NOT NULL,              -- JSON of the OutboundMessage
            conversation_id TEXT,
            party_id TEXT,
            dedup_key TEXT UNIQUE,              -- e.g. "conv-...:7:reply": sent at most once
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'sent', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt REAL NOT NULL DEFAULT 0,
            created TEXT NOT NULL,
            sent TEXT,
            message_ref TEXT,
            last_error TEXT
        )
        """
    )
    conn.execute("CREATE INDEX outbox_pending ON outbox(status, next_attempt)")
    conn.execute(
        """
        CREATE TABLE channel_cursors (
            channel TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated TEXT NOT NULL,
            PRIMARY KEY (channel, key)
        )
        """
    )


def _state_v2(conn: SyncConn) -> None:
    # Commands with effects claimed before they run (bot/command_runs.py): a row lives
    # from the claim until the transaction that queues the command's answer.
    conn.execute(
        """
        CREATE TABLE command_runs (
            channel TEXT NOT NULL,
            message_id TEXT NOT NULL,
            command TEXT NOT NULL,
            effect TEXT NOT NULL DEFAULT '{}',  -- JSON: what the effect is recognised by
            created TEXT NOT NULL,
            PRIMARY KEY (channel, message_id)
        ) WITHOUT ROWID"""
    )


def _state_v3(conn: SyncConn) -> None:
    # When the owner was last given a once-an-hour notice (bot/owner_notices.py): kept
    # in memory, it was given again at every start of a daemon in a crash loop.
    conn.execute(
        "CREATE TABLE owner_notices (key TEXT PRIMARY KEY, told TEXT NOT NULL) WITHOUT ROWID"
    )


def _state_v4(conn: SyncConn) -> None:
    # Trust on first use of a configured @username (bot/username_bindings.py): the
    # numeric user id it was first seen with. A username passes to whoever registers it
    # after its holder renames; the binding keeps that next holder from being taken for
    # the owner or a contact.
    conn.execute(
        """
        CREATE TABLE username_bindings (
            channel TEXT NOT NULL,
            username TEXT NOT NULL,             -- normalised: "@olga"
            user_id TEXT NOT NULL,              -- the numeric id it was first seen with
            bound TEXT NOT NULL,
            PRIMARY KEY (channel, username)
        ) WITHOUT ROWID"""
    )


STATE_MIGRATIONS: list[Migration] = [_state_v1, _state_v2, _state_v3, _state_v4]
