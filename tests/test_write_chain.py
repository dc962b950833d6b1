"""The write chain: transcript append (fsync) -> index group commit in one unit, units
queued from other threads, a failing unit alone rolled back, failures on either side."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest

from bot.db import AfterWrite, Database
from bot.events import InboundMessage
from bot.transcript import TranscriptStore
from tests.conftest import make_config


def _schema(conn: Any) -> None:
    conn.execute("CREATE TABLE t (v TEXT UNIQUE)")


async def test_units_from_threads_and_the_loop_commit_and_fail_alone(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "x.db", [_schema])
    loop = asyncio.get_running_loop()
    try:
        futures = [loop.create_future() for _ in range(40)]

        def feed(start: int) -> None:
            for i in range(start, 40, 2):
                value = "dup" if i == 7 else f"v{i}"
                db.submit(
                    lambda c, v=value: c.execute("INSERT INTO t VALUES (?)", (v,)).rowcount,
                    futures[i],
                )

        threads = [threading.Thread(target=feed, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        mine = asyncio.ensure_future(db.run(lambda c: c.execute("INSERT INTO t VALUES ('dup')")))
        for t in threads:
            t.join()
        results = await asyncio.gather(mine, *futures, return_exceptions=True)
        # 'dup' is inserted once (from the loop or from a thread, whichever came first);
        # the other unit fails alone and everything else commits.
        assert sum(isinstance(r, Exception) for r in results) == 1
        rows = await db.fetchall("SELECT v FROM t")
        assert len(rows) == 40  # 39 v-values + one 'dup'
    finally:
        await db.close()


async def test_after_write_runs_with_the_write_result(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "x.db", [_schema])
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        write = pool.submit(lambda: "written")
        got = await db.run(
            AfterWrite(write, lambda c, r: c.execute("INSERT INTO t VALUES (?)", (r,)).rowcount)
        )
        assert got == 1
        assert await db.fetchall("SELECT v FROM t") == [("written",)]

        def fail() -> str:
            raise OSError("disk full")

        failed = pool.submit(fail)
        with pytest.raises(OSError, match="disk full"):
            await db.run(
                AfterWrite(failed, lambda c, r: c.execute("INSERT INTO t VALUES ('never')"))
            )
        assert await db.fetchall("SELECT v FROM t") == [("written",)]
    finally:
        pool.shutdown()
        await db.close()


async def test_torn_tail_written_by_someone_else_is_still_terminated(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path)
    conv = "conv-01HZZZZZZZZZZZZZZZZZZZZZZZ"
    await store.append(conv, [{"type": "turn", "role": "user", "content": "x", "n": 1}])
    with open(store.path(conv), "ab") as fh:  # a crash mid-write (another process)
        fh.write(b'{"type":"turn","n"')
    async with store.lock(conv):
        await asyncio.wrap_future(
            store.submit_append(conv, [{"type": "turn", "role": "user", "content": "x", "n": 2}])
        )
    await store.append(conv, [{"type": "turn", "role": "user", "content": "x", "n": 3}])
    assert [line["n"] for line in store.read_lines(conv)] == [1, 2, 3]


async def test_failed_transcript_write_raises_and_indexes_nothing(services: Any) -> None:
    manager = services.conversations
    rec = await manager.create("web")
    await manager.append_turn(rec.id, "user", "first platypus")
    real = services.store._put

    def full(path: Path, data: bytes, sync: bool = False) -> tuple[int, bytes]:
        raise OSError(28, "No space left on device")

    services.store._put = full  # the journal's transcript write
    try:
        with pytest.raises(OSError, match="No space"):
            await manager.append_turn(rec.id, "user", "lost echidna")
    finally:
        services.store._put = real
    assert (await services.search.search("echidna")).results == []
    fresh, _ = await manager.append_turn(rec.id, "user", "second numbat")
    assert fresh.turn_count == 2
    assert [t["content"] for t in await manager.read_turns(rec.id)] == [
        "first platypus",
        "second numbat",
    ]


async def test_index_unit_failure_keeps_the_turn_and_catches_up(services: Any) -> None:
    manager = services.conversations
    rec = await manager.create("web")
    real = services.index_db.submit
    calls = {"n": 0}

    def flaky(fn: Any, future: Any, then: Any = None) -> None:
        calls["n"] += 1
        if calls["n"] == 1:

            def boom(conn: Any) -> None:
                raise RuntimeError("index hiccup")

            return real(boom, future, then)
        return real(fn, future, then)

    services.index_db.submit = flaky
    try:
        fresh, _ = await manager.append_turn(rec.id, "user", "durable axolotl")
    finally:
        services.index_db.submit = real
    assert fresh.turn_count == 1
    assert (await services.search.search("axolotl")).results == []
    await manager.append_turn(rec.id, "assistant", "noted, capybara")
    for word in ("axolotl", "capybara"):
        page = await services.search.search(word)
        assert [r.conversation_id for r in page.results] == [rec.id], word


async def _outbox_keys(services: Any) -> list[str]:
    rows = await services.state.fetchall("SELECT dedup_key FROM outbox ORDER BY id")
    return [r[0] for r in rows]


async def test_also_write_follows_the_turn_in_one_chain(services: Any) -> None:
    from bot.events import OutboundMessage

    manager = services.conversations
    rec = await manager.create("web")
    out = OutboundMessage(channel="web", chat_id="c", text="hi", conversation_id=rec.id)
    unit = services.outbox.insert_unit(out, dedup_key=f"{rec.id}:1:reply")
    fresh, line = await manager.append_turn(
        rec.id, "assistant", "reply quetzal", turn_number=1, also=(services.state, unit)
    )
    assert fresh.turn_count == 1 and line["content"] == "reply quetzal"
    assert await _outbox_keys(services) == [f"{rec.id}:1:reply"]
    assert [r.conversation_id for r in (await services.search.search("quetzal")).results] == [
        rec.id
    ]
    # The same key again: the row is not duplicated (INSERT OR IGNORE), the turn is stored.
    await manager.append_turn(
        rec.id, "assistant", "again", turn_number=1, also=(services.state, unit)
    )
    assert await _outbox_keys(services) == [f"{rec.id}:1:reply"]


async def test_also_write_happens_when_the_index_fails_not_when_the_transcript_does(
    services: Any,
) -> None:
    manager = services.conversations
    rec = await manager.create("web")

    def row(key: str) -> Any:
        return lambda c: (
            c.execute(
                "INSERT INTO outbox (channel, payload, dedup_key, created)"
                " VALUES ('web', '{}', ?, '')",
                (key,),
            ).rowcount
        )

    real_submit = services.index_db.submit

    def failing(fn: Any, future: Any, then: Any = None) -> None:
        def boom(conn: Any) -> None:
            raise RuntimeError("index hiccup")

        real_submit(boom, future, then)

    services.index_db.submit = failing
    try:
        fresh, _ = await manager.append_turn(
            rec.id, "assistant", "kept tapir", turn_number=1, also=(services.state, row("a"))
        )
    finally:
        services.index_db.submit = real_submit
    assert fresh.turn_count == 1 and await _outbox_keys(services) == ["a"]

    real_write = services.store._put

    def full(path: Path, data: bytes, sync: bool = False) -> tuple[int, bytes]:
        raise OSError(28, "No space left on device")

    services.store._put = full  # the journal's transcript write
    try:
        with pytest.raises(OSError):
            await manager.append_turn(
                rec.id, "assistant", "lost", turn_number=1, also=(services.state, row("b"))
            )
    finally:
        services.store._put = real_write
    assert await _outbox_keys(services) == ["a"]
    # The index caught up with the turn whose index update failed.
    await manager.append_turn(rec.id, "user", "next")
    assert [r.conversation_id for r in (await services.search.search("tapir")).results] == [rec.id]


async def test_a_unit_queued_after_close_fails_instead_of_hanging(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "x.db", [_schema])
    await db.close()
    with pytest.raises(ValueError, match="closed"):
        await asyncio.wait_for(db.run(lambda c: c.execute("INSERT INTO t VALUES ('x')")), 5)


async def test_a_finished_chain_lets_go_of_the_write_future(tmp_path: Path) -> None:
    """Regression: the unit kept its write's future and the future kept the callback
    that refers to the unit, a reference cycle per message freed only by the cyclic
    collector (its pauses were the open-loop ingest's p99, docs/benchmarks.md)."""
    db = await Database.open(tmp_path / "x.db", [_schema])
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        for value in ("ok", "boom"):
            write: concurrent.futures.Future[str] = pool.submit(lambda v=value: v)
            unit = AfterWrite(
                write,
                lambda c, r: (
                    c.execute("INSERT INTO t VALUES (?)", (r,))
                    if r == "ok"
                    else c.execute("INSERT INTO nowhere VALUES (1)")
                ),
            )
            try:
                await db.run(unit)
            except Exception as exc:  # the driver's OperationalError
                assert value == "boom" and "nowhere" in str(exc)
            gone = weakref.ref(write)
            del write
            assert gone() is None  # freed by reference counting, no collector needed
            assert unit.after is None
    finally:
        pool.shutdown()
        await db.close()


async def test_messages_and_replies_leave_no_reference_cycles(tmp_path: Path) -> None:
    """Everything a message and its reply allocate is freed by reference counting."""
    from bot.services import close_services, open_services

    services = await open_services(make_config(tmp_path))

    def message(i: int) -> InboundMessage:
        party = i % 5
        return InboundMessage(
            channel="bench",
            sender_id=f"user{party}",
            text=f"message {i} about the garden and the invoice",
            message_id=f"m{i}",
            chat_id=f"g{party}",
            group_id=f"g{party}",
            sender_name=f"User {party}",
            addressed=True,
        )

    try:
        for i in range(10):  # warm caches, first-contact records, prepared statements
            await services.router.deliver(message(i))
        await services.replies.queue.drain(timeout=10)
        gc.collect()
        gc.disable()
        try:
            await asyncio.gather(*(services.router.deliver(message(i)) for i in range(10, 60)))
            await services.replies.queue.drain(timeout=10)
            assert gc.collect() == 0
        finally:
            gc.enable()
    finally:
        await close_services(services)


@pytest.mark.parametrize("landed", [False, True])
async def test_a_reply_that_cannot_be_written_is_tried_again(
    services: Any, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    # Regression: a reply whose transcript write failed (disk full) was logged and
    # dropped; the acknowledged message stayed unanswered until the next restart, and
    # /readyz said ready meanwhile. ``landed``: the bytes reached the transcript but the
    # journal's sync failed; the reply is then queued from it, not written twice.
    from bot import reply_writes
    from tests.conftest import RecordingChannel, attach_channel, settle

    monkeypatch.setattr(reply_writes, "STORAGE_RETRY_FIRST", 0.05)
    channel = RecordingChannel("web")
    await attach_channel(services, channel)
    real = services.store._put
    failures = {"left": 3 if not landed else 1}
    waiting: list[int] = []

    def full(path: Path, data: bytes, sync: bool = False) -> tuple[int, bytes]:
        if b'"role":"assistant"' in data.replace(b" ", b"") and failures["left"]:
            failures["left"] -= 1
            waiting.append(services.health()["repliesWaitingForStorage"])
            if landed:
                real(path, data, sync)
            raise OSError(28, "No space left on device")
        return real(path, data, sync)

    services.store._put = full
    try:
        await services.router.deliver(
            InboundMessage("web", "owner", "the kiwi count is 12", "w1", "tab")
        )
        await settle(services)
    finally:
        services.store._put = real
    assert failures["left"] == 0
    assert len(channel.sent) == 1  # answered once, while running
    rec = (await services.conversations.list(channel="web"))[0]
    roles = [t["role"] for t in await services.conversations.read_turns(rec.id)]
    assert roles == ["user", "assistant"]
    if not landed:
        assert waiting[1:] == [1, 1]  # reported while it waited
    assert services.health()["repliesWaitingForStorage"] == 0


HOLD_WRITE_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


async def test_a_reply_whose_outbox_row_meets_a_locked_state_db_is_sent_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: another process holding state.db's write lock past the busy timeout
    # (the sqlite3 CLI, a backup script) failed the reply's outbox row with "database is
    # locked" after its transcript turn was written: the job failed and the reply stayed
    # unsent until the next start. Now only the row is tried again; the reply is written
    # once and sent once.
    from bot import reply_writes, sqlite_conn, walcheckpoint
    from bot.services import open_services
    from tests.conftest import RecordingChannel, attach_channel, settle, shutdown_services

    monkeypatch.setattr(reply_writes, "STORAGE_RETRY_FIRST", 0.05)
    monkeypatch.setattr(sqlite_conn, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(walcheckpoint, "BUSY_TIMEOUT_MS", 50)
    services = await open_services(make_config(tmp_path))
    channel = RecordingChannel("web")
    await attach_channel(services, channel)
    real = services.replies._store
    holders: list[asyncio.subprocess.Process] = []

    async def store_while_locked(*args: Any) -> None:
        if not holders:  # another process (locks do not apply within one) holds it
            holder = await asyncio.create_subprocess_exec(
                sys.executable, "-c", HOLD_WRITE_LOCK, str(services.state.path), "0.6",
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            holders.append(holder)
            assert holder.stdout is not None
            assert await holder.stdout.readline() == b"locked\n"
        await real(*args)

    services.replies._store = store_while_locked
    try:
        await services.router.deliver(
            InboundMessage("web", "owner", "the kiwi count is 12", "w1", "tab")
        )
        await asyncio.sleep(0.8)
        await settle(services)
        assert len(channel.sent) == 1  # answered once, while running
        rec = (await services.conversations.list(channel="web"))[0]
        roles = [t["role"] for t in await services.conversations.read_turns(rec.id)]
        assert roles == ["user", "assistant"]
        assert services.health()["repliesWaitingForStorage"] == 0
    finally:
        await shutdown_services(services)
    assert [await h.wait() for h in holders] == [0]
