"""The persisted outbox: every message to a channel is sent from here, at most once.

A reply is made durable in its transcript first, then queued here (``state.db``) under
a dedup key such as ``conv-...:7:reply``; queuing the same key twice is a no-op, so a
reply recovered after a crash is never sent twice (a reply to another message meeting a
key taken, :func:`bot.outbox_rows.reply_key_taken`, is logged and gets its own). One
worker per channel sends each chat's messages in order (a chat waiting for a retry
holds back only itself), retrying failures with exponential backoff and jitter; the
queue survives restarts (a reply survives an SMTP outage and a reboot).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from bot import redaction
from bot.channel import Channel, Misconfigured, PermanentSendError, RetryLater, Unreachable
from bot.db import Database, SyncConn, Unsynced
from bot.events import OutboundMessage, SendResult, iso, utcnow
from bot.outbox_rows import STALE_WAIT_SECONDS as STALE_WAIT_SECONDS
from bot.outbox_rows import OutboxRows, _encode, reply_key_taken
from bot.outbox_rows import _decode as _decode  # re-exported (tests read rows with it)
from bot.outbox_withdrawals import OutboxWithdrawals
from bot.tasks import finish_within, spawn

log = logging.getLogger("my_agent.outbox")

SentCallback = Callable[[OutboundMessage, SendResult], Awaitable[None]]
FailedCallback = Callable[[OutboundMessage, str], Awaitable[None]]  # message, error
# A message whose channel is misconfigured (bot.channel.Misconfigured) is told to the
# owner at this attempt, while it is still retried: 50 attempts take hours.
TELL_AFTER = 3


class SteadyClock:
    """Wall-clock seconds that never jump: the wall clock as it was at the first call,
    advanced by the monotonic clock since. The outbox stores retry times in wall time (the
    queue outlives the process), but within a run a retry's wait must not grow or shrink
    when the wall clock is set back or forward (NTP, a clock fixed by hours or days).
    """

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._anchor: tuple[float, float] | None = None

    def __call__(self) -> float:
        if self._anchor is None:
            self._anchor = (self._wall(), self._monotonic())
        wall, mono = self._anchor
        return wall + (self._monotonic() - mono)


def backoff(attempt: int, base: float = 1.0, cap: float = 300.0) -> float:
    """Exponential backoff with full jitter (attempt counts from 1)."""
    return random.uniform(0, min(cap, base * (2 ** min(attempt, 16))))


class Outbox(OutboxRows, OutboxWithdrawals):
    """The queue and its workers (its reads: :class:`~bot.outbox_rows.OutboxRows`; the
    rows taken back or set aside unsent: :class:`~bot.outbox_withdrawals.OutboxWithdrawals`)."""

    def __init__(
        self,
        db: Database,
        *,
        max_attempts: int = 50,
        base_delay: float = 1.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.db = db
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.clock: Callable[[], float] = clock or SteadyClock()
        # outbox id -> the retry delay this process gave it (see STALE_WAIT_SECONDS)
        self._delays: dict[int, float] = {}
        self._channels: dict[str, Channel] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._on_sent: list[SentCallback] = []
        self._on_failed: list[FailedCallback] = []
        self._on_stuck: list[FailedCallback] = []
        self._stopping = False
        # outbox id -> result of a send whose "sent" mark could not be written (state.db
        # full): the mark is retried, never the send.
        self._unmarked: dict[int, SendResult] = {}
        # outbox id -> (channel, how often its server was unreachable in this run): such
        # failures lengthen the backoff but are not counted toward max_attempts.
        self._unreached: dict[int, tuple[str, int]] = {}
        # A synced reply row exists (committed by this process): from then on a reply's
        # row may skip its own sync (see :meth:`insert_unit`).
        self.anchored = False

    def on_sent(self, callback: SentCallback) -> None:
        self._on_sent.append(callback)

    def on_failed(self, callback: FailedCallback) -> None:
        """``callback(message, error)`` when a message fails for good (not retried)."""
        self._on_failed.append(callback)

    def on_stuck(self, callback: FailedCallback) -> None:
        """``callback(message, error)`` when a message failed :data:`TELL_AFTER` times
        for a reason that will not fix itself (:class:`~bot.channel.Misconfigured`); it is
        still retried."""
        self._on_stuck.append(callback)

    async def enqueue(self, msg: OutboundMessage, dedup_key: str | None = None) -> int | None:
        """Persist ``msg`` for delivery; returns its id, or None if the key was queued before."""
        outbox_id = await self.db.run(self.insert_unit(msg, dedup_key))
        if outbox_id is not None:
            self.wake(msg.channel)
        return outbox_id

    def insert_unit(
        self, msg: OutboundMessage, dedup_key: str | None = None, *, recoverable: bool = False
    ) -> Callable[[SyncConn], int | None]:
        """The unit of work that queues ``msg`` (for a caller that chains it after another
        write, e.g. a reply's transcript append); call :meth:`wake` once it committed.

        ``recoverable``: ``msg`` is a reply already durable in its transcript, under the
        key ``<conversation>:<turn>:reply``. After a crash that lost its row,
        :func:`bot.resume.requeue_unsent_replies` queues it again from the
        transcript: every reply turn newer than the newest row left is checked. So once
        :attr:`anchored` (a synced row exists for that scan to start from), the row's
        commit need not be synced on its own (:class:`bot.db.Unsynced`): one device
        flush less per reply, which otherwise competes with the transcript journal's
        flush of the next incoming message (docs/benchmarks.md, ingest session 4).
        """
        payload = _encode(msg, dedup_key)
        created = iso(utcnow())

        def _insert(conn: SyncConn, key: str | None = dedup_key, data: str = payload) -> int | None:
            cur = conn.execute(
                "INSERT OR IGNORE INTO outbox (channel, payload, conversation_id, party_id,"
                " dedup_key, created) VALUES (?, ?, ?, ?, ?, ?)",
                (msg.channel, data, msg.conversation_id, msg.party_id, key, created),
            )
            if cur.rowcount:
                return int(cur.lastrowid)
            if key == dedup_key and key is not None and key.endswith(":reply"):
                # a new message numbered as a lost one (transcripts put back): its own key
                other = reply_key_taken(conn, key, msg)
                if other is not None:
                    return _insert(conn, other, _encode(msg, other))
            return None

        if recoverable and self.anchored:
            return Unsynced(_insert)
        return _insert

    def wake(self, channel: str) -> None:
        """Tell the channel's worker there may be something new to send."""
        self._wake.setdefault(channel, asyncio.Event()).set()

    # -- workers ---------------------------------------------------------------------
    def attach(self, channel: Channel) -> None:
        """Start delivering this channel's queue."""
        self._channels[channel.name] = channel
        self._wake.setdefault(channel.name, asyncio.Event()).set()
        self._workers[channel.name] = spawn(
            self._worker(channel.name), name=f"outbox-{channel.name}"
        )

    async def stop(self, timeout: float = 10.0) -> None:
        """Let sends in progress finish (bounded), then stop. Cancelling a send the server
        already accepted would leave it unmarked and send it again after a restart."""
        self._stopping = True
        for event in self._wake.values():
            event.set()
        await finish_within(list(self._workers.values()), timeout)
        self._workers.clear()

    async def _worker(self, channel_name: str) -> None:
        wake = self._wake.setdefault(channel_name, asyncio.Event())
        failures = 0
        while not self._stopping:
            wake.clear()
            try:
                await self._step(channel_name, wake)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                # state.db cannot be read or written (a full disk): this worker was the
                # channel's only sender, and dying here stopped its sends until a restart.
                failures += 1
                delay = backoff(failures, self.base_delay, cap=30.0)
                log.exception("outbox of %s: state.db failed; again in %.1fs", channel_name, delay)
                try:
                    await asyncio.wait_for(wake.wait(), timeout=delay)
                except TimeoutError:
                    pass

    async def _step(self, channel_name: str, wake: asyncio.Event) -> None:
        """Send the channel's head when it is due, else wait for it (or for news)."""
        item = await self._next_due(channel_name)
        if item is None:
            await wake.wait()
            return
        msg, attempts, wait = item
        if wait is not None:
            # Strict order per channel: the head waits for its retry time.
            try:
                await asyncio.wait_for(wake.wait(), timeout=wait)
            except TimeoutError:
                pass
            return
        await self._deliver(msg, attempts)

    async def _deliver(self, msg: OutboundMessage, attempts: int) -> None:
        channel = self._channels[msg.channel]
        result = self._unmarked.get(msg.outbox_id or 0)
        if result is None:
            # (kept again only if the server is unreachable once more)
            unreached = self._unreached.pop(msg.outbox_id or 0, (msg.channel, 0))[1]
            try:
                result = await channel.send(msg)
            except asyncio.CancelledError:
                raise
            except Unreachable as exc:
                await self._unreachable(msg, attempts, unreached + 1, exc)
                return
            except PermanentSendError as exc:
                log.error("outbox %s to %s failed permanently: %s", msg.outbox_id, msg.channel, exc)
                await self._mark(msg, "failed", attempts + 1, error=str(exc))
                await self._failed(msg, str(exc))
                return
            except Exception as exc:
                attempts += 1
                delay = backoff(attempts, self.base_delay)
                if isinstance(exc, RetryLater):
                    delay = max(delay, exc.retry_after)
                status = "failed" if attempts >= self.max_attempts else "pending"
                log.warning(
                    "outbox %s to %s failed (attempt %d, retry in %.1fs): %s",
                    msg.outbox_id,
                    msg.channel,
                    attempts,
                    delay,
                    exc,
                )
                await self._mark(msg, status, attempts, error=repr(exc), delay=delay)
                if status == "failed":
                    await self._failed(msg, f"{attempts} attempts, the last: {exc}")
                elif isinstance(exc, Misconfigured) and attempts == TELL_AFTER:
                    await self._callbacks(self._on_stuck, msg, str(exc))
                return
            if msg.outbox_id is not None:
                self._unmarked[msg.outbox_id] = result
        await self._mark(msg, "sent", attempts + 1, ref=result.message_ref)
        self._unmarked.pop(msg.outbox_id or 0, None)
        if any(name == msg.channel for name, _ in self._unreached.values()):
            # a send went through: the server is back for the messages the outage held
            # (an SMTP server has no poll to say so; they waited out their backoff)
            await self.reachable(msg.channel)
        sent = replace(msg)
        for callback in self._on_sent:
            try:
                await callback(sent, result)
            except Exception:
                log.exception("outbox sent-callback failed for %s", msg.outbox_id)

    async def _unreachable(
        self, msg: OutboundMessage, attempts: int, times: int, exc: Unreachable
    ) -> None:
        """Retry ``msg`` after a backoff that grows with the outage (its server found
        unreachable ``times`` in a row), its attempts as they were: an outage, however
        long, does not give up on a message."""
        self._unreached[msg.outbox_id or 0] = (msg.channel, times)
        delay = backoff(attempts + times, self.base_delay)
        log.warning(
            "outbox %s to %s: server unreachable (%d times; retry in %.1fs): %s",
            msg.outbox_id,
            msg.channel,
            times,
            delay,
            exc,
        )
        await self._mark(msg, "pending", attempts, error=repr(exc), delay=delay)

    def unreachable_tries(self) -> dict[int, int]:
        """Outbox id -> how often this run found its server unreachable (those tries are
        not in the row's ``attempts``)."""
        return {outbox_id: times for outbox_id, (_, times) in self._unreached.items()}

    async def reachable(self, channel: str) -> None:
        """``channel`` reaches its server again: its messages that found it unreachable
        are due now (their chats' order kept), not when their backoff ends."""
        ids = [i for i, (name, _) in self._unreached.items() if name == channel]
        if not ids:
            return
        now = self.clock()
        marks = ", ".join("?" for _ in ids)
        await self.db.execute(
            f"UPDATE outbox SET next_attempt = ? WHERE status = 'pending' AND id IN ({marks})",
            (now, *ids),
        )
        for outbox_id in ids:
            self._delays[outbox_id] = 0.0
        log.info("%s reachable again: %d held message(s) due now", channel, len(ids))
        self.wake(channel)

    async def _failed(self, msg: OutboundMessage, error: str) -> None:
        await self._callbacks(self._on_failed, msg, error)

    async def _callbacks(
        self, callbacks: list[FailedCallback], msg: OutboundMessage, error: str
    ) -> None:
        error = redaction.mask(error)  # the owner's alert quotes it
        for callback in callbacks:
            try:
                await callback(msg, error)
            except Exception:
                log.exception("outbox failed-callback failed for %s", msg.outbox_id)

    async def _mark(
        self,
        msg: OutboundMessage,
        status: str,
        attempts: int,
        *,
        error: str | None = None,
        ref: str | None = None,
        delay: float = 0.0,
    ) -> None:
        now = self.clock()
        if error is not None:
            # A library's error text may hold a secret (aiohttp's names the URL, and the
            # Bot API's holds the token): before session 40 it was kept in state.db.
            error = redaction.mask(error)
        if msg.outbox_id is not None:
            if status == "pending":
                self._delays[msg.outbox_id] = delay
            else:
                self._delays.pop(msg.outbox_id, None)

        def _update(conn: SyncConn) -> None:
            # Only "sent" marks a row no longer pending: one withdrawn while its send
            # failed stays withdrawn (:meth:`OutboxWithdrawals.withdraw`), not queued again
            # for a retry.
            conn.execute(
                "UPDATE outbox SET status = ?, attempts = ?, next_attempt = ?, last_error = ?,"
                " sent = CASE WHEN ? = 'sent' THEN ? ELSE sent END, message_ref = ? WHERE id = ?"
                " AND (? = 'sent' OR status = 'pending')",
                (
                    status,
                    attempts,
                    now + delay,
                    error,
                    status,
                    iso(utcnow()),
                    ref,
                    msg.outbox_id,
                    status,
                ),
            )

        await self.db.run(_update)

    def kick(self) -> None:
        """Retry everything now (e.g. after a channel reconnects)."""
        for event in self._wake.values():
            event.set()
