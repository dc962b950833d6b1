"""The timed phases of ``my-agent bench ingest`` (open loop, sequential) and their messages.

Kept apart from the harness in ``bot.bench.ingest``, which runs the phases on one store
and shapes the report; the bare baseline loop is ``bot.bench.ingest_load``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bot.bench.ingest_load import message_text, percentiles
from bot.events import InboundMessage


async def drain_replies(services: Any) -> None:
    """Wait until the background brain has stored every pending reply."""
    while services.replies.queue.pending():
        await asyncio.sleep(0.01)


async def open_loop(
    services: Any,
    count: int,
    parties: int,
    rate: float,
    replies: bool,
    offset: int,
    prefix: str = "o",
) -> tuple[float, float, float]:
    """Messages arrive on a fixed schedule (``rate`` per second); latency counts from the
    scheduled arrival to durable + indexed, so a backlog shows up in it."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    # Only the messages in flight are held: thousands of finished tasks kept to the end
    # made the harness's own garbage (full collections of 10-20 ms inside the phase), and
    # gathering them all queued a callback each in one loop turn (a 30-40 ms stall in
    # front of the last messages).
    in_flight: set[asyncio.Future[None]] = set()
    failures: list[BaseException] = []

    def finished(task: asyncio.Future[None]) -> None:
        in_flight.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            failures.append(error)

    async def one(i: int, due: float) -> None:
        await services.router.deliver(message(offset + i, parties, replies, prefix))
        latencies.append((loop.time() - due) * 1000)

    # One sender starts each message at its arrival time, as a channel would. (Creating
    # every task up front ran thousands of coroutine steps in the loop's first turn: a
    # stall of the harness's own, tens of milliseconds, in front of the first messages.)
    start = loop.time() + 0.05
    for i in range(count):
        due = start + i / rate
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        task = asyncio.ensure_future(one(i, due))
        in_flight.add(task)
        task.add_done_callback(finished)
    while in_flight:
        await asyncio.wait(set(in_flight))
    if failures:
        raise failures[0]
    achieved = count / (loop.time() - start)
    p50, p99 = percentiles(latencies)
    return p50, p99, achieved


def message(i: int, parties: int, replies: bool, prefix: str = "m") -> InboundMessage:
    p = i % parties
    return InboundMessage(
        channel="bench",
        sender_id=f"user{p}",
        text=message_text(i),
        message_id=f"{prefix}{i}",
        chat_id=f"g{p}",
        group_id=f"g{p}",
        sender_name=f"User {p}",
        addressed=replies,
    )


async def sequential(
    services: Any, count: int, parties: int, replies: bool, offset: int
) -> tuple[float, float, float]:
    """One message at a time; returns p50, p99 (ms) and the achieved rate."""
    latencies: list[float] = []
    start = time.perf_counter()
    for i in range(count):
        msg = message(offset + i, parties, replies, "s")
        t0 = time.perf_counter()
        await services.router.deliver(msg)
        latencies.append((time.perf_counter() - t0) * 1000)
    achieved = count / (time.perf_counter() - start)
    p50, p99 = percentiles(latencies)
    return p50, p99, achieved
