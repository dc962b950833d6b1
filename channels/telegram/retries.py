"""One Bot API call and its retry policy: flood waits, backoff, moved groups, lost topics.

Inside one call, flood control (429 ``retry_after``) is waited out and network or 5xx
errors are retried with exponential backoff and jitter, a bounded number of times; then
the exception goes to the caller (the core's outbox retries the message later; a flood
wait over ``max_retry_after`` as :class:`~bot.channel.RetryLater`: no sooner). A send
that went out unanswered (a timeout) may have arrived: it is tried
:data:`UNCONFIRMED_MAX` times at most (counted across the outbox's attempts, in a run),
then given up on; one that never went out (no connection made, :mod:`channels.telegram.wire`)
or that Telegram answered with a 5xx is :class:`~bot.channel.Unreachable` once the retries
are used up: the outbox holds it, as long as the outage lasts. A stop (:attr:`ApiCalls.stopping`)
ends the waits at once. A group upgraded to a supergroup is followed to its new id; a
forum topic deleted since is replaced by the general topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiogram import Bot
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import SendDocument, SendMessage, SendPhoto, TelegramMethod
from aiohttp import ClientConnectorError

from bot.backoff import Backoff
from bot.channel import PermanentSendError, RetryLater, Unreachable
from bot.config.channels import TelegramChannelConfig
from channels.telegram.wire import Written, never_sent, watch

log = logging.getLogger("my_agent.telegram")

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
Moved = Callable[[str, str], Awaitable[None]]  # old chat id, new chat id
Flooded = Callable[[str, float], None]  # chat id, seconds Telegram holds it back
SEND_METHODS = (SendMessage, SendPhoto, SendDocument)  # each call a message: no idempotency
# Sends of one message part that went out unanswered before it is given up on (the owner
# told): at most this many copies when Telegram took each of them.
UNCONFIRMED_MAX = 3
UNSURE_REMEMBERED = 256  # sends whose unconfirmed count is kept across calls


def chat_ref(chat_id: str) -> int | str:
    """Telegram chat ids are integers; ``@channel`` names stay strings."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


def topic_id(topic: object) -> int | None:
    """A forum topic's ``message_thread_id`` as the core keeps it (an int, or digits
    after a round trip through text), None for anything else."""
    if isinstance(topic, int) and not isinstance(topic, bool):
        return topic
    if isinstance(topic, str) and topic.isdigit():
        return int(topic)
    return None


def unconfirmed(method: TelegramMethod[Any], exc: Exception, mark: Written | None = None) -> bool:
    """Whether a failed send may have reached Telegram all the same: the request went out
    and no answer came (a timeout, a connection cut), as opposed to a connection never
    made or an error Telegram answered with. ``mark``: what the session's tracing saw of
    the request (:mod:`channels.telegram.wire`); without it, only a failed connect counts
    as never sent."""
    if not isinstance(method, SEND_METHODS) or not isinstance(exc, TelegramNetworkError):
        return False
    before_sending = never_sent(mark)
    if before_sending is not None:
        return not before_sending
    return not isinstance(exc.__cause__, ClientConnectorError)


def _unsure_key(method: TelegramMethod[Any]) -> tuple[str, int] | None:
    """What identifies a send across calls (its chat and content); None for a call that
    sends nothing (a retry of it cannot make a copy)."""
    if not isinstance(method, SEND_METHODS):
        return None
    content = getattr(method, "text", None) or getattr(method, "caption", None) or ""
    return str(getattr(method, "chat_id", "")), hash((type(method).__name__, content))


def _is_lost_topic(exc: TelegramBadRequest) -> bool:
    return "message thread not found" in exc.message.lower()


class ApiCalls:
    """Bot API calls through an aiogram :class:`Bot` with the retry policy."""

    def __init__(
        self, bot: Bot, config: TelegramChannelConfig, sleep: Sleep = asyncio.sleep
    ) -> None:
        self.bot = bot
        self.config = config
        # Sends that went out unconfirmed, by (chat, text), across calls: the outbox
        # retries a failed part with a call of its own, and a count kept per call
        # started again at every outbox attempt (3 copies each, at each of 50).
        self._unsure: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.sleep = sleep
        # Set by the channel (channels/telegram/migration.py): where a chat is now, and
        # what to do when a send learns that a group was upgraded to a supergroup.
        self.route: Callable[[str], str] = str
        self.on_moved: Moved | None = None
        # Set by the channel: a 429 for a chat quiets its "typing…" for the wait.
        self.on_flood: Flooded | None = None
        # Set when the daemon stops: a wait between attempts ends at once and the message
        # goes back to the outbox (kept for the next start) instead of holding the stop.
        self.stopping = asyncio.Event()

    async def _wait(self, seconds: float) -> float:
        """Sleep ``seconds`` unless stopping; returns what was left of them (0: slept)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if not self.stopping.is_set():
            nap = asyncio.ensure_future(self.sleep(seconds))
            stop = asyncio.ensure_future(self.stopping.wait())
            try:
                await asyncio.wait({nap, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (nap, stop):
                    task.cancel()
                await asyncio.gather(nap, stop, return_exceptions=True)
            if not self.stopping.is_set():
                return 0.0
        return max(0.0, until - loop.time())

    async def wait_unless_stopping(self, seconds: float) -> float:
        """Wait out ``seconds`` of flood control, ended early by a stop; returns what was
        left of them (0: waited)."""
        return await self._wait(seconds)

    async def call(self, method: TelegramMethod[T]) -> T:
        """One API call with flood-control waits and network retries (bounded)."""
        backoff = Backoff(self.config.retry_backoff_base, self.config.retry_backoff_cap)
        key = _unsure_key(method)
        attempts = 0
        unsure = self._unsure.get(key, 0) if key else 0
        moved = False
        while True:
            mark = watch()
            try:
                result = await self.bot(method)
                if key:
                    self._unsure.pop(key, None)
                return result
            except TelegramRetryAfter as exc:
                attempts += 1
                chat = getattr(method, "chat_id", None)
                if self.on_flood is not None and chat is not None:
                    self.on_flood(str(chat), float(exc.retry_after))
                if attempts > self.config.send_retries or (
                    exc.retry_after > self.config.max_retry_after
                ):
                    # The outbox waits it out: any request sooner is refused again.
                    raise RetryLater(float(exc.retry_after), exc.message) from exc
                log.warning("flood control on %s: waiting %ss", type(method).__name__,
                            exc.retry_after)  # fmt: skip
                left = await self._wait(float(exc.retry_after))
                if left:  # stopping: the outbox keeps it, to send no sooner than this
                    raise RetryLater(left, exc.message) from exc
            except TelegramMigrateToChat as exc:
                # Not a failure, and not one of the retries: the message goes to the
                # group's new id at once (a supergroup never moves again, so once).
                # Before, it took one of ``send_retries`` (with 0, the outbox retried
                # the old id until it gave up) and each later send asked the old id.
                old = getattr(method, "chat_id", None)
                if moved or old is None:
                    raise
                moved = True
                log.info("chat %s migrated to supergroup %s", old, exc.migrate_to_chat_id)
                if self.on_moved is not None:
                    await self.on_moved(str(old), str(exc.migrate_to_chat_id))
                method = method.model_copy(update={"chat_id": exc.migrate_to_chat_id})
            except (TelegramNetworkError, TelegramServerError) as exc:
                attempts += 1
                maybe_arrived = unconfirmed(method, exc, mark)
                if maybe_arrived:
                    # Sent, maybe received (a timeout, a connection cut before the
                    # answer): each retry may be a copy. Before, a send Telegram took
                    # but never confirmed went send_retries more times per outbox
                    # attempt, at each of the outbox's attempts: dozens of copies.
                    unsure += 1
                    if key:
                        self._note_unsure(key, unsure)
                    if unsure >= UNCONFIRMED_MAX:
                        raise PermanentSendError(
                            f"telegram did not confirm the message {unsure} times; it may "
                            f"have arrived, so it is not sent again ({exc})"
                        ) from exc
                if attempts > self.config.send_retries:
                    if maybe_arrived:
                        raise
                    # Nothing arrived: the outbox holds the message for as long as the
                    # outage lasts, without counting it toward giving up.
                    raise Unreachable(f"Telegram could not be reached: {exc}") from exc
                delay = backoff.next()
                log.warning("%s failed (%s); retry %d in %.1fs", type(method).__name__, exc,
                            attempts, delay)  # fmt: skip
                if await self._wait(delay):
                    raise  # stopping: the outbox retries it at the next start

    def _note_unsure(self, key: tuple[str, int], count: int) -> None:
        self._unsure[key] = count
        self._unsure.move_to_end(key)
        while len(self._unsure) > UNSURE_REMEMBERED:
            self._unsure.popitem(last=False)

    async def call_in_topic(self, method: TelegramMethod[T]) -> T:
        """:meth:`call`, sent without its forum topic when Telegram no longer knows it
        (the topic deleted, or the group's topics turned off, since it was asked there):
        before, "message thread not found" was a permanent failure and the reply lost."""
        try:
            return await self.call(method)
        except TelegramBadRequest as exc:
            if not _is_lost_topic(exc) or getattr(method, "message_thread_id", None) is None:
                raise
            log.warning("forum topic %s of chat %s is gone; sending to the general topic",
                        getattr(method, "message_thread_id", None),
                        getattr(method, "chat_id", None))  # fmt: skip
            return await self.call(method.model_copy(update={"message_thread_id": None}))
