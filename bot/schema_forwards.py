"""Migration 19 of ``conversations.db``: ``turns.forwarded``, the mail an owner's turn
keeps apart from its words, for its embedded window.

Since session 41 a mail the owner forwards is kept out of the turn's content, in its
metadata (bot/forwards.py); keyword search found it (``turns.fts_text`` indexes the
content and the mail together) but search by meaning never did: a turn window embeds
what ``turns`` holds, and that was the owner's note alone ("what do I answer?"). The
column holds the forwarded text (NULL for every other turn); the windows embed it
after the owner's words, labelled (:func:`bot.forwards.window_part`).

The turns indexed before: the index keeps no turn metadata, but such a turn's
``fts_text`` is the :func:`bot.fts_text.searchable` form of its content, two newlines
and the forwarded text (:func:`bot.forwards.searchable_with`). The rest of it, after the
content's own searchable form (:func:`bot.fts_text.fts_content`) and the two newlines, is
taken as the forward, and the vectors of those conversations dropped, so that the daemon
embeds their windows again at start. Before session 42 this compared ``fts_text`` with
the content itself, in SQL: a note the searchable form changes (an ellipsis "…" or a
no-break space, which NFKC rewrites; a word of Chinese or Japanese, spaced) hid its
forward, whose conversation kept the vectors without it. For a forward in Chinese,
Japanese, Korean or Thai the text kept is in that form (a space around each of their
characters, what the embedding model's tokenizer does to Han and kana anyway);
``my-agent reindex`` reads the transcripts' own text.
"""

from __future__ import annotations

from bot.db import SyncConn
from bot.fts_text import fts_content

# The candidates: a user turn whose keyword text holds two newlines (a forward's always
# does, after the content); which of them has a forward is told in Python (forwarded_in).
_CANDIDATES = (
    "SELECT id, content, fts_text FROM turns WHERE role = 'user' AND fts_text IS NOT NULL "
    "AND instr(fts_text, char(10, 10)) > 0"
)


def forwarded_in(content: str, fts_text: str) -> str | None:
    """The forward a user turn of ``content`` indexed with ``fts_text`` keeps, or None.

    A turn without one has the searchable form of its content alone (or no ``fts_text``),
    which never starts with that form and more."""
    head = f"{fts_content(content)}\n\n"
    if len(fts_text) > len(head) and fts_text.startswith(head):
        return fts_text[len(head) :]
    return None


def index_v19(conn: SyncConn) -> None:
    """``turns.forwarded`` (NULL), filled for the forwards indexed before (see the
    module's docstring); their conversations' turn vectors dropped (embedded again)."""
    conn.execute("ALTER TABLE turns ADD COLUMN forwarded TEXT")
    # read row by row (a store of years of Japanese holds many candidates), written after
    found = [
        (forwarded, turn_id)
        for turn_id, content, fts_text in conn.execute(_CANDIDATES)
        if (forwarded := forwarded_in(str(content), str(fts_text))) is not None
    ]
    conn.executemany("UPDATE turns SET forwarded = ? WHERE id = ?", found)
    conn.execute(
        "DELETE FROM turn_vectors WHERE conversation_id IN "
        "(SELECT DISTINCT conversation_id FROM turns WHERE forwarded IS NOT NULL)"
    )
