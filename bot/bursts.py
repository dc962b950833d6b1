"""Bursts of user turns answered by one reply: the debounce and albums.

A reply waits until its burst pauses; when a later turn of the same burst has come, that
turn's reply answers this one too (it sees every turn before it in its context). Keys
are a conversation (the owner's debounce, ``brain.debounce_seconds``) or a
(conversation, album) pair (photos sent together, see :mod:`bot.replies`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class Bursts:
    """The latest turn noted per key and when (in memory: a restart notes them again
    as it resubmits the pending turns)."""

    def __init__(self) -> None:
        self._latest: dict[Hashable, tuple[int, float]] = {}
        self._open = asyncio.Event()  # cleared: no burst ends (:meth:`hold`)
        self._open.set()

    def note(self, key: Hashable, turn: int) -> None:
        """``turn`` arrived now under ``key``."""
        latest = self._latest.get(key, (0, 0.0))[0]
        self._latest[key] = (max(turn, latest), asyncio.get_running_loop().time())

    def hold(self) -> None:
        """No burst ends until :meth:`release` (the channels are starting: what they
        deliver first joins the bursts resumed before them)."""
        self._open.clear()

    def release(self) -> None:
        """Bursts end again, each once it has paused from now."""
        now = asyncio.get_running_loop().time()
        self._latest = {key: (turn, now) for key, (turn, _at) in self._latest.items()}
        self._open.set()

    def forget(self, key: Hashable) -> None:
        self._latest.pop(key, None)

    async def answered_by(self, key: Hashable, turn: int, pause: float) -> int | None:
        """Wait until nothing has been noted under ``key`` for ``pause`` seconds; the later
        turn whose reply answers ``turn``, or None when ``turn`` is the burst's last."""
        loop = asyncio.get_running_loop()
        while True:
            latest, at = self._latest.get(key, (turn, 0.0))
            if latest > turn:
                return latest
            wait = at + pause - loop.time()
            if wait <= 0 and not self._open.is_set():
                await self._open.wait()
                continue
            if wait <= 0:
                if latest == turn:
                    self._latest.pop(key, None)
                return None
            await asyncio.sleep(wait)
