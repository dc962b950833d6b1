"""Migration 13 of ``conversations.db``: a conversation's notes failed, recorded apart.

``needs_abbreviation`` means "due for a pass now": a failed pass sets it, but so do the
recovery at every start and ``my-agent reindex`` (idle conversations whose notes were
never written), and a stop that leaves the queue unfinished. ``my-agent status``
counted every flagged conversation "to retry", as if its notes had failed: right after
a reindex, every idle conversation without notes. ``abbreviation_failed`` = 1 records
that the last pass over the conversation failed (the model's error, the model down
when its turn came, the embedding of its notes, the storage), set and cleared by the
lifecycle (:mod:`bot.lifecycle.passes`); status tells "failed, to retry" from "not yet
written" by it. Operational like the flag, and not in the transcripts: a rebuilt index
starts at 0 (nothing has failed in it yet); offline stand-ins, which say in the
transcript that the model failed, are counted as failed by status either way.
"""

from __future__ import annotations

from bot.db import SyncConn

FAILED_COLUMN = "abbreviation_failed"


def index_v13(conn: SyncConn) -> None:
    """``conversations.abbreviation_failed`` (0: no failure recorded). Left 0 for an
    index written before: its flag did not tell a failure from a pass not made yet, and
    the daemon's first sweep records the failures again."""
    conn.execute(f"ALTER TABLE conversations ADD COLUMN {FAILED_COLUMN} INTEGER NOT NULL DEFAULT 0")
