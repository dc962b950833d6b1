"""Migration 16 of ``conversations.db``: the hash of the text each turn vector embeds.

``turn_vectors.window_last`` says which turns a window saw, not what they said: a
rebuilt index (``my-agent reindex``) could not prove that a vector of the old one was
made from the same text as the rebuilt window, and before session 42 every vector was
embedded again (30 minutes for 105,000 turns). ``text_hash`` is the SHA-1 of the window's
text (:func:`bot.vector_store.text_digest`, as ``abbreviation_vectors.text_hash`` is
of the notes), written with every turn vector from now on; NULL for the vectors written
before, which the reindex checks against the old index's own turns instead
(:mod:`bot.reindex_carry`).
"""

from __future__ import annotations

from bot.db import SyncConn


def index_v16(conn: SyncConn) -> None:
    """``turn_vectors.text_hash`` (NULL for the vectors already stored)."""
    conn.execute("ALTER TABLE turn_vectors ADD COLUMN text_hash TEXT")
