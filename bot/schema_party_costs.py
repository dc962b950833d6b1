"""Migration 15 of ``conversations.db``: what the model's answers to each third party
cost.

The model answers known contacts (:mod:`bot.known_answers`), and each answer is a paid
call. Before session 40 its tokens and cost were recorded nowhere: not in the party's
file, not in ``/status`` nor the dashboard's Analytics, so an owner who trusted a chatty
contact could not see what it cost. Their file's lines now carry ``model``, ``usage``
and ``cost`` (an answer sent on its ``out`` line; one made and then dropped on its
``refused`` event), and :func:`bot.parties.apply_party_lines` sums them here per party,
as ``conversations`` sums its turns'. Derived like every column of the index: a reindex
adds them up again from the files. Left 0 for the parties of an index written before
(their files hold no usage to add).
"""

from __future__ import annotations

from bot.db import SyncConn


def index_v15(conn: SyncConn) -> None:
    """``external_parties.tokens_in``, ``tokens_out`` and ``cost_total`` (0)."""
    for column, kind in (
        ("tokens_in", "INTEGER"),
        ("tokens_out", "INTEGER"),
        ("cost_total", "REAL"),
    ):
        conn.execute(f"ALTER TABLE external_parties ADD COLUMN {column} {kind} NOT NULL DEFAULT 0")
