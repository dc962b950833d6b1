"""Migration 19 of ``conversations.db``: ``turns.forwarded``, the mail an owner's turn
keeps apart from its words, for its embedded window.

Since session 41 a mail the owner forwards is kept out of the turn's content, in its
metadata (bot/forwards.py); keyword search found it (``turns.fts_text`` indexes the
content and the mail together) but search by meaning never did: a turn window embeds
what ``turns`` holds, and that was the owner's note alone ("what do I answer?"). The
column holds the forwarded text (NULL for every other turn); the windows embed it
after the owner's words, labelled (:func:`bot.forwards.window_part`).

The turns indexed before: the index keeps no turn metadata, but such a turn's
``fts_text`` is its content, two newlines and the forwarded text, in the
:func:`bot.fts_text.searchable` form (the text itself when it had nothing to change,
as for Latin text). The rest of it is taken as the forward, and the vectors of those
conversations dropped, so that the daemon embeds their windows again at start. For a
forward in Chinese, Japanese, Korean or Thai that form has a space around each of their
characters (what the embedding model's tokenizer does to Han and kana anyway);
``my-agent reindex`` reads the transcripts' own text.
"""

from __future__ import annotations

from bot.db import SyncConn

# A user turn whose keyword text starts with its content and two newlines: indexed with
# a forward (bot/forwards.py's searchable_with). A turn without one has no fts_text, or
# the searchable form of its content alone, which never starts with the content itself
# and more (that form only inserts spaces and normalises characters).
_FORWARDED = (
    "role = 'user' AND fts_text IS NOT NULL AND length(fts_text) > length(content) + 2 "
    "AND substr(fts_text, 1, length(content) + 2) = content || char(10, 10)"
)


def index_v19(conn: SyncConn) -> None:
    """``turns.forwarded`` (NULL), filled for the forwards indexed before (see the
    module's docstring); their conversations' turn vectors dropped (embedded again)."""
    conn.execute("ALTER TABLE turns ADD COLUMN forwarded TEXT")
    conn.execute(
        f"UPDATE turns SET forwarded = substr(fts_text, length(content) + 3) WHERE {_FORWARDED}"
    )
    conn.execute(
        "DELETE FROM turn_vectors WHERE conversation_id IN "
        "(SELECT DISTINCT conversation_id FROM turns WHERE forwarded IS NOT NULL)"
    )
