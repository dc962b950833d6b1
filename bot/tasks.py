"""Background tasks that are never lost: every task is referenced and its failure logged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("my_agent.tasks")

T = TypeVar("T")
_tasks: set[asyncio.Task[Any]] = set()


def _done(task: asyncio.Task[Any]) -> None:
    _tasks.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("background task %s failed", task.get_name(), exc_info=exc)


def spawn(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
    """Start ``coro`` in the background, keep a reference until it ends, log its failure."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _tasks.add(task)
    task.add_done_callback(_done)
    return task


def running_tasks() -> set[asyncio.Task[Any]]:
    return set(_tasks)


async def cancel_all(timeout: float = 5.0) -> None:
    """Cancel every task spawned through :func:`spawn` and wait for them (bounded)."""
    tasks = [t for t in _tasks if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)


async def finish_within(tasks: Collection[asyncio.Task[Any]], timeout: float) -> bool:
    """Let ``tasks`` finish for ``timeout`` seconds, then cancel the rest and wait for them
    (at most 2 s more); True when all of them finished in time."""
    if not tasks:
        return True
    _done_in_time, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=2)
    return not pending


async def until_done(
    task: asyncio.Future[Any], timeout: float | None, hurry: asyncio.Event | None
) -> bool:
    """Wait for ``task`` up to ``timeout`` seconds (None: no limit), or until ``hurry``
    is set (the owner's second Ctrl-C); ``task`` is cancelled if it is still waiting
    then (what it waited for goes on). Whether it finished."""
    waits: set[asyncio.Future[Any]] = {task}
    hurried = asyncio.ensure_future(hurry.wait()) if hurry is not None else None
    if hurried is not None:
        waits.add(hurried)
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            if not waiting.done():
                waiting.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    return task.done() and not task.cancelled()
