"""Migrations 17 and 18 of ``conversations.db``: what the index keeps of a third
party's message beyond its words.

Migration 17, when it was written.

A message may come long after it was written (Telegram delivers a day's updates after
the daemon was down; a mail's ``Date`` hours before it came). The owner's turns keep
when in their metadata (``sentAt``, :data:`bot.events.SENT_AT`) and are labelled so for
the model (:mod:`bot.brain.late_turns`); before session 42 a party's file kept no
``sentAt`` and the index neither, so a known contact's late message was answered as if
just said. Their file's ``in`` lines now carry ``sentAt``, which
:func:`bot.parties.apply_party_lines` keeps here beside the row's ``timestamp`` (when it
came): the restricted brain reads their exchange from the index
(:mod:`bot.party_context`). Derived like every column of the index: a reindex fills it
again from the files. NULL for the rows of an index written before (their lines hold
no ``sentAt`` to keep), which are shown without a label.

Migration 18, which of their messages the model's answer answers (``answers`` on its
``out`` line). A record rebuilt from the index (the party's file deleted while stopped,
:mod:`bot.party_rescue`) wrote answers back without it, and a withdrawn answer as a line
of kind ``withdrawn`` with no ``withdrawn`` event naming it: put back, a restart with
no outbox row for the answer (a ``state.db`` lost or older) found the message
unanswered and answered it again (:mod:`bot.party_resume`), and a withdrawal of an
answer still waiting could not name it
(:meth:`bot.external.ExternalStore.record_withdrawn`). Session 42 keeps it here, filled
again by a reindex; NULL for the rows of an index written before.
"""

from __future__ import annotations

from bot.db import SyncConn


def index_v17(conn: SyncConn) -> None:
    """``external_messages.sent_at`` (NULL: not known)."""
    conn.execute("ALTER TABLE external_messages ADD COLUMN sent_at TEXT")


def index_v18(conn: SyncConn) -> None:
    """``external_messages.answers`` (NULL: not an answer, or not known)."""
    conn.execute("ALTER TABLE external_messages ADD COLUMN answers TEXT")
