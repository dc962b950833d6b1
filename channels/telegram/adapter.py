"""The Telegram channel: aiogram long polling with a durable offset, and sends.

Why not ``Dispatcher.start_polling``: aiogram's dispatcher advances the ``getUpdates``
offset as soon as it has fetched a batch, before our handlers have made anything durable,
so a crash between the two would lose messages. This adapter runs its own loop with the
same aiogram client (``bot(GetUpdates(...))`` over HTTP) and acknowledges an update only
after ``host.deliver`` returned (the message is fsynced into a transcript): the next
offset is persisted with ``host.set_cursor`` and sent with the next poll. A crash before
that re-delivers the update, and the core drops it by ``(channel, message_id)``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import PRODUCTION, TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    TelegramConflictError,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.types import Update

from bot.channel import ChannelHost, DeliveryError
from bot.config.model import AppConfig
from bot.events import OutboundMessage, SendResult
from bot.tasks import spawn
from channels.telegram.albums import Albums
from channels.telegram.callbacks import callback_message
from channels.telegram.menus import OwnerMenus
from channels.telegram.migration import GroupMigrations
from channels.telegram.polling import Batch, poll_updates
from channels.telegram.response_types import KeepResponseTypes
from channels.telegram.retries import Backoff, Sleep
from channels.telegram.sender import TelegramSender
from channels.telegram.translate import BotIdentity, translate_message
from channels.telegram.typing_indicator import TypingIndicator
from channels.telegram.unreadable import record_unparsed, record_unreadable

log = logging.getLogger("my_agent.telegram")

MAX_UPDATE_FAILURES = 5  # an update whose handling keeps crashing is skipped after this
# A token Telegram refused (401) is asked about again this rarely: retrying sooner cannot
# help, but a token revoked and restored with BotFather comes back without a restart.
TOKEN_REFUSED_RETRY = 300.0
TOKEN_REFUSED = (
    "Telegram refused the bot token (401 Unauthorized): set a valid TELEGRAM_BOT_TOKEN "
    "(channels.telegram.token) from BotFather; asked again every {every:g}s"
)


def _owner_ids(config: AppConfig) -> list[str]:
    return [i.strip().lstrip("+") for i in config.owner.identities.get("telegram", [])]


class ChannelStopped(RuntimeError):
    """A send after :meth:`TelegramChannel.stop`; the outbox retries it after a restart."""


class TelegramChannel:
    """:class:`bot.channel.Channel` for Telegram. ``services`` is accepted for symmetry
    with the other channels; the adapter only needs the host it is started with."""

    name = "telegram"
    supports_streaming = False

    def __init__(
        self,
        config: AppConfig,
        services: Any = None,
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        cfg = config.channels.telegram
        if not cfg.token:
            raise ValueError("channels.telegram.token is required")
        if cfg.mode == "webhook":
            log.warning("channels.telegram.mode=webhook is not supported yet; using polling")
        self.config = cfg
        api = TelegramAPIServer.from_base(cfg.api_base) if cfg.api_base else PRODUCTION
        self.session = AiohttpSession(api=api)
        self.session.middleware(KeepResponseTypes())
        self.bot = Bot(token=cfg.token, session=self.session)
        self.menus = OwnerMenus(self.bot, _owner_ids(config))
        self.sender = TelegramSender(self.bot, cfg, sleep=sleep)
        self.groups = {g.id: g for g in cfg.groups} | {
            g.id.lower(): g for g in cfg.groups if g.id.startswith("@")
        }
        self.migrations = GroupMigrations(self.groups)
        self.sender.route = self.migrations.current  # a moved group's sends: its new id
        self.sender.on_moved = self._moved
        self.albums = Albums()
        self.me: BotIdentity | None = None
        self.offset = 0
        self._host: ChannelHost | None = None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._typing = TypingIndicator(self.bot, cfg, self.migrations.current)
        self._failures: dict[int, int] = {}
        self._closed = False
        self._sends = 0  # sends in progress: stop() closes the session once they are done
        self._idle = asyncio.Event()
        self._idle.set()
        self.started = False  # True once Telegram accepted getMe/deleteWebhook/setMyCommands
        self.refused: str | None = None  # the problem while Telegram refuses the token
        self.refused_retry = TOKEN_REFUSED_RETRY
        self._problem_kept = False  # a refusal kept with the cursors, to clear once accepted

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, host: ChannelHost) -> None:
        """Read the stored offset, register with Telegram, start polling in the background.

        When Telegram is unreachable the daemon still starts: setup is retried by the
        polling task with backoff.
        """
        self._host = host
        self._stopping.clear()
        self.sender.stopping.clear()
        self._closed = self._typing.closed = False
        stored = await host.get_cursor(self.name, "offset")
        self.offset = int(stored) if stored and stored.lstrip("-").isdigit() else 0
        self.sender.restore(await host.get_cursor(self.name, "parts"))
        self.sender.save = lambda value: host.set_cursor(self.name, "parts", value)
        await self.migrations.load(host)
        self.albums.load(await host.get_cursor(self.name, "albums"))
        self._problem_kept = "problem" in (await host.get_cursor(self.name, "token") or "")
        try:
            await asyncio.wait_for(self._setup(), timeout=15)
        except TelegramUnauthorizedError:
            await self._token_refused()
        except (AiogramError, TimeoutError) as exc:
            log.warning("Telegram setup failed (%s); will retry in the background", exc)
        self._task = spawn(self._run(), name="telegram-polling")

    async def _setup(self) -> None:
        me = await self.bot.get_me()
        await self.bot.delete_webhook(drop_pending_updates=False)
        await self.menus.setup()
        self.me = BotIdentity(me.id, me.username)
        self.started = True
        if self.refused is not None:
            self.refused = None
            log.info("Telegram accepts the bot token again")
        if self._problem_kept:  # refused before (this run or the last): said no more
            await self._keep_problem()
        log.info("Telegram bot @%s (%s) ready; polling from offset %s", me.username, me.id,
                 self.offset)  # fmt: skip

    async def reload(self, config: AppConfig) -> None:
        """SIGHUP re-read the owner identities: the command menus follow them (the full
        one to each owner's chat, none to an id no longer the owner's); before, they
        were set at start only. Telegram unreachable: tried again after the next poll."""
        self.menus.changed(_owner_ids(config))
        if self.started:
            await self.menus.refresh()

    def stop_waiting(self) -> None:
        """The daemon is stopping: a send waiting out a flood ban (or a network backoff)
        gives up now, its message kept in the outbox; before, a stop in a 30 s flood
        wait took 30 s. Sends that need no wait still go until :meth:`stop`."""
        self.sender.stopping.set()

    async def stop(self) -> None:
        """Finish the update in hand, stop polling, stop typing, close the HTTP session."""
        self._stopping.set()
        self.sender.stopping.set()
        self._closed = self._typing.closed = True
        self.started = False
        task, self._task = self._task, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=10)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._typing.stop_all()
        try:
            # A send cut off by closing the session may have reached Telegram all the
            # same: the outbox, told it failed, sent it again at the next start.
            await asyncio.wait_for(self._idle.wait(), timeout=10)
        except TimeoutError:
            log.warning("closing the Telegram session under a send still in progress")
        await self.session.close()

    def problems(self) -> list[str]:
        """What /status, ``my-agent status`` and the status line say: a refused token."""
        return [self.refused] if self.refused else []

    async def _keep_problem(self) -> None:
        """Keep the refusal with the cursors: ``my-agent status`` names it while the
        daemon is stopped, and in its /readyz line while it runs."""
        if self._host is None:
            return
        value = {"problem": self.refused} if self.refused else {}
        try:
            await self._host.set_cursor(self.name, "token", json.dumps(value))
        except Exception as exc:  # storage failing: the log and /status still say it
            log.warning("cannot keep the Telegram token's state: %s", exc)
            return
        self._problem_kept = bool(self.refused)

    async def _token_refused(self) -> float:
        """Telegram said 401: the token is wrong or revoked. Said once, as an ERROR naming
        the key (before: a warning every few seconds, forever, naming neither the key nor
        that retrying could not help); asked again only every :attr:`refused_retry`."""
        self.started = False
        self.me = None  # set up again (menus, identity) once the token is accepted
        if self.refused is None:
            self.refused = TOKEN_REFUSED.format(every=self.refused_retry)
            log.error("%s", self.refused)
            await self._keep_problem()
        else:
            log.debug("Telegram still refuses the bot token")
        return self.refused_retry

    async def _pause(self, seconds: float) -> None:
        """Sleep unless stopping (stop interrupts it at once)."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    # -- receiving -----------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = Backoff(1.0, self.config.reconnect_backoff_cap)
        if self.refused is not None:  # refused at start: said so, ask again later
            await self._pause(self.refused_retry)
        while not self._stopping.is_set():
            try:
                if self.me is None:
                    await self._setup()
                updates = await self._poll()
                backoff.reset()
                if self.menus.stale is not None:
                    await self.menus.refresh()
            except asyncio.CancelledError:
                raise
            except TelegramUnauthorizedError:
                await self._pause(await self._token_refused())
                continue
            except Exception as exc:  # network down, 5xx, conflict...
                delay = backoff.next()
                if isinstance(exc, TelegramRetryAfter):
                    # Flood control says when: polling sooner only lengthens the ban.
                    delay = max(delay, float(exc.retry_after))
                elif isinstance(exc, TelegramConflictError) and "webhook" in exc.message.lower():
                    # A webhook was set since start (the same token used elsewhere):
                    # getUpdates is refused until it is gone, so set up again, which
                    # deletes it (pending updates kept). Before, polling retried forever
                    # and nothing came in until a restart.
                    self.me = None
                log.warning("Telegram polling failed (%s); retrying in %.1fs", exc, delay)
                await self._pause(delay)
                continue
            for update_id, update in updates or ():
                if self._stopping.is_set():
                    break
                if update is not None and not await self._process(update):
                    await self._pause(backoff.next())
                    break  # poll again from the same offset: nothing is skipped
                await self._advance(update_id + 1)

    async def _poll(self) -> Batch | None:
        """One long poll (:func:`channels.telegram.polling.poll_updates`); None when
        interrupted by stop."""
        return await poll_updates(
            self.bot,
            offset=self.offset,
            timeout=self.config.polling_timeout,
            session_timeout=self.session.timeout,
            stopping=self._stopping,
        )

    async def _advance(self, offset: int) -> None:
        self.offset = offset
        assert self._host is not None
        try:
            await self._host.set_cursor(self.name, "offset", str(offset))
        except asyncio.CancelledError:
            raise
        except Exception:
            # The message itself is durable; a restart re-delivers it and the core
            # drops the duplicate, so this is worth a log line, not a stop.
            log.exception("could not persist the Telegram offset %s", offset)

    async def _process(self, update: Update) -> bool:
        """Handle one update; False means "not durable, poll it again later"."""
        assert self._host is not None and self.me is not None
        try:
            kept = await record_unparsed(self._host, update, groups=self.groups)
            if kept is not None:  # a part aiogram cannot parse: kept as received, labelled
                return kept
            if update.message is not None:
                await self.migrations.observe(update.message, self._host)
                inbound = translate_message(update.message, me=self.me, groups=self.groups)
            elif update.edited_message is not None:
                inbound = translate_message(
                    update.edited_message, me=self.me, groups=self.groups, edited=True
                )
            elif update.callback_query is not None:
                inbound = await callback_message(
                    update.callback_query, bot=self.bot, sender=self.sender, channel=self.name
                )
            else:
                log.info("skipping update %s of an unsupported type", update.update_id)
                inbound = None
            if inbound is not None:
                await self._host.deliver(self.albums.apply(self.migrations.apply(inbound)))
                if self.albums.changed:
                    await self._save_albums()
                await self.menus.first_message(inbound.chat_id)
        except asyncio.CancelledError:
            raise
        except DeliveryError as exc:
            log.warning("update %s not recorded (%s); will retry", update.update_id, exc)
            return False
        except Exception as exc:
            count = self._failures.get(update.update_id, 0) + 1
            self._failures[update.update_id] = count
            if count < MAX_UPDATE_FAILURES:
                log.exception("update %s failed (attempt %d); will retry", update.update_id,
                              count)  # fmt: skip
                return False
            log.exception("update %s failed %d times; recording it as received",
                          update.update_id, count)  # fmt: skip
            error = type(exc).__name__
            if not await record_unreadable(self._host, update, groups=self.groups, error=error):
                return False
        self._failures.pop(update.update_id, None)
        return True

    async def _save_albums(self) -> None:
        assert self._host is not None
        try:
            await self._host.set_cursor(self.name, "albums", self.albums.dump())
        except asyncio.CancelledError:
            raise
        except Exception:
            # At worst a restart right now forgets whether the album was addressed.
            log.exception("could not save the Telegram albums")

    async def _moved(self, old: str, new: str) -> None:
        """A send was told chat ``old`` is now the supergroup ``new``: follow it."""
        if self._host is None:
            return
        try:
            await self.migrations.learn(old, new, self._host)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Followed in memory already; only a restart forgets it, and the next
            # send to the old id tells it again: not worth failing this send for.
            log.exception("could not persist the move of chat %s to %s", old, new)

    # -- sending -------------------------------------------------------------------------
    async def send(self, msg: OutboundMessage) -> SendResult:
        """Deliver ``msg`` (see :class:`TelegramSender`); stops the typing indicator."""
        if self._closed:
            # Raise (not PermanentSendError): the outbox keeps it for the next start.
            raise ChannelStopped("the Telegram channel is stopped")
        self._sends += 1
        self._idle.clear()
        try:
            return await self.sender.send(msg)
        finally:
            self._sends -= 1
            if not self._sends:
                self._idle.set()
            self._typing.stop(msg.chat_id)

    async def typing(self, chat_id: str, topic: int | str | None = None) -> None:
        """Show "typing…" in ``chat_id`` (in its forum ``topic``, if any) until the next
        send there (bounded)."""
        await self._typing.start(chat_id, topic)
