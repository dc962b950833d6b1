"""The Telegram channel: its lifecycle (setup, reload, stop) and sends.

Receiving (our own long polling with a durable offset, an update's handling) is
:class:`~channels.telegram.receiving.TelegramReceiver`; the token's standing with
Telegram (a 401 said once, kept for ``my-agent status``) is
:class:`~channels.telegram.token_state.TokenState`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiogram import Bot
from aiogram.client.telegram import PRODUCTION, TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    TelegramAPIError,
    TelegramNotFound,
    TelegramUnauthorizedError,
)

from bot.channel import ChannelHost
from bot.config.model import AppConfig
from bot.events import OutboundMessage, SendResult
from bot.tasks import spawn
from channels.telegram.albums import Albums
from channels.telegram.callbacks import ReplyPrompts
from channels.telegram.decode_errors import ShortDecodeErrors
from channels.telegram.edits import EditHistory
from channels.telegram.group_names import GroupNames
from channels.telegram.ignored_groups import IgnoredGroups
from channels.telegram.menus import OwnerMenus
from channels.telegram.migration import GroupMigrations
from channels.telegram.poll_conflict import PollConflicts
from channels.telegram.receiving import TelegramReceiver
from channels.telegram.response_types import KeepResponseTypes
from channels.telegram.retries import Sleep
from channels.telegram.sender import TelegramSender
from channels.telegram.token_state import NOT_FOUND, UNAUTHORIZED, TokenState
from channels.telegram.translate import BotIdentity
from channels.telegram.typing_indicator import TypingIndicator
from channels.telegram.wire import TracedSession

log = logging.getLogger("my_agent.telegram")


def _owner_ids(config: AppConfig) -> list[str]:
    return [i.strip().lstrip("+") for i in config.owner.identities.get("telegram", [])]


class ChannelStopped(RuntimeError):
    """A send after :meth:`TelegramChannel.stop`; the outbox retries it after a restart."""


class TelegramChannel(TelegramReceiver):
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
        self.session = TracedSession(api=api)  # tells a send never made from one unanswered
        self.session.middleware(KeepResponseTypes())
        self.session.middleware(ShortDecodeErrors())  # an HTML 502 page logged on one line
        self.bot = Bot(token=cfg.token, session=self.session)
        self.menus = OwnerMenus(self.bot, _owner_ids(config))
        self.sender = TelegramSender(self.bot, cfg, sleep=sleep)
        self.groups = {g.id: g for g in cfg.groups} | {
            g.id.lower(): g for g in cfg.groups if g.id.startswith("@")
        }
        self.migrations = GroupMigrations(self.groups)
        self.group_names = GroupNames(self.groups)
        self.ignored = IgnoredGroups(self.groups)
        self.sender.route = self.migrations.current  # a moved group's sends: its new id
        self.sender.on_moved = self._moved
        self.prompts = ReplyPrompts(self.sender)  # Reply buttons' prompts, in the background
        self.albums = Albums()
        self.edits = EditHistory()
        self.me: BotIdentity | None = None
        self.offset = 0
        self._host: ChannelHost | None = None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures: dict[int, int] = {}
        self._closed = False
        self._sends = 0  # sends in progress: stop() closes the session once they are done
        self._idle = asyncio.Event()
        self._idle.set()
        self.started = False  # True once Telegram accepted getMe/deleteWebhook/setMyCommands
        self.token = TokenState(self.name)
        self.conflicts = PollConflicts(self.name)
        self._typing = TypingIndicator(
            self.bot, cfg, self.migrations.current, self.token.accepted, self._revoked
        )
        self.sender.on_flood = self._typing.hold  # no "typing…" while a chat's sends wait

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
        await self.group_names.load(host)
        self.albums.load(await host.get_cursor(self.name, "albums"))
        positions = self.sender.positions  # threading across restarts (chat_positions)
        positions.load(await host.get_cursor(self.name, "positions"))
        positions.save = lambda value: host.set_cursor(self.name, "positions", value)
        await self.token.load(host)
        await self.conflicts.load(host)
        try:
            await asyncio.wait_for(self._setup(), timeout=15)
        except (TelegramUnauthorizedError, TelegramNotFound) as exc:
            await self._token_refused(exc)
        except (AiogramError, TimeoutError) as exc:
            log.warning("Telegram setup failed (%s); will retry in the background", exc)
        self._task = spawn(self._run(), name="telegram-polling")

    async def _setup(self) -> None:
        me = await self.bot.get_me()
        await self.bot.delete_webhook(drop_pending_updates=False)
        await self.menus.setup()
        self.me = BotIdentity(me.id, me.username)
        self.started = True
        await self.token.accept()
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
        """The daemon is stopping: a send waiting out a flood ban (or a network backoff,
        or a refused token) gives up now, its message kept in the outbox; before, a stop
        in a 30 s flood wait took 30 s. Sends that need no wait still go until :meth:`stop`."""
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
        await self.prompts.stop()
        self.ignored.say_counts()
        try:
            # A send cut off by closing the session may have reached Telegram all the
            # same: the outbox, told it failed, sent it again at the next start.
            await asyncio.wait_for(self._idle.wait(), timeout=10)
        except TimeoutError:
            log.warning("closing the Telegram session under a send still in progress")
        await self.session.close()

    def problems(self) -> list[str]:
        """What /status, ``my-agent status`` and the status line say: a refused token,
        another instance polling."""
        return [p for p in (self.token.refused, self.conflicts.problem) if p]

    @property
    def sending_blocked(self) -> bool:
        """True while Telegram refuses the bot token: sends wait for it, so the core
        sends owner alerts by another channel (:meth:`bot.services.Services.alert_owner`)."""
        return self.token.sending_blocked

    @property
    def refused_retry(self) -> float:
        """Seconds between two questions about a token Telegram refused."""
        return self.token.retry_every

    @refused_retry.setter
    def refused_retry(self, seconds: float) -> None:
        self.token.retry_every = seconds

    async def _token_refused(self, exc: TelegramAPIError) -> float:
        """Telegram said 401, or 404 to setup (:meth:`TokenState.refuse`): set up again
        (menus, identity) once the token is accepted. A 404 is what Telegram answers a
        token of the wrong form (and a wrong ``api_base``): before session 25 it was
        taken for an outage, a warning every minute, forever, and the owner not told."""
        self.started = False
        self.me = None
        answer = NOT_FOUND if isinstance(exc, TelegramNotFound) else UNAUTHORIZED
        return await self.token.refuse(answer)

    async def _revoked(self) -> None:
        """A send or chat action met a 401: the token was revoked since the last poll.
        Sends are held and "typing…" paused until the polling loop, which sets up again
        (:meth:`TelegramReceiver._run`), finds it accepted."""
        self.started = False
        await self.token.refuse()

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
        """Deliver ``msg`` (see :class:`TelegramSender`); "typing…" kept only while
        another reply is owed in the chat (:meth:`TypingIndicator.settle`).
        While Telegram refuses the bot token, waits until it accepts it again
        (:meth:`TokenState.held`): the message stays pending in the outbox meanwhile."""
        if self._closed:
            # Raise (not PermanentSendError): the outbox keeps it for the next start.
            raise ChannelStopped("the Telegram channel is stopped")
        self._sends += 1
        self._idle.clear()
        try:
            while True:
                await self.token.held(self.sender.stopping)
                try:
                    result = await self.sender.send(msg)
                    await self.sender.positions.persist()  # the bot's message: the newest
                    return result
                except TelegramUnauthorizedError:
                    # Revoked since the last poll: held like the rest (parts delivered
                    # are remembered by the sender, so the retry does not repeat them).
                    await self._revoked()
        finally:
            self._sends -= 1
            if not self._sends:
                self._idle.set()
            # a reply (or the notice standing for one) settles one owed in the chat
            answer = msg.kind in ("reply", "notice")
            self._typing.settle(msg.chat_id, answer, msg.metadata.get("topic"))

    async def typing(self, chat_id: str, topic: int | str | None = None) -> None:
        """Show "typing…" in ``chat_id`` (in its forum ``topic``, if any) until the
        reply asked for is sent there, and every other one owed there (each bounded)."""
        await self._typing.start(chat_id, topic)
