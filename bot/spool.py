"""Inbound messages that could not be stored, held in memory and retried.

When storage keeps failing after the router's own retries, the router refuses the
message to its channel (which redelivers it, if it can) and also holds it here: a
background task routes the held messages again, oldest first and each chat's in order,
backing off while the disk still refuses them all (a redelivery that overtakes one is
recognised as a duplicate); a chat whose message is refused does not hold up the others.
Separate from the router because this is the one place an inbound message lives only in
memory, bounded and reported in the daemon's health (``spooled``). A daemon's stop tries
them once more, then writes what is left to a file that the next start holds again
(:mod:`bot.spool_file`): before session 39 a stop lost them, though their channels had
been told they were taken (the loopback's 202, the dashboard's ``kept``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

from bot import spool_file
from bot.channel import DeliveryError
from bot.events import InboundMessage
from bot.index_rescue import is_storage_refusal
from bot.tasks import spawn, until_done

log = logging.getLogger("my_agent.services")

SPOOL_LIMIT = 10_000


class HeldForRetry(DeliveryError):
    """The message could not be stored but is held here: it will be stored (and
    answered) once the disk accepts writes, without a redelivery. A channel that
    redelivers anyway is deduplicated by the message's id; one that cannot keep an id
    (an HTTP client that retried got a new one) should not redeliver at all
    (channels/loopback.py answers 202). Held in memory, and across a stop in the data
    directory's spool file (:mod:`bot.spool_file`)."""


class InboundSpool:
    """Held messages and the task that stores them once the disk accepts writes again."""

    def __init__(
        self,
        route: Callable[[InboundMessage], Awaitable[None]],
        drained: Callable[[], None],
    ) -> None:
        """``route`` stores (and answers) one message; ``drained`` is called once all
        held messages are stored."""
        self._route = route
        self._drained = drained
        self._held: deque[InboundMessage] = deque()
        self._task: asyncio.Task[None] | None = None
        self._dir: Path | None = None  # the daemon's data directory: held across a stop
        self._on_disk: set[tuple[str, str]] = set()  # those the spool file holds
        self._unwritten: set[tuple[str, str]] = set()  # those it could not take, this run
        self._stopping = False

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, message: InboundMessage) -> None:
        """Hold a message we could not store; retried in the background (deduplicated)."""
        key = (message.channel, message.message_id)
        if any((held.channel, held.message_id) == key for held in self._held):
            return  # a channel's redelivery of one held already (Telegram's next poll)
        if len(self._held) >= SPOOL_LIMIT:
            log.error(
                "spool full: oldest held message dropped from memory (%s)",
                self._held[0].message_id,
            )
            self._held.popleft()
        self._held.append(message)
        if self._stopping:
            return  # written to the spool file by the stop (save)
        if self._task is None or self._task.done():
            self._task = spawn(self._drain(), name="spool")

    async def restore(self, data_dir: Path) -> int:
        """At the daemon's start: keep the held messages in ``data_dir`` across stops
        from now on, and hold those the last stop left there again. How many."""
        self._dir = data_dir
        held = await asyncio.to_thread(self._read, data_dir)
        for message in held:
            self.hold(message)
        self._on_disk = {(m.channel, m.message_id) for m in held}
        if held:
            log.warning("%d message(s) held when the daemon last stopped: storing them", len(held))
        return len(held)

    @staticmethod
    def _read(data_dir: Path) -> list[InboundMessage]:
        spool_file.make_reserve(data_dir)
        return spool_file.read_held(data_dir)

    async def stop(self, timeout: float, hurry: asyncio.Event | None = None) -> None:
        """The daemon stops: no more retries in the background; the held messages are
        tried once more (within ``timeout``, not once ``hurry`` is set)."""
        self._stopping = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        if not self._held or (hurry is not None and hurry.is_set()):
            return
        await until_done(asyncio.ensure_future(self._round()), timeout, hurry)
        if not self._held:
            self._all_stored()

    def save(self) -> None:
        """Write what is still held to the spool file for the next start (blocking: in
        a thread); each message that cannot be written is logged as lost."""
        new = self._not_on_disk(self._on_disk)
        if not new:
            return  # nothing held, or all of it in the file already
        if self._dir is None:  # not a daemon (no restore): nowhere to keep them
            for message in new:
                spool_file.log_lost(message)
            return
        left = self._written(new, spool_file.write_held(self._dir, new))
        log.warning(
            "%d held message(s) kept in %s for the next start",
            len(self._held) - len(left),
            self._dir / spool_file.SPOOL_NAME,
        )

    def _not_on_disk(self, tried: set[tuple[str, str]]) -> list[InboundMessage]:
        return [m for m in self._held if (m.channel, m.message_id) not in tried]

    def _written(
        self, new: list[InboundMessage], left: list[InboundMessage]
    ) -> set[tuple[str, str]]:
        """Note ``new`` as in the spool file but ``left``; the keys of those left."""
        unwritten = {(m.channel, m.message_id) for m in left}
        self._on_disk |= {(m.channel, m.message_id) for m in new} - unwritten
        return unwritten

    def _all_stored(self) -> None:
        self._drained()
        self._unwritten = set()
        if self._dir is not None and self._on_disk:
            spool_file.remove_held(self._dir)
            self._on_disk = set()
        log.info("all spooled messages stored")

    async def _persist(self) -> None:
        """Write the held messages the spool file does not hold yet (in a thread): a kill
        (-9, a power cut) before the disk has room again must not lose them either; a
        clean stop alone wrote them before (session 39)."""
        new = self._not_on_disk(self._on_disk | self._unwritten)
        if not new or self._dir is None:
            return
        left = await asyncio.to_thread(spool_file.write_held, self._dir, new, final=False)
        self._unwritten |= self._written(new, left)  # tried again by the stop, not each round

    async def _drain(self) -> None:
        delay = 1.0
        while self._held:
            await self._persist()
            stored, refused = await self._round()
            if not refused:
                delay = 1.0
                continue
            log.warning("spooled message still cannot be stored: %s", refused)
            if stored:
                delay = 1.0  # the disk takes writes again: the rest go at once
                continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
        self._all_stored()

    async def _round(self) -> tuple[int, Exception | None]:
        """Route each held message once, oldest first: (how many were stored, the last
        refusal). A refused message stays held, and so do the later messages of its chat
        (their order kept); the other chats' go on. Before, the head was retried alone:
        a message held for a conversation whose transcript cannot be written until a
        restart (bot.transcript.UnreadableTranscript) kept every other chat's held
        messages waiting, after the disk had room again."""
        stored = 0
        refused: Exception | None = None
        blocked: set[tuple[str, str]] = set()
        for message in list(self._held):
            chat = (message.channel, message.chat_id)
            if chat in blocked:
                continue
            try:
                await self._route(message)
            except Exception as exc:
                if not (isinstance(exc, OSError) or is_storage_refusal(exc)):
                    # Anything else ended this task with the message left at the head:
                    # it and every message held after it stayed in memory, never retried
                    # until another failure started a task again. A bug now: its channel's
                    # redelivery is what is left (the channel was refused it).
                    log.exception(
                        "spooled message %s from %s cannot be routed: no longer held",
                        message.message_id,
                        message.channel,
                    )
                    self._held.remove(message)
                    continue
                refused = exc
                blocked.add(chat)
                continue
            self._held.remove(message)
            stored += 1
        return stored, refused
