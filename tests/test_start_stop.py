"""A SIGTERM during a long start (recovery, the re-queues of what a restart owes) is
acted on between two items, and the next start finishes what was left."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.config import AppConfig
from bot.daemon import start_serving
from bot.recovery import delete_index, recover
from bot.resume import requeue_unsent_replies
from bot.services import open_services
from bot.transcript import TranscriptStore
from tests.conftest import RecordingChannel, shutdown_services
from tests.recall_helpers import open_index
from tests.test_resume import _exchange


async def _unanswered(config: AppConfig, count: int) -> list[str]:
    """``count`` conversations, each with one user turn awaiting its reply."""
    services = await open_services(config)
    try:
        ids = []
        for n in range(count):
            rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
            await services.conversations.append_turn(rec.id, "user", f"question {n}")
            ids.append(rec.id)
        return ids
    finally:
        await shutdown_services(services)


class _StopAfter:
    """A stop asked for once ``calls`` checks have said "go on"."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __call__(self) -> bool:
        self.calls -= 1
        return self.calls < 0


async def test_recovery_stops_between_transcripts_and_the_next_start_goes_on(
    config: AppConfig,
) -> None:
    ids = await _unanswered(config, 3)
    delete_index(config.index_path)  # a rebuild from nothing: every transcript is read
    db = await open_index(config.index_path)
    try:
        store = TranscriptStore(config.conversations_dir, fsync=False)
        report = await db.run(
            lambda c: recover(c, store, config.external_dir, config, _StopAfter(1))
        )
        assert report.stopped and report.conversations == 1
        assert report.pending_replies == []  # nothing is owed by a start that stops
        (indexed,) = await db.fetchone("SELECT count(*) FROM conversations")
        assert indexed == 1  # what was caught up is kept

        again = await db.run(lambda c: recover(c, store, config.external_dir, config))
        assert not again.stopped and again.registered == 2
        assert sorted(again.pending_replies) == sorted((conv_id, 1) for conv_id in ids)
    finally:
        await db.close()


async def test_a_stop_set_before_the_open_leaves_recovery_to_the_next_start(
    config: AppConfig,
) -> None:
    await _unanswered(config, 2)
    delete_index(config.index_path)
    stop = asyncio.Event()
    stop.set()
    services = await open_services(config, stop=stop)
    try:
        assert services.recovery is not None and services.recovery.stopped
        assert await services.index.count() == 0
    finally:
        await shutdown_services(services)
    services = await open_services(config)
    try:
        assert services.recovery is not None and not services.recovery.stopped
        assert len(services.recovery.pending_replies) == 2
    finally:
        await shutdown_services(services)


async def test_requeue_stops_between_replies_and_the_rest_is_queued_next_time(
    services: Any,
) -> None:
    """Thousands of replies "never queued" went on being queued for 80 s after a SIGTERM."""
    rec = await services.conversations.create("telegram", channel_meta={"chatId": "42"})
    await _exchange(services, rec.id, "sent", queued=True)
    turns = [await _exchange(services, rec.id, f"lost {n}", queued=False) for n in range(4)]
    stop = asyncio.Event()
    enqueue = services.outbox.enqueue

    async def enqueue_then_stop(*args: Any, **kwargs: Any) -> Any:
        stop.set()  # the SIGTERM comes while the first one is queued
        return await enqueue(*args, **kwargs)

    services.outbox.enqueue = enqueue_then_stop
    assert await requeue_unsent_replies(services, stop=stop) == 1
    services.outbox.enqueue = enqueue
    assert await requeue_unsent_replies(services) == 3  # the next start
    for turn in turns:
        assert await services.outbox.has_key(f"{rec.id}:{turn}:reply")


async def test_a_stop_during_the_resume_starts_no_channel(config: AppConfig) -> None:
    await _unanswered(config, 3)
    services = await open_services(config)
    channel = RecordingChannel("telegram")
    try:
        stop = asyncio.Event()
        submit = services.replies.submit

        def submit_then_stop(*args: Any, **kwargs: Any) -> Any:
            stop.set()
            return submit(*args, **kwargs)

        services.replies.submit = submit_then_stop
        assert await start_serving(services, [channel], stop) == 1
        assert not channel.started
    finally:
        await shutdown_services(services)
    services = await open_services(config)  # the next start: the two left are owed
    try:
        assert services.recovery is not None
        assert len(services.recovery.pending_replies) >= 2
    finally:
        await shutdown_services(services)
