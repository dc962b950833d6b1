"""Under a flood of incoming messages, replies to others than the owner wait for it to
pause (bot/arrivals.py); the owner's replies never wait, and nothing waits in ordinary
traffic. Short real waits (tens of milliseconds), no timings asserted beyond order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.arrivals import IncomingFlow
from bot.reply_queue import KeyedSerialQueue
from bot.services import open_services
from tests.conftest import (
    OWNER_TELEGRAM_ID,
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    settle,
    shutdown_services,
)
from tests.support import ScriptedBrain, inbound, wait_until

QUIET = 0.05


async def _flood(flow: IncomingFlow, seconds: float, every: float = 0.005) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        flow.note()
        await asyncio.sleep(every)


async def test_no_recent_message_no_wait() -> None:
    flow = IncomingFlow(quiet=QUIET, max_wait=10)
    await asyncio.wait_for(flow.pause(), 0.01)
    assert flow.deferred == 0


async def test_a_message_alone_is_answered_after_the_quiet_time() -> None:
    flow = IncomingFlow(quiet=QUIET, max_wait=10)
    flow.note()  # the message the reply answers
    await asyncio.wait_for(flow.pause(), QUIET * 4)
    assert flow.deferred == 0  # nobody else came


async def test_a_reply_waits_until_the_flood_pauses() -> None:
    flow = IncomingFlow(quiet=QUIET, max_wait=10)
    flooding = asyncio.create_task(_flood(flow, 0.4))
    await asyncio.sleep(0.02)
    waiter = asyncio.create_task(flow.pause())
    await asyncio.sleep(0.2)
    assert not waiter.done()  # messages still arriving every 5 ms
    await flooding
    await asyncio.wait_for(waiter, 1)
    assert flow.deferred == 1


async def test_a_reply_waits_at_most_max_wait() -> None:
    flow = IncomingFlow(quiet=QUIET, max_wait=0.1)
    flooding = asyncio.create_task(_flood(flow, 2))
    await asyncio.sleep(0.02)
    try:
        await asyncio.wait_for(flow.pause(), 1)  # the flood goes on; the wait does not
        assert not flooding.done()
    finally:
        flooding.cancel()


async def test_stop_ends_every_wait_and_the_next_ones() -> None:
    flow = IncomingFlow(quiet=QUIET, max_wait=60)
    flow.note()
    waiters = [asyncio.create_task(flow.pause()) for _ in range(3)]
    await asyncio.sleep(0.01)
    flow.stop()
    flow.note()
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    await asyncio.wait_for(flow.pause(), 0.01)


async def test_max_wait_zero_never_waits() -> None:
    flow = IncomingFlow(quiet=QUIET, max_wait=0)
    flow.note()
    await asyncio.wait_for(flow.pause(), 0.01)
    assert flow.deferred == 0


async def test_a_waiting_job_holds_no_slot() -> None:
    """With one slot, a job waiting for the flood does not keep the owner's waiting."""
    queue = KeyedSerialQueue(max_running=1)
    flow = IncomingFlow(quiet=QUIET, max_wait=60)
    ran: list[str] = []

    async def job(name: str) -> None:
        ran.append(name)

    flow.note()
    queue.submit("member", lambda: job("member"), wait=flow.pause)
    queue.submit("owner", lambda: job("owner"))
    flooding = asyncio.create_task(_flood(flow, 0.2))
    await asyncio.sleep(0.1)
    assert ran == ["owner"]
    await flooding
    # the member's turn once the flood has paused (was: a fixed QUIET * 3 after it)
    await wait_until(lambda: len(ran) == 2, 10, "the member's job")
    assert ran == ["owner", "member"]


async def test_drain_leaves_a_waiting_job_queued_and_returns_at_once() -> None:
    queue = KeyedSerialQueue(max_running=2)
    flow = IncomingFlow(quiet=QUIET, max_wait=60)
    ran: list[str] = []

    async def job() -> None:
        ran.append("member")

    flow.note()
    queue.submit("member", job, wait=flow.pause)
    flooding = asyncio.create_task(_flood(flow, 5))
    await asyncio.sleep(0.05)
    flow.stop()  # what the daemon does before draining (bot/daemon.py)
    assert await asyncio.wait_for(queue.drain(timeout=5), 1)
    flooding.cancel()
    assert ran == []  # its turn stays unanswered on disk, answered after the restart


def _replied(text: str) -> Any:
    return lambda sent: any(m.text == f"re: {text}" for m in sent)


class Group:
    def __init__(self, services: Any) -> None:
        self.s = services
        self.telegram = RecordingChannel("telegram")


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[Group]:
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        brain={"flood_reply_wait_seconds": 30, "debounce_seconds": {}},
    )
    stack = Group(await open_services(config, brain=ScriptedBrain()))
    stack.s.incoming.quiet = QUIET
    await attach_channel(stack.s, stack.telegram)
    try:
        yield stack
    finally:
        await shutdown_services(stack.s)


async def test_in_a_flood_members_wait_and_the_owner_does_not(group: Group) -> None:
    """A group flooded by members: their replies come once the flood pauses; the owner's
    message in the middle of it is answered while it goes on. Nothing is lost."""
    # A pause long enough that no gap between two deliveries reaches it on a loaded
    # machine (each is a durable append and an index update): with the 50 ms of the
    # other tests, a slow delivery let members' replies out mid-flood (flaky at load 4+).
    group.s.incoming.quiet = 2.0
    say = group.s.router.deliver
    members = [f"member question {i}" for i in range(40)]
    for text in members[:20]:
        await say(inbound(text, sender="31337", group_id="-100", chat="-100", addressed=True))
        await asyncio.sleep(0.005)
    await say(inbound("owner asks", sender=OWNER_TELEGRAM_ID, addressed=True))
    await group.telegram.wait_for(_replied("owner asks"), timeout=5)
    sent_during = [m.text for m in group.telegram.sent if m.kind == "reply"]
    assert sent_during == ["re: owner asks"]  # the members' replies all still wait
    for text in members[20:]:
        await say(inbound(text, sender="31337", group_id="-100", chat="-100", addressed=True))
        await asyncio.sleep(0.005)
    await settle(group.s)
    replies = [m.text for m in group.telegram.sent if m.kind == "reply"]
    assert sorted(replies) == sorted(["re: owner asks"] + [f"re: {t}" for t in members])
    assert group.s.incoming.deferred >= 1


async def test_in_ordinary_traffic_a_reply_waits_for_no_one(group: Group) -> None:
    for i in range(3):
        text = f"member question {i}"
        await group.s.router.deliver(
            inbound(text, sender="31337", group_id="-100", chat="-100", addressed=True)
        )
        await group.telegram.wait_for(_replied(text), timeout=5)
        await asyncio.sleep(QUIET * 2)
    assert group.s.incoming.deferred == 0


class _CountingSleeps:
    """``asyncio`` as bot/arrivals.py sees it, counting the flood watcher's wake-ups."""

    def __init__(self) -> None:
        self.sleeps = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self.sleeps += 1
        await asyncio.sleep(delay)


async def test_a_flood_six_times_longer_than_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 60 s flood against brain.flood_reply_wait_seconds 10 s, scaled down (quiet
    30 ms, wait 150 ms, flood 900 ms): the deferred replies go every wait at most, one
    per key at a time, none is lost, and the owner's all go; the watcher wakes about
    once per quiet period (no busy loop). Nothing in the flow grows per message: only
    the jobs queued, one per reply owed, as without a flood."""
    import bot.arrivals

    counting = _CountingSleeps()
    monkeypatch.setattr(bot.arrivals, "asyncio", counting)
    quiet, wait, flood_for = 0.03, 0.15, 0.9
    queue = KeyedSerialQueue(max_running=1)
    flow = IncomingFlow(quiet=quiet, max_wait=wait)
    loop = asyncio.get_running_loop()
    ran: list[tuple[str, float]] = []

    async def job(key: str) -> None:
        ran.append((key, loop.time()))
        await asyncio.sleep(0.01)  # a model call holding the slot

    flow.note()
    flooding = asyncio.create_task(_flood(flow, flood_for, every=0.002))
    start = loop.time()
    for _ in range(5):  # five members (or known contacts), five questions each
        for key in "abcde":
            queue.submit(key, lambda k=key: job(k), wait=flow.pause)  # type: ignore[misc]
    for _ in range(6):
        await asyncio.sleep(0.1)
        queue.submit("owner", lambda: job("owner"))
    await flooding
    end = loop.time()
    async with asyncio.timeout(5):
        while queue.pending():
            await asyncio.sleep(0.01)
    assert len(ran) == 31  # no reply lost
    for key in "abcde":
        times = [t for k, t in ran if k == key and t < end]
        # while it floods, a key's replies go about once per wait (a busy machine's
        # late wake-ups may look like a pause to it: one more)
        assert len(times) <= (end - start) / wait + 2, times
    assert counting.sleeps <= (end - start) / quiet * 2, counting.sleeps
    assert flow.deferred >= 5


async def test_the_owners_reply_takes_a_freed_slot_before_deferred_ones() -> None:
    """Regression: the slots were a plain semaphore, served in arrival order. Under a
    flood longer than the wait, the deferred replies, released together at its end,
    queued for the slots, and the owner's reply waited out all their model calls
    (about 45 of the scaled flood's 60 s above) instead of the one running."""
    queue = KeyedSerialQueue(max_running=1)
    flow = IncomingFlow(quiet=10, max_wait=0.05)  # no pause comes: each waits it out
    ran: list[str] = []
    running = asyncio.Event()
    finish = asyncio.Event()

    async def first() -> None:
        ran.append("running")
        running.set()
        await finish.wait()

    async def job(name: str) -> None:
        ran.append(name)

    queue.submit("running", first)
    await running.wait()
    flow.note()
    for key in ("m1", "m2", "m3"):
        queue.submit(key, lambda k=key: job(k), wait=flow.pause)  # type: ignore[misc]
    # their wait is over: they wait for the slot (was: a fixed 0.2 s, after which a
    # busy machine could still have them waiting out max_wait, the owner first anyway)
    assert queue._slots is not None
    await wait_until(lambda: len(queue._slots._then) == 3, 10, "three waiting for the slot")
    queue.submit("owner", lambda: job("owner"))
    await asyncio.sleep(0.01)
    finish.set()
    async with asyncio.timeout(5):
        while queue.pending():
            await asyncio.sleep(0.01)
    assert ran[:2] == ["running", "owner"], ran
    assert sorted(ran[2:]) == ["m1", "m2", "m3"]


async def test_a_job_cancelled_while_it_waits_for_a_slot_leaves_no_slot_taken() -> None:
    from bot.reply_queue import _Slots

    slots = _Slots(1)
    await slots.acquire(first=True)
    waiting = asyncio.create_task(slots.acquire(first=False))
    handed = asyncio.create_task(slots.acquire(first=True))
    await asyncio.sleep(0)
    waiting.cancel()  # cancelled while it waits
    slots.release()  # the slot goes to ``handed``...
    handed.cancel()  # ... cancelled before it ran: it passes the slot on
    for task in (waiting, handed):
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.wait_for(slots.acquire(first=False), 1)  # the one slot is free again
