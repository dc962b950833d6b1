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
import logging
from typing import Any

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import PRODUCTION, TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    ClientDecodeError,
    TelegramConflictError,
    TelegramRetryAfter,
)
from aiogram.methods import GetUpdates, SendChatAction
from aiogram.types import CallbackQuery, Update
from pydantic import ValidationError

from bot.channel import ChannelHost, DeliveryError
from bot.config.model import AppConfig
from bot.events import InboundMessage, OutboundMessage, SendResult
from bot.tasks import spawn
from channels.telegram.albums import Albums
from channels.telegram.keyboards import bare_reply_target, reply_prompt
from channels.telegram.menus import set_menus, set_owner_menu
from channels.telegram.migration import GroupMigrations
from channels.telegram.render import escape
from channels.telegram.response_types import KeepResponseTypes
from channels.telegram.sender import Backoff, Sleep, TelegramSender, chat_ref, topic_id
from channels.telegram.translate import BotIdentity, translate_message
from channels.telegram.unreadable import unreadable_message

log = logging.getLogger("my_agent.telegram")

ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]
MAX_UPDATE_FAILURES = 5  # an update whose handling keeps crashing is skipped after this
TYPING_REFRESH_SECONDS = 4.5  # Telegram shows "typing" for about 5 s


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
        self._menu_waiting: set[str] = set()  # owners whose chat has no menu yet
        self.owner_ids = _owner_ids(config)
        self._menus_stale: list[str] | None = None  # a reload's former owners, menus not set
        api = TelegramAPIServer.from_base(cfg.api_base) if cfg.api_base else PRODUCTION
        self.session = AiohttpSession(api=api)
        self.session.middleware(KeepResponseTypes())
        self.bot = Bot(token=cfg.token, session=self.session)
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
        self._typing: dict[str, asyncio.Task[None]] = {}
        self._failures: dict[int, int] = {}
        self._closed = False
        self._sends = 0  # sends in progress: stop() closes the session once they are done
        self._idle = asyncio.Event()
        self._idle.set()
        self.started = False  # True once Telegram accepted getMe/deleteWebhook/setMyCommands

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, host: ChannelHost) -> None:
        """Read the stored offset, register with Telegram, start polling in the background.

        When Telegram is unreachable the daemon still starts: setup is retried by the
        polling task with backoff.
        """
        self._host = host
        self._stopping.clear()
        self.sender.stopping.clear()
        self._closed = False
        stored = await host.get_cursor(self.name, "offset")
        self.offset = int(stored) if stored and stored.lstrip("-").isdigit() else 0
        self.sender.restore(await host.get_cursor(self.name, "parts"))
        self.sender.save = lambda value: host.set_cursor(self.name, "parts", value)
        await self.migrations.load(host)
        self.albums.load(await host.get_cursor(self.name, "albums"))
        try:
            await asyncio.wait_for(self._setup(), timeout=15)
        except (AiogramError, TimeoutError) as exc:
            log.warning("Telegram setup failed (%s); will retry in the background", exc)
        self._task = spawn(self._run(), name="telegram-polling")

    async def _setup(self) -> None:
        me = await self.bot.get_me()
        await self.bot.delete_webhook(drop_pending_updates=False)
        self._menu_waiting = await set_menus(self.bot, self.owner_ids, self._menus_stale or ())
        self._menus_stale = None
        self.me = BotIdentity(me.id, me.username)
        self.started = True
        log.info("Telegram bot @%s (%s) ready; polling from offset %s", me.username, me.id,
                 self.offset)  # fmt: skip

    async def reload(self, config: AppConfig) -> None:
        """SIGHUP re-read the owner identities: the command menus follow them (the full
        one to each owner's chat, none to an id no longer the owner's); before, they
        were set at start only. Telegram unreachable: tried again after the next poll."""
        former, self.owner_ids = self.owner_ids, _owner_ids(config)
        self._menus_stale = [*(self._menus_stale or ()), *former]
        if self.started:
            await self._refresh_menus()

    async def _refresh_menus(self) -> None:
        former = self._menus_stale or []
        try:
            self._menu_waiting = await set_menus(self.bot, self.owner_ids, former)
        except AiogramError as exc:
            log.warning("command menus not refreshed (%s); trying again after the next poll",
                        exc)  # fmt: skip
            return
        self._menus_stale = None
        log.info("command menus refreshed for owner ids %s", ", ".join(self.owner_ids) or "-")

    def stop_waiting(self) -> None:
        """The daemon is stopping: a send waiting out a flood ban (or a network backoff)
        gives up now, its message kept in the outbox; before, a stop in a 30 s flood
        wait took 30 s. Sends that need no wait still go until :meth:`stop`."""
        self.sender.stopping.set()

    async def stop(self) -> None:
        """Finish the update in hand, stop polling, stop typing, close the HTTP session."""
        self._stopping.set()
        self.sender.stopping.set()
        self._closed = True
        self.started = False
        task, self._task = self._task, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=10)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for typing_task in self._typing.values():
            typing_task.cancel()
        self._typing.clear()
        try:
            # A send cut off by closing the session may have reached Telegram all the
            # same: the outbox, told it failed, sent it again at the next start.
            await asyncio.wait_for(self._idle.wait(), timeout=10)
        except TimeoutError:
            log.warning("closing the Telegram session under a send still in progress")
        await self.session.close()

    async def _pause(self, seconds: float) -> None:
        """Sleep unless stopping (stop interrupts it at once)."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    # -- receiving -----------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = Backoff(1.0, self.config.reconnect_backoff_cap)
        while not self._stopping.is_set():
            try:
                if self.me is None:
                    await self._setup()
                updates = await self._poll()
                backoff.reset()
                if self._menus_stale is not None:
                    await self._refresh_menus()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # network down, 5xx, conflict, bad token...
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

    async def _poll(self) -> list[tuple[int, Update | None]] | None:
        """One long poll; None when interrupted by stop. Each update comes with its id;
        an update aiogram cannot even parse comes as (id, None) so it is skipped, not
        retried forever."""
        timeout = self.config.polling_timeout
        request = GetUpdates(
            offset=self.offset or None, timeout=timeout, allowed_updates=ALLOWED_UPDATES
        )
        poll = asyncio.ensure_future(
            self.bot(request, request_timeout=int(self.session.timeout + timeout))
        )
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({poll, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not poll.done():
                poll.cancel()
                await asyncio.gather(poll, return_exceptions=True)
        if poll.cancelled():
            return None
        try:
            return [(u.update_id, u) for u in poll.result()]
        except ClientDecodeError as exc:
            return self._salvage(exc)

    def _salvage(self, exc: ClientDecodeError) -> list[tuple[int, Update | None]]:
        raw = exc.data.get("result") if isinstance(exc.data, dict) else None
        if not isinstance(raw, list):
            raise exc
        batch: list[tuple[int, Update | None]] = []
        for item in raw:
            update_id = item.get("update_id") if isinstance(item, dict) else None
            if not isinstance(update_id, int):
                continue
            try:
                batch.append((update_id, Update.model_validate(item, context={"bot": self.bot})))
            except ValidationError as err:
                log.error("update %s cannot be parsed (%s); skipping it", update_id, err)
                batch.append((update_id, None))
        return batch

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
            if update.message is not None:
                await self.migrations.observe(update.message, self._host)
                inbound = translate_message(update.message, me=self.me, groups=self.groups)
            elif update.edited_message is not None:
                inbound = translate_message(
                    update.edited_message, me=self.me, groups=self.groups, edited=True
                )
            elif update.callback_query is not None:
                inbound = await self._on_callback(update.callback_query)
            else:
                log.info("skipping update %s of an unsupported type", update.update_id)
                inbound = None
            if inbound is not None:
                await self._host.deliver(self.albums.apply(self.migrations.apply(inbound)))
                if self.albums.changed:
                    await self._save_albums()
                if inbound.chat_id in self._menu_waiting:
                    await self._owner_menu(inbound.chat_id)
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
            if not await self._record_unreadable(update, type(exc).__name__):
                return False
        self._failures.pop(update.update_id, None)
        return True

    async def _record_unreadable(self, update: Update, error: str) -> bool:
        """Deliver what can be kept of an update that cannot be handled
        (:mod:`channels.telegram.unreadable`); False: not durable, poll it again."""
        assert self._host is not None
        message = update.message or update.edited_message
        try:
            inbound = (
                unreadable_message(
                    message,
                    groups=self.groups,
                    error=error,
                    edited=update.message is None,
                )
                if message is not None
                else None
            )
            if inbound is not None:
                await self._host.deliver(inbound)
        except asyncio.CancelledError:
            raise
        except DeliveryError as exc:
            log.warning("update %s not recorded (%s); will retry", update.update_id, exc)
            return False
        except Exception:
            log.exception("update %s cannot be recorded at all; skipping it", update.update_id)
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

    async def _owner_menu(self, chat_id: str) -> None:
        """The owner wrote for the first time: now their chat can have its menu."""
        try:
            if await set_owner_menu(self.bot, chat_id):
                self._menu_waiting.discard(chat_id)
        except AiogramError as exc:  # cosmetic: tried again at their next message
            log.debug("setMyCommands for %s failed: %s", chat_id, exc)

    async def _on_callback(self, query: CallbackQuery) -> InboundMessage | None:
        """A button press: acknowledge it, then hand its command to the core."""
        try:
            await self.bot.answer_callback_query(query.id)
        except AiogramError as exc:  # too old or already answered: harmless
            log.debug("answerCallbackQuery %s failed: %s", query.id, exc)
        data = (query.data or "").strip()
        message = query.message
        chat = getattr(message, "chat", None)
        if not data.startswith("/") or (chat is not None and chat.type != "private"):
            log.info("ignoring callback %r from %s", data, query.from_user.id)
            return None
        chat_id = chat.id if chat is not None else query.from_user.id
        target = bare_reply_target(data)
        if target is not None:
            text, markup = reply_prompt(target)
            # under the escalation: the prompt names the party by id, the quote says who
            button_message = getattr(message, "message_id", None)
            await self.sender.send_part(
                chat_id, escape(text), markup=markup, reply_to=button_message
            )
            return None
        user = query.from_user
        return InboundMessage(
            channel=self.name,
            sender_id=str(user.id),
            sender_name=user.full_name,
            sender_aliases=(f"@{user.username}",) if user.username else (),
            text=data,
            message_id=f"callback:{query.id}",
            chat_id=str(chat_id),
            metadata={"callback": True, "button_message": getattr(message, "message_id", None)},
        )

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
            task = self._typing.pop(msg.chat_id, None)
            if task is not None:
                task.cancel()

    async def typing(self, chat_id: str, topic: int | str | None = None) -> None:
        """Show "typing…" in ``chat_id`` (in its forum ``topic``, if any) until the next
        send there (bounded)."""
        thread = topic_id(topic)
        await self._chat_action(chat_id, thread)
        old = self._typing.pop(chat_id, None)
        if old is not None:
            old.cancel()
        if self.config.typing_max_seconds > 0:
            self._typing[chat_id] = spawn(
                self._keep_typing(chat_id, thread), name=f"typing-{chat_id}"
            )

    async def _keep_typing(self, chat_id: str, topic: int | None) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + self.config.typing_max_seconds
        while loop.time() + TYPING_REFRESH_SECONDS < until:
            await asyncio.sleep(TYPING_REFRESH_SECONDS)
            await self._chat_action(chat_id, topic)
        if self._typing.get(chat_id) is asyncio.current_task():
            del self._typing[chat_id]

    async def _chat_action(self, chat_id: str, topic: int | None = None) -> None:
        if self._closed:
            return
        try:
            await self.bot(
                SendChatAction(
                    chat_id=chat_ref(self.migrations.current(chat_id)),
                    action="typing",
                    message_thread_id=topic,
                )
            )
        except AiogramError as exc:  # cosmetic: never worth failing a reply for
            log.debug("sendChatAction to %s failed: %s", chat_id, exc)
