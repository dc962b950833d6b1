"""Replies a crash kept from the outbox are queued again at start (bot/resume.py), found
by the order they were written in, not by the wall clock."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config import AppConfig
from bot.events import iso, utcnow
from bot.replies import ReplyTarget
from bot.resume import requeue_unsent_replies, resume_pending_replies
from bot.services import open_services
from bot.store_generations import tell_unchecked
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


async def _start(config: AppConfig) -> Any:
    """A start as far as the re-queue (which marks the stores' generation)."""
    services = await open_services(config)
    await requeue_unsent_replies(services)
    return services


def _copy_state(source: Path, target: Path) -> None:
    target.mkdir(exist_ok=True)
    for old in target.glob("state.db*"):
        old.unlink()
    for path in source.glob("state.db*"):
        shutil.copy2(path, target / path.name)


async def test_an_older_state_db_put_back_sends_nothing_again_and_the_owner_is_told(
    tmp_path: Path, config: AppConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """state.db restored from a backup under transcripts written since: its outbox
    lacks the rows of the replies sent since, and before session 40 each was taken
    for one a crash cut from its row and sent to the owner again."""
    services = await _start(config)
    try:
        rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
        for n in range(2):
            await _exchange(services, rec.id, f"before the backup {n}", queued=True)
        await _set(services.state, "UPDATE outbox SET status = 'sent'", ())  # delivered
    finally:
        await shutdown_services(services)
    _copy_state(config.data_dir, tmp_path / "backup")  # last night's backup

    services = await _start(config)
    try:
        since = [
            await _exchange(services, rec.id, f"since the backup {n}", queued=True)
            for n in range(3)
        ]
        await _set(services.state, "UPDATE outbox SET status = 'sent'", ())
    finally:
        await shutdown_services(services)
    _copy_state(tmp_path / "backup", config.data_dir)  # put back

    services = await open_services(config)
    told: list[str] = []

    async def alert(text: str) -> None:
        told.append(text)

    monkeypatch.setattr(services, "alert_owner", alert)
    try:
        assert await requeue_unsent_replies(services) == 0
        assert await services.outbox.pending_count() == 0  # nothing goes out again
        for turn in since:  # recorded, never to be sent: the next start finds them
            assert await services.outbox.has_key(f"{rec.id}:{turn}:reply")
        await tell_unchecked(services)
        assert len(told) == 1 and "the 3 replies written since it was saved" in told[0]
        # a crash after this start is still a crash's
        cut = await _exchange(services, rec.id, "cut by a crash", queued=False)
    finally:
        await shutdown_services(services)

    services = await open_services(config)
    monkeypatch.setattr(services, "alert_owner", alert)
    try:
        assert await requeue_unsent_replies(services) == 1
        assert await services.outbox.pending_count() == 1
        assert await services.outbox.has_key(f"{rec.id}:{cut}:reply")
        await tell_unchecked(services)
        assert len(told) == 1  # told once
    finally:
        await shutdown_services(services)


async def test_a_crash_between_two_stores_generation_marks_is_still_a_crash(
    services: Any,
) -> None:
    """state.db is marked first: a crash before the index's mark leaves it ahead,
    and the reply a crash kept from its row is queued as before."""
    rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
    await _exchange(services, rec.id, "sent", queued=True)
    await requeue_unsent_replies(services)  # both marked
    await services.state.run(
        lambda c: c.execute("UPDATE channel_cursors SET value = value + 1 WHERE key = 'generation'")
    )
    turn = await _exchange(services, rec.id, "cut", queued=False)
    assert await requeue_unsent_replies(services) == 1
    assert await services.outbox.has_key(f"{rec.id}:{turn}:reply")


async def _restart_and_requeue(config: AppConfig) -> tuple[int, int]:
    """A start as the daemon's (the pending replies, then the re-queue): how many
    replies it queued again, and how many rows are then pending."""
    services = await open_services(config)
    try:
        await resume_pending_replies(services)
        queued = await _count_requeued(services)
        return queued, await services.outbox.pending_count()
    finally:
        await shutdown_services(services)


async def _count_requeued(services: Any) -> int:
    row = await services.state.fetchone(
        "SELECT count(*) FROM outbox WHERE json_extract(payload, '$.metadata.requeued')"
    )
    return int(row[0])


async def test_the_first_reply_of_a_new_store_cut_from_its_row_is_sent_once(
    config: AppConfig,
) -> None:
    """Regression (session 42): an empty outbox re-sent nothing, so a kill between the
    very first reply's transcript line and its outbox row lost that reply for good."""
    services = await open_services(config)  # a first start: state.db made here
    try:
        rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
        turn = await _exchange(services, rec.id, "hello", queued=False)  # killed here
    finally:
        await shutdown_services(services)
    assert await _restart_and_requeue(config) == (1, 1)
    services = await open_services(config)
    try:
        assert await services.outbox.has_key(f"{rec.id}:{turn}:reply")
    finally:
        await shutdown_services(services)
    assert await _restart_and_requeue(config) == (1, 1)  # the same row: sent once


async def test_a_state_db_made_anew_owes_only_the_replies_written_after_it(
    config: AppConfig,
) -> None:
    """A lost state.db made anew re-sends none of the history before it (not even the
    last minutes'), but the first reply cut from its row after it is sent."""
    services = await open_services(config)
    try:
        rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
        for n in range(2):
            await _exchange(services, rec.id, f"history {n}", queued=n == 0)
        # a second ago: surely before the new state.db, though inside any window
        moment = iso(utcnow() - timedelta(seconds=1))
        await _set(services.index_db, "UPDATE turns SET timestamp = ?", (moment,))
    finally:
        await shutdown_services(services)
    for path in config.data_dir.glob("state.db*"):
        path.unlink()  # lost
    assert await _restart_and_requeue(config) == (0, 0)
    services = await open_services(config)
    try:
        cut = await _exchange(services, rec.id, "after the loss", queued=False)
    finally:
        await shutdown_services(services)
    assert await _restart_and_requeue(config) == (1, 1)
    services = await open_services(config)
    try:
        assert await services.outbox.has_key(f"{rec.id}:{cut}:reply")
    finally:
        await shutdown_services(services)


async def test_an_empty_outbox_from_before_the_mark_re_sends_nothing(
    config: AppConfig,
) -> None:
    """A state.db an older version made (no first-open row) is marked at the upgrade's
    first open: the replies before it are history, not sent again."""
    services = await open_services(config)
    try:
        rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
        await _exchange(services, rec.id, "before the upgrade", queued=False)
        moment = iso(utcnow() - timedelta(seconds=1))
        await _set(services.index_db, "UPDATE turns SET timestamp = ?", (moment,))
        await _set(services.state, "DELETE FROM channel_cursors WHERE key = 'born'", ())
    finally:
        await shutdown_services(services)
    assert await _restart_and_requeue(config) == (0, 0)
