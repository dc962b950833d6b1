"""Migration 11 of ``conversations.db``: group membership notices out of recall.

Since session 30 a Telegram group member joining or leaving is recorded as an unanswered
user turn "[joined the group]" / "[left the group]" (channels/telegram/membership.py).
Since session 31 such a turn is written with ``turns.recall`` = 0
(:func:`bot.transcript_lines.recallable`), but an index written in between still had them
searchable ("who joined?" found every group) and inside embedded turn windows, until
``my-agent reindex``. This migration does to those rows what the index writer does now,
in the migration's one transaction; the transcripts are not touched.

Which rows: the index keeps no turn metadata (the ``membership`` key that marks a notice
in the transcript), so a notice is told by what only a notice has together: a user turn
whose text is exactly one of the two frozen texts, from Telegram, never addressed
(``awaits_reply`` = 0), in a group conversation (``identity_key`` "telegram:group:<id>",
bot/resolver.py; a conversation unpinned by ``/new`` keeps it). The same words typed in
a 1:1 chat, an e-mail, the web, or addressed to the bot in a group stay recallable. Only
a member typing exactly that text, unaddressed, in a group would be taken out with them;
``my-agent reindex`` (which reads the transcript's metadata) gives such a turn back.
"""

from __future__ import annotations

from bot.db import SyncConn

# The texts the membership notices were written with (frozen here, as the offline label
# of migration 5 is: a migration describes what was written then, whatever
# channels/telegram/membership.py's ``SAID`` becomes later).
V11_NOTICE_TEXTS = ("[joined the group]", "[left the group]")

_NOTICE = (
    "role = 'user' AND awaits_reply = 0 AND channel = 'telegram' AND content IN (?, ?) "
    "AND conversation_id IN "
    "(SELECT id FROM conversations WHERE identity_key GLOB 'telegram:group:*')"
)
# Notices still in recall: the ones this migration changes.
_RECALLED_NOTICE = f"recall = 1 AND {_NOTICE}"


def index_v11(conn: SyncConn) -> None:
    """``turns.recall`` = 0 for the membership notices an index written before session
    31 holds; taken out of ``turns_fts`` first; the turn vectors whose window may hold
    one dropped, so the vector index embeds them again at start."""
    args = V11_NOTICE_TEXTS
    # turns_fts is an external-content table over the view recall_turns: a row leaves it
    # by the 'delete' command with the values it was indexed with (what the view gives,
    # coalesce(fts_text, content)), while the row is still in the view. A 'rebuild' does
    # the same at a cost that grows with the whole store (docs/telegram.md, "Upgrades").
    conn.execute(
        "INSERT INTO turns_fts (turns_fts, rowid, content, conversation_id, turn_number, "
        "timestamp) SELECT 'delete', id, coalesce(fts_text, content), conversation_id, "
        f"turn_number, timestamp FROM turns WHERE {_RECALLED_NOTICE}",
        args,
    )
    # A turn window is its turn with neighbours on each side among the recallable turns,
    # in (turn_number, id) order (bot/vectors.py); ``window_last`` records its last turn.
    # A window that holds a notice ends at or after the conversation's first notice, so
    # every vector whose window ends there or later goes (a window whose right side held
    # a notice may end at the same turn without it: ``window_last`` alone would not tell
    # it changed). The history before (a group's years of talk) keeps its vectors.
    conn.execute(
        "DELETE FROM turn_vectors WHERE turn_id IN (SELECT v.turn_id FROM turn_vectors v "
        "JOIN (SELECT conversation_id, min(turn_number) AS first FROM turns "
        f"WHERE {_RECALLED_NOTICE} GROUP BY conversation_id) n "
        "ON v.conversation_id = n.conversation_id "
        "LEFT JOIN turns w ON w.id = v.window_last "
        "WHERE coalesce(w.turn_number, n.first) >= n.first)",
        args,
    )
    conn.execute(f"UPDATE turns SET recall = 0 WHERE {_RECALLED_NOTICE}", args)
