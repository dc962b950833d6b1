"""Replies a crash kept from the outbox are queued again at start (bot/resume.py), found
by the order they were written in, not by the wall clock."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.config import AppConfig
from bot.events import iso, utcnow
from bot.replies import ReplyTarget
from bot.resume import requeue_unsent_replies
from bot.services import open_services
from tests.conftest import make_config, shutdown_services

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


async def test_replies_in_a_transcript_copied_in_while_stopped_are_not_sent_again(
    tmp_path: Path, config: AppConfig
) -> None:
    """A transcript put into conversations/ while the daemon was stopped (another
    machine's, a backup's) is caught up after the outbox's anchor: before session 35
    every reply in it was queued again at start, old Telegram replies sent twice."""
    other = await open_services(make_config(tmp_path / "elsewhere"))
    try:
        copied = await other.conversations.create("telegram", channel_meta={"chatId": "42"})
        for n in range(3):
            await _exchange(other, copied.id, f"elsewhere {n}", queued=True)
        source = other.store.path(copied.id)
    finally:
        await shutdown_services(other)
    ours = await open_services(config)
    try:
        rec = await ours.conversations.create("telegram", channel_meta={"chatId": "42"})
        await _exchange(ours, rec.id, "sent", queued=True)
        cut = await _exchange(ours, rec.id, "cut by a crash", queued=False)
        old = iso(utcnow() - timedelta(days=3))
        await _set(ours.index_db, "UPDATE turns SET timestamp = ?", (old,))
        target = ours.store.path(copied.id)
    finally:
        await shutdown_services(ours)
    # written there last week
    week_ago = iso(utcnow() - timedelta(days=7))
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    for line in lines:
        for key in ("timestamp", "created", "updated"):
            if key in line:
                line[key] = week_ago
    target.write_text("".join(json.dumps(line) + "\n" for line in lines))

    restarted = await open_services(config)
    try:
        assert restarted.recovery.registered == 1  # the copy, caught up at this start
        assert await requeue_unsent_replies(restarted) == 1  # only the crash's
        assert await restarted.outbox.has_key(f"{rec.id}:{cut}:reply")
        for turn in (1, 2, 3):
            assert not await restarted.outbox.has_key(f"{copied.id}:{turn}:reply")
    finally:
        await shutdown_services(restarted)


async def test_a_reply_queued_again_does_not_make_its_conversations_older_ones_owed(
    services: Any,
) -> None:
    """Regression: a copied-in transcript's last reply fell inside the window and was
    queued at one start; its row then counted as the conversation "having rows", and
    at the next start every older reply of it was queued too, a batch per restart."""
    ours = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
    await _exchange(services, ours.id, "sent", queued=True)
    copied = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
    for n in range(3):
        await _exchange(services, copied.id, f"copied {n}", queued=False)
    old = iso(utcnow() - timedelta(days=3))
    await _set(
        services.index_db,
        "UPDATE turns SET timestamp = ? WHERE conversation_id = ? AND turn_number < 3",
        (old, copied.id),
    )
    assert await requeue_unsent_replies(services) == 1  # inside the window: maybe a crash's
    assert await services.outbox.has_key(f"{copied.id}:3:reply")
    assert await requeue_unsent_replies(services) == 0  # the next start: nothing more
    for turn in (1, 2):
        assert not await services.outbox.has_key(f"{copied.id}:{turn}:reply")
