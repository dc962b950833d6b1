"""Replies a crash kept from the outbox are queued again at start (bot/resume.py), found
by the order they were written in, not by the wall clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bot.events import iso, utcnow
from bot.replies import ReplyTarget
from bot.resume import requeue_unsent_replies

TARGET = ReplyTarget(channel="telegram", chat_id="42")


async def _exchange(services: Any, conv_id: str, text: str, *, queued: bool) -> int:
    """A user turn and its reply in the transcript; the reply's outbox row only when
    ``queued`` (without it: a crash came between the two writes)."""
    rec, _ = await services.conversations.append_turn(conv_id, "user", text, channel="telegram")
    turn = rec.turn_count
    await services.conversations.append_turn(
        conv_id, "assistant", f"answer to {text}", turn_number=turn, channel="telegram"
    )
    if queued:
        msg = TARGET.reply(f"answer to {text}", conv_id)
        await services.outbox.enqueue(msg, dedup_key=f"{conv_id}:{turn}:reply")
    return turn


async def _set(db: Any, sql: str, params: tuple[Any, ...]) -> None:
    await db.run(lambda c: c.execute(sql, params))


async def test_a_reply_written_after_the_clock_was_set_back_is_queued_again(
    services: Any,
) -> None:
    rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
    await _exchange(services, rec.id, "before", queued=True)
    # The clock ran two hours ahead when that row was written, then was set right: the
    # reply written since (its row lost to a crash) is stamped before the row.
    ahead = iso(utcnow() + timedelta(hours=2))
    await _set(services.state, "UPDATE outbox SET created = ?", (ahead,))
    turn = await _exchange(services, rec.id, "after", queued=False)

    assert await requeue_unsent_replies(services) == 1
    assert await services.outbox.has_key(f"{rec.id}:{turn}:reply")
    assert await requeue_unsent_replies(services) == 0  # queued once


async def test_old_replies_without_a_row_before_the_newest_rows_stay_unsent(
    services: Any,
) -> None:
    """What came before the newest rows (a replaced state.db's history) is not re-sent."""
    rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
    for n in range(3):
        await _exchange(services, rec.id, f"old {n}", queued=False)
    old = iso(utcnow() - timedelta(days=2))
    await _set(services.index_db, "UPDATE turns SET timestamp = ?", (old,))
    assert await requeue_unsent_replies(services) == 0  # no row at all: a lost state.db
    await _exchange(services, rec.id, "new", queued=True)
    assert await requeue_unsent_replies(services) == 0
