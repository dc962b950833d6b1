"""Numbered migrations of ``conversations.db`` (the derived index) and ``state.db``.

``conversations.db`` can always be rebuilt from the transcripts (``my-agent reindex``).
``state.db`` holds operational state that is not in any transcript: the outbox of
replies not yet delivered, the channel cursors and the claims of commands in progress
(``bot/command_runs.py``). It is never deleted by reindex. Its migrations are in
:mod:`bot.schema_state`; later ones of ``conversations.db`` in :mod:`bot.schema_recall`,
:mod:`bot.schema_fts`, :mod:`bot.schema_notes`, :mod:`bot.schema_notices` and the
modules named in :func:`_index_migrations`.
"""

from __future__ import annotations

from bot.db import Migration, SyncConn
from bot.schema_state import STATE_MIGRATIONS as STATE_MIGRATIONS  # re-exported
from bot.sqlite_conn import run_script


def _index_v1(conn: SyncConn) -> None:
    run_script(
        conn,
        """
        CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            channel TEXT NOT NULL,
            title TEXT,
            topics TEXT NOT NULL DEFAULT '[]',
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            turn_count INTEGER NOT NULL DEFAULT 0,
            participants TEXT NOT NULL DEFAULT '[]',
            abbreviation TEXT,
            needs_abbreviation INTEGER NOT NULL DEFAULT 0,
            manually_named INTEGER NOT NULL DEFAULT 0,
            -- routing: "telegram:123", "email:alice@example.com", "telegram:group:-100" ...
            identity_key TEXT,
            pinned INTEGER NOT NULL DEFAULT 0,
            model TEXT,
            channel_meta TEXT NOT NULL DEFAULT '{}',
            last_named_turn INTEGER NOT NULL DEFAULT 0,
            abbreviated_turn INTEGER NOT NULL DEFAULT 0,
            cost_total REAL NOT NULL DEFAULT 0,
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            -- bytes of the transcript already reflected here (recovery scans from there)
            indexed_bytes INTEGER NOT NULL DEFAULT 0
        );
        CREATE UNIQUE INDEX conversations_one_pin ON conversations(identity_key)
            WHERE pinned = 1;
        CREATE INDEX conversations_updated ON conversations(updated DESC);
        CREATE INDEX conversations_channel ON conversations(channel, updated DESC);

        -- One row per transcript turn line. turns_fts indexes it (external content) and
        -- turn vectors use the same rowid.
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            turn_number INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            channel TEXT,
            sender TEXT,
            awaits_reply INTEGER NOT NULL DEFAULT 1  -- 0: group context, no reply expected
        );
        CREATE INDEX turns_by_conversation ON turns(conversation_id, turn_number);

        CREATE VIRTUAL TABLE turns_fts USING fts5(
            content,
            conversation_id UNINDEXED,
            turn_number UNINDEXED,
            timestamp UNINDEXED,
            content='turns',
            content_rowid='id',
            tokenize='porter unicode61'
        );

        -- Message references (Telegram message ids, e-mail Message-IDs) -> conversation:
        -- drops redelivered messages and threads e-mail replies.
        CREATE TABLE message_refs (
            channel TEXT NOT NULL,
            ref TEXT NOT NULL,
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            direction TEXT NOT NULL CHECK (direction IN ('in', 'out')),
            PRIMARY KEY (channel, ref)
        );
        CREATE INDEX message_refs_conversation ON message_refs(conversation_id);

        -- External communications (seed 000): third parties, never in `conversations`.
        CREATE TABLE external_parties (
            id TEXT PRIMARY KEY,               -- short stable handle, e.g. "p3f9a1c"
            channel TEXT NOT NULL,
            party_key TEXT NOT NULL,           -- normalised identity on that channel
            display_name TEXT,
            chat_id TEXT,
            tier TEXT NOT NULL CHECK (tier IN ('known', 'untrusted', 'blocked')),
            tier_source TEXT NOT NULL DEFAULT 'default',  -- default | config | owner
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            last_escalation TEXT,
            context_reset_at INTEGER NOT NULL DEFAULT 0,  -- message id after a /new
            model TEXT,
            meta TEXT NOT NULL DEFAULT '{}',
            UNIQUE (channel, party_key)
        );
        CREATE TABLE external_messages (
            id INTEGER PRIMARY KEY,
            party_id TEXT NOT NULL REFERENCES external_parties(id) ON DELETE CASCADE,
            direction TEXT NOT NULL CHECK (direction IN ('in', 'out')),
            content TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            message_ref TEXT,
            kind TEXT NOT NULL DEFAULT 'message'
        );
        CREATE INDEX external_messages_party ON external_messages(party_id, id);
        CREATE INDEX external_messages_ref ON external_messages(party_id, message_ref);
        CREATE TABLE escalations (
            id INTEGER PRIMARY KEY,
            party_id TEXT NOT NULL REFERENCES external_parties(id) ON DELETE CASCADE,
            created TEXT NOT NULL,
            text TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'resolved')),
            resolution TEXT
        );
        CREATE INDEX escalations_pending ON escalations(status, party_id);

        CREATE TABLE index_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
    )


def _index_v4(conn: SyncConn) -> None:
    """Fewer pages written per message (docs/benchmarks.md "Session 7").

    Every incoming message adds a ``message_refs`` row and moves its conversation's
    ``updated``. Three structures took a page each per message for reads that never
    need them fast: ``message_refs`` as a rowid table (its primary key is a second
    b-tree), ``message_refs_conversation`` (read only when a transcript that shrank is
    indexed again, a repair) and ``conversations_channel`` (``list --channel`` walks
    ``conversations_updated`` and filters instead, over at most thousands of rows).
    """
    run_script(
        conn,
        """
        CREATE TABLE message_refs_v4 (
            channel TEXT NOT NULL,
            ref TEXT NOT NULL,
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            direction TEXT NOT NULL CHECK (direction IN ('in', 'out')),
            PRIMARY KEY (channel, ref)
        ) WITHOUT ROWID;
        INSERT INTO message_refs_v4 (channel, ref, conversation_id, direction)
            SELECT channel, ref, conversation_id, direction FROM message_refs;
        DROP TABLE message_refs;
        ALTER TABLE message_refs_v4 RENAME TO message_refs;
        DROP INDEX conversations_channel
        """,
    )


# The readouts earlier versions wrote (frozen here: a migration describes what was
# written then, whatever the constants become later). Offline replies all start with
# the label; the apology is the whole text.
_V5_OFFLINE_LABEL = "[offline mode: no language model is configured]"
_V5_APOLOGY = "Sorry, something went wrong while answering. Your message is saved."


def _index_v5(conn: SyncConn) -> None:
    """Readouts out of recall (``bot.transcript.recallable``): ``turns.recall`` = 0 for
    the offline brain's notices and listings and the apology. ``turns_fts`` now takes its
    external content from the view ``recall_turns`` (the turns with ``recall`` = 1), so
    FTS5's own checks and ``rebuild`` agree with an index that leaves readouts out; it is
    rebuilt once here. The turn vectors of conversations holding readouts are dropped:
    the vector index embeds their windows again at start and prunes the readouts' own."""
    conn.execute("ALTER TABLE turns ADD COLUMN recall INTEGER NOT NULL DEFAULT 1")
    conn.execute(
        "UPDATE turns SET recall = 0 WHERE role = 'assistant' AND "
        "(substr(content, 1, ?) = ? OR content = ?)",
        (len(_V5_OFFLINE_LABEL), _V5_OFFLINE_LABEL, _V5_APOLOGY),
    )
    # Windows embedded with a readout as a neighbour: the conversation's windows are
    # embedded again at start (a window's record only notices a new right neighbour).
    conn.execute(
        "DELETE FROM turn_vectors WHERE conversation_id IN "
        "(SELECT DISTINCT conversation_id FROM turns WHERE recall = 0)"
    )
    run_script(
        conn,
        """
        CREATE VIEW recall_turns AS
            SELECT id, content, conversation_id, turn_number, timestamp FROM turns
            WHERE recall = 1;
        DROP TABLE turns_fts;
        CREATE VIRTUAL TABLE turns_fts USING fts5(
            content,
            conversation_id UNINDEXED,
            turn_number UNINDEXED,
            timestamp UNINDEXED,
            content='recall_turns',
            content_rowid='id',
            tokenize='porter unicode61'
        );
        INSERT INTO turns_fts (turns_fts) VALUES ('rebuild')
        """,
    )


def _index_v6(conn: SyncConn) -> None:
    """FTS5 merges no longer run inside commits (``automerge`` 0): the index writer merges
    segments in its idle time instead (:mod:`bot.ftsmerge`). The setting is stored in
    ``turns_fts_config``; a later migration that creates ``turns_fts`` again must set it
    again."""
    conn.execute("INSERT INTO turns_fts (turns_fts, rank) VALUES ('automerge', 0)")


def _index_v7(conn: SyncConn) -> None:
    """Turns by time: a search filtered by dates (or naming them) takes its vector
    candidates among the turns of those days (:mod:`bot.search.pool`), read as a range of
    this index instead of a scan of every turn."""
    conn.execute("CREATE INDEX turns_by_time ON turns(timestamp)")


def _index_v9(conn: SyncConn) -> None:
    """Third parties' messages by time: the hourly counts (an untrusted party's
    messages, bot/party_limits.py; the model's answers to known parties,
    bot/party_budget.py; command answers) and the parties a start owes something
    (bot/party_resume.py) read a range of these instead of every message stored (a
    million stored stranger messages: a scan of a million rows per count).
    ``external_messages_time`` serves the counts of all parties together,
    ``external_messages_party_time`` one party's."""
    run_script(
        conn,
        """
        CREATE INDEX external_messages_time ON external_messages(timestamp);
        CREATE INDEX external_messages_party_time ON external_messages(party_id, timestamp)
        """,
    )


def _index_migrations() -> list[Migration]:
    from bot.schema_failures import index_v13
    from bot.schema_forwards import index_v19
    from bot.schema_fts import index_v8
    from bot.schema_notes import index_v10
    from bot.schema_notices import index_v11
    from bot.schema_party_costs import index_v15
    from bot.schema_party_messages import index_v17, index_v18
    from bot.schema_recall import RECALL_MIGRATIONS
    from bot.schema_repair import index_v14
    from bot.schema_titles import index_v12
    from bot.schema_vector_texts import index_v16

    return [
        _index_v1,
        *RECALL_MIGRATIONS,
        _index_v4,
        _index_v5,
        _index_v6,
        _index_v7,
        index_v8,
        _index_v9,
        index_v10,
        index_v11,
        index_v12,
        index_v13,
        index_v14,
        index_v15,
        index_v16,
        index_v17,
        index_v18,
        index_v19,
    ]


INDEX_MIGRATIONS: list[Migration] = _index_migrations()


def create_vector_tables(conn: SyncConn, dimensions: int) -> None:
    """sqlite-vec tables; created only when the extension is loaded.

    ``abbreviations_vec`` holds one vector per conversation (seed 000); ``turns_vec`` one
    per turn window, keyed by ``turns.id``.
    """
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS abbreviations_vec USING vec0("
        f"conversation_id TEXT PRIMARY KEY, embedding FLOAT[{dimensions}])"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS turns_vec USING vec0(embedding FLOAT[{dimensions}])"
    )


def vector_tables_exist(conn: SyncConn) -> bool:
    """Whether both sqlite-vec tables of :func:`create_vector_tables` exist. Reads only."""
    names = {"abbreviations_vec", "turns_vec"}
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)", tuple(names)
    ).fetchall()
    return {str(r[0]) for r in rows} == names
