"""Which turn windows of a rebuilt index an old index's vector embedded word for word.

A reindex keeps a turn window's vector (bot/reindex_carry.py) when the hash of the
window's text over the rebuilt turns (:func:`bot.vectors.window_text`) is the old
vector's ``turn_vectors.text_hash`` (migration 16); for a vector stored before that, the
hash of the window the old index's own turns give, up to the ``window_last`` it
recorded, at this ``embedding.turn_window`` (what the daemon itself relies on to keep a
vector). Both indexes' turns are read as their windows hold them: an owner's forward
after their words (:func:`bot.forwards.window_part`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from bot.db import SyncConn
from bot.vector_store import text_digest
from bot.vectors import turn_text, window_last_of, window_text

CONVERSATIONS_AT_ONCE = 256  # conversations matched per read of either index

Turns = list[tuple[int, str]]  # a conversation's recallable turns (id, content), in order
# old turn id -> the new windows its vector embeds: (turn id, conversation id,
# window_last, the text's hash)
Windows = dict[int, list[tuple[int, str, int, str]]]


async def matched_windows(s: Any, old: SyncConn, conv_ids: list[str], radius: int) -> Windows:
    """The windows of the conversations ``conv_ids`` in the rebuilt index of the
    services ``s`` that a vector of the ``old`` index embedded word for word, a chunk of
    conversations at a time (the old index read on a thread)."""
    windows: Windows = {}
    for start in range(0, len(conv_ids), CONVERSATIONS_AT_ONCE):
        chunk = conv_ids[start : start + CONVERSATIONS_AT_ONCE]
        new = await s.index_db.run(lambda c, ch=chunk: _recall_turns(c, ch), write=False)
        before = await asyncio.to_thread(_old_windows, old, chunk)
        for conv_id, turns in new.items():
            old_turns, done = before.get(conv_id, ([], {}))
            for old_id, target in match_windows(turns, old_turns, done, radius):
                windows.setdefault(old_id, []).append((target[0], conv_id, target[1], target[2]))
    return windows


def _recall_turns(conn: SyncConn, conv_ids: list[str]) -> dict[str, Turns]:
    """The recallable turns of ``conv_ids`` as their windows hold them (a forward the
    owner's turn keeps after their words, :func:`bot.forwards.window_part`, as
    bot/vectors.py embeds it; an index before migration 19 has none)."""
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(turns)")}
    forwarded = "forwarded" if "forwarded" in columns else "NULL"
    marks = ",".join("?" * len(conv_ids))
    found: dict[str, Turns] = {}
    for turn_id, conv_id, content, forward in conn.execute(
        f"SELECT id, conversation_id, content, {forwarded} FROM turns "
        f"WHERE conversation_id IN ({marks}) AND recall = 1 "
        "ORDER BY conversation_id, turn_number, id",
        conv_ids,
    ):
        found.setdefault(str(conv_id), []).append((int(turn_id), turn_text(content, forward)))
    return found


def _old_windows(
    old: SyncConn, conv_ids: list[str]
) -> dict[str, tuple[Turns, dict[int, tuple[int, str | None]]]]:
    """The old index's turns of ``conv_ids`` and their vectors' records (turn id ->
    (window_last, text_hash: None before migration 16))."""
    turns = _recall_turns(old, conv_ids)
    columns = {str(r[1]) for r in old.execute("PRAGMA table_info(turn_vectors)")}
    digest = "text_hash" if "text_hash" in columns else "NULL"
    marks = ",".join("?" * len(conv_ids))
    done: dict[str, dict[int, tuple[int, str | None]]] = {}
    for turn_id, conv_id, last, text_hash in old.execute(
        f"SELECT turn_id, conversation_id, window_last, {digest} FROM turn_vectors "
        f"WHERE conversation_id IN ({marks})",
        conv_ids,
    ):
        done.setdefault(str(conv_id), {})[int(turn_id)] = (int(last), text_hash)
    return {c: (turns.get(c, []), done.get(c, {})) for c in set(turns) | set(done)}


def match_windows(
    new: Turns, old: Turns, done: dict[int, tuple[int, str | None]], radius: int
) -> list[tuple[int, tuple[int, int, str]]]:
    """The windows of a conversation's rebuilt turns ``new`` that an old vector embedded
    word for word: (old turn id, (new turn id, its window_last, the text's hash)).
    ``old``: its turns in the old index, ``done``: their vectors' records."""
    if not done or not new:
        return []
    where = {turn_id: at for at, (turn_id, _) in enumerate(old)}
    old_texts = [content for _, content in old]
    by_text: dict[str, int] = {}
    for turn_id, (last, digest) in done.items():
        if digest is None:  # stored before migration 16: the old turns tell its text
            at, upto = where.get(turn_id), where.get(last)
            if at is None or upto is None or not at <= upto <= at + radius:
                continue
            # (the window's own turns only: a slice from the start was a copy per turn)
            lo = max(0, at - radius)
            digest = text_digest(window_text(old_texts[lo : upto + 1], at - lo, radius))
        by_text.setdefault(digest, turn_id)
    texts = [content for _, content in new]
    ids = [turn_id for turn_id, _ in new]
    found: list[tuple[int, tuple[int, int, str]]] = []
    for at, turn_id in enumerate(ids):
        digest = text_digest(window_text(texts, at, radius))
        source = by_text.get(digest)
        if source is not None:
            found.append((source, (turn_id, window_last_of(ids, at, radius), digest)))
    return found
