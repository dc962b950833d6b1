"""Replies go second: an incoming message does not wait out a reply's fsyncs.

The journal lets a reply's append wait (bounded) for the next message's batch and its
one fsync; a reply's outbox row skips its own sync once a synced row anchors the requeue
of lost rows (docs/benchmarks.md, ingest "Session 4"). No timings are asserted: batches,
sync levels and what comes back after a lost row are.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from bot.db import Database, Unsynced
from bot.resume import resume_pending_replies
from bot.transcript import TranscriptStore
from tests.sqlite_driver import sqlite3


def _schema(conn: Any) -> None:
    conn.execute("CREATE TABLE t (v TEXT)")


def _count_batches(store: TranscriptStore) -> list[int]:
    journal = store._journal
    assert journal is not None
    sizes: list[int] = []
    commit = journal._commit

    def counting(requests: Any) -> None:
        sizes.append(len(requests))
        commit(requests)

    journal._commit = counting  # type: ignore[method-assign]
    return sizes


async def test_a_reply_append_shares_the_next_message_batch(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path)
    store.open()
    try:
        assert store._journal is not None
        store._journal.background_linger = 30.0  # ended by the message, not by the clock
        sizes = _count_batches(store)
        reply = store.submit_file(tmp_path / "conv-a.jsonl", b"reply\n", background=True)
        await asyncio.sleep(0.1)  # the journal thread has long taken the reply by now
        assert not reply.done()  # it waits for a foreground append to share an fsync with
        message = store.submit_file(tmp_path / "conv-b.jsonl", b"message\n")
        assert await asyncio.wait_for(asyncio.wrap_future(message), 10) == 8
        assert await asyncio.wait_for(asyncio.wrap_future(reply), 10) == 6
        assert sizes == [2]  # one batch, one fsync for both
    finally:
        store.close()


async def test_a_lone_reply_append_is_written_after_the_linger(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path)
    store.open()
    try:
        assert store._journal is not None
        store._journal.background_linger = 0.01
        sizes = _count_batches(store)
        reply = store.submit_file(tmp_path / "conv-a.jsonl", b"reply\n", background=True)
        assert await asyncio.wait_for(asyncio.wrap_future(reply), 10) == 6
        assert sizes == [1]
        assert (tmp_path / "conv-a.jsonl").read_bytes() == b"reply\n"
    finally:
        store.close()


async def test_a_message_append_never_lingers(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path)
    store.open()
    try:
        assert store._journal is not None
        store._journal.background_linger = 30.0
        sizes = _count_batches(store)
        message = store.submit_file(tmp_path / "conv-b.jsonl", b"message\n")
        assert await asyncio.wait_for(asyncio.wrap_future(message), 10) == 8
        assert sizes == [1]
    finally:
        store.close()


async def test_closing_the_journal_writes_a_lingering_reply(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path)
    store.open()
    assert store._journal is not None
    store._journal.background_linger = 30.0
    reply = store.submit_file(tmp_path / "conv-a.jsonl", b"reply\n", background=True)
    await asyncio.sleep(0.05)
    await asyncio.to_thread(store.close)
    assert reply.result(timeout=0) == 6
    assert (tmp_path / "conv-a.jsonl").read_bytes() == b"reply\n"


def _hold_writer(db: Database) -> tuple[threading.Event, asyncio.Future[Any]]:
    """Occupy the writer thread until the event is set (later units queue up)."""
    release, started = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        started.set()
        release.wait(10)

    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    db.submit(hold, future)
    assert started.wait(10)
    return release, future


def _level(conn: Any) -> int:
    return int(conn.execute("PRAGMA synchronous").fetchone()[0])


async def test_unsynced_units_alone_commit_without_a_sync(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "x.db", [_schema], synchronous="FULL")
    loop = asyncio.get_running_loop()
    try:
        assert await db.run(_level) == 2  # FULL
        assert await db.run(Unsynced(_level)) == 1  # NORMAL for this commit only
        assert await db.run(_level) == 2
        # queued together with a synced unit, an Unsynced one is synced too
        release, held = _hold_writer(db)
        relaxed: asyncio.Future[Any] = loop.create_future()
        plain: asyncio.Future[Any] = loop.create_future()
        db.submit(Unsynced(_level), relaxed)
        db.submit(_level, plain)
        release.set()
        await asyncio.wait_for(held, 10)
        assert await asyncio.wait_for(asyncio.gather(relaxed, plain), 10) == [2, 2]
    finally:
        await db.close()


async def test_unsynced_changes_nothing_in_a_normal_database(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "x.db", [_schema])
    try:
        assert await db.run(Unsynced(_level)) == 1
        assert await db.run(_level) == 1
    finally:
        await db.close()


async def _wait_replies(services: Any, count: int) -> list[tuple[str, str]]:
    deadline = time.monotonic() + 10
    while True:
        rows = await services.state.fetchall("SELECT dedup_key, payload FROM outbox ORDER BY id")
        if len(rows) >= count and not services.replies.queue.pending():
            return [(str(k), str(p)) for k, p in rows]
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.01)


async def test_reply_rows_after_the_first_skip_their_sync_and_come_back_if_lost(
    tmp_path: Path,
) -> None:
    """The guarantee the skipped sync relies on: a reply row lost in a crash (here:
    deleted, as a power loss may drop an unsynced commit) is queued again at the next
    start from the durable reply turn, under the same key, as long as a synced row (the
    first reply's) is left to anchor the scan."""
    from bot.services import close_services, open_services
    from tests.conftest import make_config, owner_identities
    from tests.support import inbound

    config = make_config(tmp_path, owner={"identities": owner_identities()})
    services = await open_services(config)
    kinds: list[str] = []
    submit = services.state.submit

    def recording(fn: Any, future: Any, then: Any = None) -> None:
        kinds.append(type(fn).__name__)
        submit(fn, future, then)

    services.state.submit = recording  # type: ignore[method-assign]
    try:
        assert not services.outbox.anchored
        await services.router.deliver(inbound("first walrus"))
        await _wait_replies(services, 1)
        assert services.outbox.anchored
        await services.router.deliver(inbound("second walrus"))
        rows = await _wait_replies(services, 2)
    finally:
        services.state.submit = submit  # type: ignore[method-assign]
        await services.replies.queue.drain(timeout=5)
        await close_services(services)
    assert kinds == ["function", "Unsynced"]  # the anchor is synced, the next is not
    anchor_key, (lost_key, lost_payload) = rows[0][0], rows[1]
    assert lost_key.endswith(":2:reply")

    state = sqlite3.connect(config.state_path)
    try:
        state.execute("DELETE FROM outbox WHERE dedup_key = ?", (lost_key,))
        state.commit()
    finally:
        state.close()

    services = await open_services(config)
    try:
        await resume_pending_replies(services)
        again = await services.state.fetchall("SELECT dedup_key, payload FROM outbox ORDER BY id")
    finally:
        await services.replies.queue.drain(timeout=5)
        await close_services(services)
    assert [k for k, _ in again] == [anchor_key, lost_key]
    import json

    before, after = json.loads(lost_payload), json.loads(again[1][1])
    for key in ("channel", "chat_id", "text", "in_reply_to", "conversation_id"):
        assert after[key] == before[key], key
