"""The sweep and the deferral over a large backlog (an import, a long outage): set-based
SQL and one read, the per-record work off the event loop."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

from bot.lifecycle import ManualClock
from bot.lifecycle import records as lifecycle_records
from bot.lifecycle.queue import AbbreviationQueue

from .conftest import Core, MakeLifecycle, ScriptedModel, unavailable

BACKLOG = 300


async def _backlog(core: Core, count: int = BACKLOG) -> list[str]:
    """``count`` conversations owing notes, idle for long, never flagged (an import)."""
    ids = [f"imported-{i:05d}" for i in range(count)]
    stamp = "2026-01-01T00:00:00.000Z"
    rows = [(conv_id, "web", stamp, stamp, 4) for conv_id in ids]
    await core.db.run(
        lambda c: c.executemany(
            "INSERT INTO conversations (id, channel, created, updated, turn_count)"
            " VALUES (?, ?, ?, ?, ?)",
            rows,
        )
    )
    return ids


def _count_round_trips(core: Core, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the database round trips (a thread hop each) from now on."""
    calls = [0]
    run = core.db.run

    async def counted(fn: Any, *, write: bool = True) -> Any:
        calls[0] += 1
        return await run(fn, write=write)

    monkeypatch.setattr(core.db, "run", counted)
    return calls


async def _down(core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel) -> Any:
    """A lifecycle whose model just failed a pass (the rest is deferred for a while)."""
    model.abbreviation = unavailable()
    lifecycle = await make_lifecycle(model)
    rec = await core.manager.create("web")
    await core.chat(rec.id, 2)
    lifecycle.enqueue(rec.id)
    await lifecycle.settle()
    assert model.count("abbreviation") == 1
    return lifecycle


async def test_a_sweep_during_an_outage_defers_the_backlog_in_one_statement(
    core: Core,
    make_lifecycle: MakeLifecycle,
    model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: each conversation the sweep queued while the model was down took a
    # pass of its own, a read and a write: 3.8 s of the worker for 15,000 after an import.
    lifecycle = await _down(core, make_lifecycle, model)
    ids = await _backlog(core)
    calls = _count_round_trips(core, monkeypatch)
    queued = await lifecycle.sweep()
    await lifecycle.settle()
    assert queued == BACKLOG + 1  # and the one that failed
    assert model.count("abbreviation") == 1  # the model is not asked meanwhile
    assert calls[0] <= 6, calls[0]  # the sweep's reads, one flagging (before: 600+)
    flagged = await core.db.fetchall(
        "SELECT count(*) FROM conversations WHERE needs_abbreviation = 1"
    )
    assert flagged[0][0] == BACKLOG + 1
    assert lifecycle.queue.pending() == []
    for conv_id in ids[:3]:  # the manager's cache agrees with the index
        assert (await core.manager.get(conv_id)).needs_abbreviation  # type: ignore[union-attr]


async def test_a_stop_flags_what_is_left_in_one_statement(
    core: Core,
    make_lifecycle: MakeLifecycle,
    model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: the stop flagged each conversation still queued with a read and a
    # write of its own.
    model.gate = asyncio.Event()  # the pass in progress waits for the model
    lifecycle = await make_lifecycle(model)
    rec = await core.manager.create("web")
    await core.chat(rec.id, 2)
    ids = await _backlog(core)
    for conv_id in [rec.id, *ids]:
        lifecycle.enqueue(conv_id)
    while model.count("abbreviation") == 0:
        await asyncio.sleep(0.001)
    calls = _count_round_trips(core, monkeypatch)
    left = await lifecycle.stop(timeout=0.01)
    assert left == [rec.id, *ids]
    assert calls[0] <= 4, calls[0]  # before: 602
    flagged = await core.db.fetchall(
        "SELECT count(*) FROM conversations WHERE needs_abbreviation = 1"
    )
    assert flagged[0][0] == BACKLOG + 1


async def test_the_sweep_sorts_the_backlog_off_the_event_loop(
    core: Core,
    clock: ManualClock,
    make_lifecycle: MakeLifecycle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: the sweep parsed and sorted every record owing notes on the event
    # loop, holding it 0.15-0.4 s for 15,000 (no reply went out meanwhile).
    lifecycle = await make_lifecycle()
    await lifecycle.settle()
    await _backlog(core)
    parsed_on: set[int] = set()
    parse = lifecycle_records.parse_moment

    def spy(value: Any) -> Any:
        parsed_on.add(threading.get_ident())
        return parse(value)

    monkeypatch.setattr(lifecycle_records, "parse_moment", spy)
    lifecycle.queue.take_waiting()  # (nothing is written: only the sorting matters)
    assert await lifecycle.sweep() == BACKLOG
    assert parsed_on and threading.get_ident() not in parsed_on


async def test_the_sweep_leaves_conversations_with_a_timer_to_it(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle
) -> None:
    # The sweep queues an idle conversation only when no timer will (a timer lost to an
    # error), and a flagged one always; the one being written never.
    lifecycle = await make_lifecycle()
    ids = await _backlog(core, 3)
    lifecycle.timers.touch(ids[0], clock.now() - timedelta(days=1))
    await core.manager.mark_needs_abbreviation(ids[1])
    lifecycle.timers.touch(ids[1])
    owed = await lifecycle_records.backlog(
        core.manager, clock.now(), timedelta(minutes=10), timers=lifecycle.timers.ids()
    )
    assert sorted(owed.due) == [ids[1], ids[2]]
    assert [conv_id for conv_id, _ in owed.waiting] == [ids[0]]
    assert owed.owed == set(ids)
    busy = await lifecycle_records.backlog(
        core.manager, clock.now(), timedelta(minutes=10), busy=ids[2]
    )
    assert ids[2] not in busy.due and ids[2] in busy.owed


async def test_a_queue_emptied_at_once_is_idle_and_takes_more() -> None:
    seen: list[str] = []
    gate = asyncio.Event()

    async def process(conv_id: str) -> None:
        seen.append(conv_id)
        await gate.wait()

    queue = AbbreviationQueue(process)
    queue.start()
    for conv_id in ("a", "b", "c"):
        queue.enqueue(conv_id)
    await asyncio.sleep(0)
    assert queue.take_waiting() == ["b", "c"]
    gate.set()
    await asyncio.wait_for(queue.join(), 1)
    assert seen == ["a"] and queue.pending() == []
    queue.enqueue("b")
    await asyncio.wait_for(queue.join(), 1)
    assert seen == ["a", "b"]
    assert await queue.stop(1) == []
