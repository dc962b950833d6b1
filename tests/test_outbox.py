"""The persisted outbox: at most once per dedup key, strict order per chat, retries with
backoff on a controllable clock, permanent failures, and delivery after a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.db import Database
from bot.events import OutboundMessage, SendResult
from bot.outbox import Outbox, backoff
from bot.schema import STATE_MIGRATIONS
from tests.conftest import RecordingChannel
from tests.support import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[Database]:
    db = await Database.open(tmp_path / "state.db", STATE_MIGRATIONS, synchronous="FULL")
    yield db
    await db.close()


def msg(text: str, channel: str = "test", **fields: object) -> OutboundMessage:
    return OutboundMessage(channel=channel, chat_id="c1", text=text, **fields)  # type: ignore[arg-type]


async def _first_attempt(channel: RecordingChannel) -> None:
    for _ in range(200):
        if channel.attempts:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the outbox never tried to send")


async def _status(db: Database) -> list[tuple[str, str, int]]:
    rows = await db.fetchall("SELECT payload, status, attempts FROM outbox ORDER BY id")
    import json

    return [(json.loads(p)["text"], s, a) for p, s, a in rows]


async def test_a_reply_key_taken_by_the_reply_to_another_message_gets_its_own(
    state: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Transcripts put back from an older copy: a new message numbered as a lost turn
    (its reply's key taken by the lost reply's row) was dropped silently before session
    40. The reply to another channel message is queued under its own key (once), the
    same message's reply again is not, and a key taken by another text is logged."""
    outbox = Outbox(state)
    key = "conv-x:3:reply"
    assert await outbox.enqueue(msg("lost reply", in_reply_to="m3"), dedup_key=key) is not None
    assert await outbox.enqueue(msg("new reply", in_reply_to="m6"), dedup_key=key) is not None
    assert await outbox.has_key(f"{key}:m6")
    assert await outbox.enqueue(msg("new reply", in_reply_to="m6"), dedup_key=key) is None
    assert "taken by the reply to another message (m3, pending)" in caplog.text
    caplog.clear()
    assert await outbox.enqueue(msg("lost reply", in_reply_to="m3"), dedup_key=key) is None
    assert caplog.text == ""  # the same reply again: what the key is for
    assert await outbox.enqueue(msg("other text", in_reply_to="m3"), dedup_key=key) is None
    assert "queued before for another reply (pending): this one is not sent" in caplog.text
    texts = [(text, status) for text, status, _ in await _status(state)]
    assert texts == [("lost reply", "pending"), ("new reply", "pending")]
    payloads = [row[0] for row in await state.fetchall("SELECT payload FROM outbox ORDER BY id")]
    assert '"send_key": "conv-x:3:reply:m6"' in payloads[1]  # not the lost reply's


async def test_dedup_key_sends_at_most_once(state: Database) -> None:
    outbox = Outbox(state)
    channel = RecordingChannel()
    assert await outbox.enqueue(msg("reply 7"), dedup_key="conv-x:7:reply") is not None
    assert await outbox.enqueue(msg("reply 7 again"), dedup_key="conv-x:7:reply") is None
    assert await outbox.has_key("conv-x:7:reply")
    outbox.attach(channel)
    try:
        await channel.wait_count(1)
        # the send is recorded by a commit with fsync (synchronous=FULL): a disk stall can
        # hold it well past any fixed sleep (a CI flake), so wait for it
        for _ in range(500):
            if await outbox.pending_count() == 0:
                break
            await asyncio.sleep(0.02)
        assert await outbox.pending_count() == 0
        assert channel.texts() == ["reply 7"]
        sent = await outbox.sent_messages("test")
        assert [m.text for m in sent] == ["reply 7"] and sent[0].outbox_id is not None
    finally:
        await outbox.stop()


async def test_roundtrip_of_every_field(state: Database) -> None:
    outbox = Outbox(state)
    channel = RecordingChannel()
    original = msg(
        "with everything",
        kind="escalation",
        conversation_id="conv-1",
        party_id="p1234567",
        in_reply_to="<a@b>",
        thread_refs=("<r1@b>", "<r2@b>"),
        subject="Re: x",
        actions=(("Trust", "/trust p1234567"), ("Block", "/block p1234567")),
        metadata={"command": "new", "nested": {"a": [1, 2]}},
    )
    await outbox.enqueue(original)
    outbox.attach(channel)
    try:
        (got,) = await channel.wait_count(1)
    finally:
        await outbox.stop()
    assert got.outbox_id is not None
    assert got.send_key is not None and got.send_key.startswith("row:")  # no dedup key
    assert got == OutboundMessage(
        **{**original.__dict__, "outbox_id": got.outbox_id, "send_key": got.send_key}
    )


async def test_failures_are_retried_in_order_on_the_clock(state: Database) -> None:
    clock = Clock()
    outbox = Outbox(state, base_delay=50.0, clock=clock)
    channel = RecordingChannel()
    channel.fail_next(1)
    results: list[str | None] = []

    async def on_sent(message: OutboundMessage, result: SendResult) -> None:
        results.append(result.message_ref)

    outbox.on_sent(on_sent)
    await outbox.enqueue(msg("first"))
    await outbox.enqueue(msg("second"))
    outbox.attach(channel)
    try:
        await _first_attempt(channel)
        await asyncio.sleep(0.1)
        # The head failed; nothing behind it may overtake it while it waits.
        assert channel.sent == []
        assert await _status(state) == [("first", "pending", 1), ("second", "pending", 0)]
        row = await state.fetchone(
            "SELECT last_error FROM outbox WHERE status = 'pending' ORDER BY id"
        )
        assert row is not None and "told to fail" in row[0]
        clock.now += 50.0 * 2**16  # beyond any backoff
        outbox.kick()
        await channel.wait_count(2)
        assert channel.texts() == ["first", "second"]
        for _ in range(200):  # the callback runs once the send is marked
            if len(results) == 2:
                break
            await asyncio.sleep(0.01)
        assert results == ["test-sent-1", "test-sent-2"]
    finally:
        await outbox.stop()
    assert await _status(state) == [("first", "sent", 2), ("second", "sent", 1)]


async def test_a_retry_later_is_not_retried_sooner(state: Database) -> None:
    from bot.channel import RetryLater

    clock = Clock()
    outbox = Outbox(state, base_delay=0.01, clock=clock)

    class Flooded(RecordingChannel):
        async def send(self, message: OutboundMessage) -> SendResult:
            if self.attempts == 0:
                self.attempts += 1
                raise RetryLater(120.0, "Too Many Requests: retry after 120")
            return await super().send(message)

    channel = Flooded()
    await outbox.enqueue(msg("during a flood wait"))
    outbox.attach(channel)
    try:
        await _first_attempt(channel)
        row = None
        for _ in range(200):
            row = await state.fetchone("SELECT attempts, next_attempt FROM outbox")
            if row is not None and row[0] == 1:
                break
            await asyncio.sleep(0.01)
        assert row is not None and row[0] == 1
        assert row[1] >= clock.now + 120  # not the 0.01 s backoff
        clock.now += 120
        outbox.kick()
        await channel.wait_count(1)
    finally:
        await outbox.stop()
    assert await _status(state) == [("during a flood wait", "sent", 2)]


async def test_permanent_failure_does_not_block_the_queue(state: Database) -> None:
    from bot.channel import PermanentSendError

    outbox = Outbox(state)

    class Refusing(RecordingChannel):
        async def send(self, message: OutboundMessage) -> SendResult:
            if message.text == "to a deleted chat":
                raise PermanentSendError("chat not found")
            return await super().send(message)

    channel = Refusing()
    await outbox.enqueue(msg("to a deleted chat"))
    await outbox.enqueue(msg("fine"))
    outbox.attach(channel)
    try:
        await channel.wait_count(1)
    finally:
        await outbox.stop()
    assert await _status(state) == [("to a deleted chat", "failed", 1), ("fine", "sent", 1)]


async def test_gives_up_after_max_attempts(state: Database) -> None:
    clock = Clock()
    outbox = Outbox(state, max_attempts=3, base_delay=1.0, clock=clock)
    channel = RecordingChannel()
    channel.failing = True
    await outbox.enqueue(msg("doomed"))
    outbox.attach(channel)
    try:
        for _ in range(300):
            if channel.attempts >= 3:
                break
            clock.now += 10_000
            outbox.kick()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    finally:
        await outbox.stop()
    assert channel.attempts == 3
    assert await _status(state) == [("doomed", "failed", 3)]


async def test_an_unreachable_server_never_uses_up_the_attempts(state: Database) -> None:
    # Regression: a network outage of about 2.6 hours used up the 50 attempts of every
    # reply queued during it, and they were lost (each attempt counted like a refusal).
    clock = Clock()
    outbox = Outbox(state, max_attempts=3, base_delay=1.0, clock=clock)
    channel = RecordingChannel()
    channel.unreachable = True
    failed: list[str] = []

    async def on_failed(message: OutboundMessage, error: str) -> None:
        failed.append(message.text)

    outbox.on_failed(on_failed)
    await outbox.enqueue(msg("held through the outage"))
    outbox.attach(channel)
    try:
        for _ in range(600):
            if channel.attempts >= 20:
                break
            clock.now += 10_000
            outbox.kick()
            await asyncio.sleep(0.01)
        assert channel.attempts >= 20
        assert await _status(state) == [("held through the outage", "pending", 0)]
        row = await state.fetchone("SELECT last_error FROM outbox")
        assert row is not None and "server is down" in row[0]
        channel.unreachable = False
        clock.now += 10_000
        outbox.kick()
        await channel.wait_count(1)
    finally:
        await outbox.stop()
    assert failed == []
    assert channel.texts() == ["held through the outage"]


async def test_a_server_reachable_again_gets_the_held_messages_at_once(state: Database) -> None:
    # Regression: after an outage the held replies (and the owner's new ones, behind them
    # in their chat) waited out their backoff, up to five minutes, with Telegram back.
    clock = Clock()
    outbox = Outbox(state, base_delay=1000.0, clock=clock)  # every backoff long
    channel = RecordingChannel()
    channel.unreachable = True
    await outbox.enqueue(msg("first"))
    await outbox.enqueue(msg("second"))
    await outbox.enqueue(OutboundMessage(channel="test", chat_id="c2", text="to another chat"))
    outbox.attach(channel)
    try:
        await wait_until(lambda: channel.attempts >= 2)
        await asyncio.sleep(0.1)
        assert channel.sent == []
        channel.unreachable = False
        await outbox.reachable("elsewhere")  # another channel's server: nothing hurried
        await asyncio.sleep(0.1)
        assert channel.sent == []
        await outbox.reachable("test")  # the clock unmoved: only this says they are due
        await channel.wait_count(3)
        assert channel.texts() == ["first", "second", "to another chat"]
    finally:
        await outbox.stop()


async def test_a_send_that_goes_through_makes_the_outages_held_messages_due(
    state: Database,
) -> None:
    # (session 39) a channel with no poll to say its server is back (SMTP): the first
    # message that goes through says it for the rest
    clock = Clock()
    outbox = Outbox(state, base_delay=1000.0, clock=clock)  # every backoff long
    channel = RecordingChannel()
    channel.unreachable = True
    await outbox.enqueue(msg("held in one chat"))
    await outbox.enqueue(OutboundMessage(channel="test", chat_id="c2", text="held in another"))
    outbox.attach(channel)
    try:
        await wait_until(lambda: channel.attempts >= 2)
        channel.unreachable = False
        await outbox.enqueue(OutboundMessage(channel="test", chat_id="c3", text="new, due now"))
        await channel.wait_count(3)
        assert channel.texts()[0] == "new, due now"
        assert sorted(channel.texts()[1:]) == ["held in another", "held in one chat"]
    finally:
        await outbox.stop()


class WithdrawnWhileSending(RecordingChannel):
    """A channel whose first send fails after its row was withdrawn meanwhile."""

    def __init__(self, outbox: Outbox) -> None:
        super().__init__()
        self.outbox = outbox

    async def send(self, message: OutboundMessage) -> SendResult:
        self.attempts += 1
        if self.attempts == 1:
            await self.outbox.withdraw("p1", ":reply", "the party is blocked")
        raise ConnectionError("and the send failed")


async def test_a_row_withdrawn_while_its_send_fails_is_not_retried(state: Database) -> None:
    # (session 40) a known contact's answer withdrawn when the owner blocked them: the
    # retry mark of its failed send put it back to pending, and it went out later
    clock = Clock()
    outbox = Outbox(state, clock=clock)
    channel = WithdrawnWhileSending(outbox)
    await outbox.enqueue(msg("an answer", party_id="p1"), dedup_key="telegram:k1:reply")
    by_hand = OutboundMessage(channel="test", chat_id="c2", text="by hand", party_id="p1")
    await outbox.enqueue(by_hand, dedup_key="c:m1:to-party")
    outbox.attach(channel)
    try:
        await wait_until(lambda: channel.attempts >= 2)
        await outbox.stop()  # the second's retry marked
        rows = await state.fetchall("SELECT dedup_key, status, last_error FROM outbox ORDER BY id")
        assert rows[0][:2] == ("telegram:k1:reply", "failed")
        assert rows[0][2] == "withdrawn: the party is blocked"
        assert rows[1][:2] == ("c:m1:to-party", "pending")  # only the keys asked for
    finally:
        await outbox.stop()


async def test_pending_messages_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = await Database.open(path, STATE_MIGRATIONS, synchronous="FULL")
    await Outbox(db).enqueue(msg("queued while the channel was down"), dedup_key="k1")
    await db.close()

    db = await Database.open(path, STATE_MIGRATIONS, synchronous="FULL")
    outbox = Outbox(db)
    channel = RecordingChannel()
    try:
        assert await outbox.pending_count() == 1
        assert await outbox.enqueue(msg("duplicate after restart"), dedup_key="k1") is None
        outbox.attach(channel)
        await channel.wait_count(1)
        await asyncio.sleep(0.05)
        assert channel.texts() == ["queued while the channel was down"]
    finally:
        await outbox.stop()
        await db.close()


async def test_channels_do_not_block_each_other(state: Database) -> None:
    outbox = Outbox(state, base_delay=1000.0)
    down, up = RecordingChannel("down"), RecordingChannel("up")
    down.failing = True
    await outbox.enqueue(msg("stuck", channel="down"))
    await outbox.enqueue(msg("flows", channel="up"))
    outbox.attach(down)
    outbox.attach(up)
    try:
        await up.wait_count(1)
        assert down.sent == []
    finally:
        await outbox.stop()


async def test_a_chat_waiting_for_a_retry_holds_back_only_itself(state: Database) -> None:
    """Order is strict per chat: a group's flood-control wait (or a stranger's server
    refusing for now) held back every other chat of the channel, the owner's replies
    included, for as long as the wait."""
    clock = Clock()
    outbox = Outbox(state, base_delay=50.0, clock=clock)
    channel = RecordingChannel()
    channel.fail_next(1)
    await outbox.enqueue(OutboundMessage(channel="test", chat_id="group", text="group 1"))
    await outbox.enqueue(OutboundMessage(channel="test", chat_id="owner", text="owner 1"))
    await outbox.enqueue(OutboundMessage(channel="test", chat_id="group", text="group 2"))
    await outbox.enqueue(OutboundMessage(channel="test", chat_id="owner", text="owner 2"))
    outbox.attach(channel)
    try:
        await channel.wait_count(2)
        # both owner sends marked sent and the group's failure marked for its retry (each a
        # commit with fsync: a fixed 0.1 s could end before the last, counted deliverable)
        expected = [("group 1", "pending", 1), ("owner 1", "sent", 1),
                    ("group 2", "pending", 0), ("owner 2", "sent", 1)]  # fmt: skip

        async def marked() -> bool:
            return await _status(state) == expected

        await wait_until(marked, what=f"the outbox rows {expected}")
        assert channel.texts() == ["owner 1", "owner 2"]  # the group's 2nd stays behind its 1st
        assert await outbox.deliverable_count() == 0  # the group waits for its retry
        clock.now += 50.0 * 2**16
        assert await outbox.deliverable_count() == 2
        outbox.kick()
        await channel.wait_count(4)
        assert channel.texts() == ["owner 1", "owner 2", "group 1", "group 2"]
    finally:
        await outbox.stop()


def test_backoff_is_bounded_full_jitter() -> None:
    for attempt in range(1, 30):
        for _ in range(20):
            delay = backoff(attempt, base=1.0, cap=300.0)
            assert 0 <= delay <= min(300.0, 2.0**attempt)


async def test_deliverable_count_leaves_out_what_cannot_go_now(state: Database) -> None:
    """What a stop waits for (bot.daemon.shutdown): not the rows of a channel that is not
    running, nor a channel whose head waits for a retry (every stop took the whole drain
    time, 20 s, when a disabled channel still had rows)."""
    clock = Clock()
    outbox = Outbox(state, base_delay=50.0, clock=clock)
    await outbox.enqueue(msg("to a channel not running", channel="telegram"))
    assert await outbox.pending_count() == 1
    assert await outbox.deliverable_count() == 0
    channel = RecordingChannel()
    channel.failing = True
    await outbox.enqueue(msg("first"))
    await outbox.enqueue(msg("second"))
    outbox.attach(channel)
    try:
        await _first_attempt(channel)
        for _ in range(200):  # the failed attempt's mark is committed
            if (await _status(state))[1][2] == 1:
                break
            await asyncio.sleep(0.01)
        assert await outbox.deliverable_count() == 0  # the head waits for its retry
        clock.now += 1000
        assert await outbox.deliverable_count() == 2  # due: both would go, in order
        assert await outbox.pending_count() == 3
    finally:
        await outbox.stop()


async def test_a_stop_does_not_wait_for_a_channel_that_is_not_running(tmp_path: Path) -> None:
    from bot.daemon import shutdown
    from bot.services import open_services
    from tests.conftest import make_config

    services = await open_services(make_config(tmp_path))
    await services.outbox.enqueue(msg("queued while telegram ran", channel="telegram"))
    # drain_seconds 20: before, the stop waited all of it for a row no worker would send
    await asyncio.wait_for(shutdown(services, [], None, drain_seconds=20), 10)
    assert await _status_after_reopen(tmp_path) == [("queued while telegram ran", "pending", 0)]


async def _status_after_reopen(tmp_path: Path) -> list[tuple[str, str, int]]:
    from tests.conftest import make_config

    db = await Database.open(make_config(tmp_path).state_path, STATE_MIGRATIONS)
    try:
        return await _status(db)
    finally:
        await db.close()


async def test_a_state_db_write_failure_does_not_stop_the_channel_or_send_twice(
    state: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: when the "sent" mark could not be written (state.db on a full disk)
    # the channel's worker died: nothing more was sent on it until a restart.
    from tests.sqlite_driver import sqlite3

    outbox = Outbox(state, base_delay=0.01)
    channel = RecordingChannel()
    real_run = state.run
    failures = {"marks": 2}

    async def flaky_run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        if fn.__name__ == "_update" and failures["marks"]:
            failures["marks"] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return await real_run(fn, *args, **kwargs)

    monkeypatch.setattr(state, "run", flaky_run)
    await outbox.enqueue(msg("sent while the disk was full"))
    outbox.attach(channel)
    try:
        await channel.wait_count(1)
        await outbox.enqueue(msg("after the space came back"))
        await channel.wait_count(2)
        for _ in range(200):
            if await outbox.pending_count() == 0:
                break
            await asyncio.sleep(0.01)
    finally:
        await outbox.stop()
    # the mark was retried, never the send
    assert channel.texts() == ["sent while the disk was full", "after the space came back"]
    assert await _status(state) == [
        ("sent while the disk was full", "sent", 1),
        ("after the space came back", "sent", 1),
    ]


async def test_a_message_the_channel_took_is_not_counted_undelivered_while_its_mark_is_written(
    state: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 42): /status asked right after a reply arrived said "outbox
    # pending: 1": the row's "sent" mark, a synced commit, was still being written.
    outbox = Outbox(state)
    channel = RecordingChannel()
    real_run = state.run
    marking, release = asyncio.Event(), asyncio.Event()

    async def held_mark(fn: Any, *args: Any, **kwargs: Any) -> Any:
        if fn.__name__ == "_update":
            marking.set()
            await release.wait()
        return await real_run(fn, *args, **kwargs)

    monkeypatch.setattr(state, "run", held_mark)
    await outbox.enqueue(msg("delivered, its mark on the way"))
    await outbox.enqueue(msg("for a channel not running", channel="other"))
    assert await outbox.undelivered_count() == 2  # nothing taken yet
    outbox.attach(channel)
    try:
        await asyncio.wait_for(marking.wait(), 10)
        assert channel.texts() == ["delivered, its mark on the way"]
        assert [s for _, s, _ in await _status(state)] == ["pending", "pending"]
        assert await outbox.pending_count() == 2  # the rows as they are
        assert await outbox.undelivered_count() == 1  # the other channel's only
        release.set()
        await wait_until(
            lambda: _first_sent(state), timeout=10, what="the delivered row marked sent"
        )
        assert await outbox.undelivered_count() == await outbox.pending_count() == 1
    finally:
        release.set()
        await outbox.stop()


async def _first_sent(state: Database) -> bool:
    return (await _status(state))[0][1] == "sent"


async def test_a_retry_is_not_stalled_when_the_wall_clock_is_set_back(state: Database) -> None:
    """The wall clock set back a day after a failure (NTP, a wrong clock fixed): the
    retry still comes after its backoff, not a day later (it blocked the channel)."""
    import time

    from bot.outbox import SteadyClock

    offset = [0.0]
    outbox = Outbox(state, base_delay=0.01, clock=SteadyClock(lambda: time.time() - offset[0]))
    channel = RecordingChannel()
    channel.fail_next(1)
    await outbox.enqueue(msg("after the jump"))
    outbox.attach(channel)
    try:
        await _first_attempt(channel)
        offset[0] = 86400.0
        outbox.kick()
        await asyncio.wait_for(channel.wait_count(1), timeout=5)
    finally:
        await outbox.stop()
    assert await _status(state) == [("after the jump", "sent", 2)]


async def test_a_retry_time_left_far_ahead_by_an_earlier_run_is_bounded(
    state: Database,
) -> None:
    """A row marked by the last run before the clock was set back a day waits at most
    STALE_WAIT_SECONDS, not until the clock catches up; one this run gave a long
    flood-control wait keeps it."""
    from bot.outbox import STALE_WAIT_SECONDS

    clock = Clock()
    outbox = Outbox(state, clock=clock)
    outbox_id = await outbox.enqueue(msg("queued before the jump"))
    await state.run(
        lambda conn: conn.execute(
            "UPDATE outbox SET attempts = 1, next_attempt = ? WHERE id = ?",
            (clock.now + 86400 + 30, outbox_id),
        )
    )
    item = await outbox._next_due("test")
    assert item is not None and item[2] is not None and item[2] <= STALE_WAIT_SECONDS
    await outbox._mark(item[0], "pending", 2, delay=7200.0)
    item = await outbox._next_due("test")
    assert item is not None and item[2] == 7200.0
