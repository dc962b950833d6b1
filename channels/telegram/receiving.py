"""Receiving from Telegram: our own long-polling loop, an update's handling, the offset.

Why not ``Dispatcher.start_polling``: aiogram's dispatcher advances the ``getUpdates``
offset as soon as it has fetched a batch, before our handlers have made anything durable,
so a crash between the two would lose messages. This loop uses the same aiogram client
(``bot(GetUpdates(...))`` over HTTP) and acknowledges an update only after
``host.deliver`` returned (the message is fsynced into a transcript): the next offset is
persisted with ``host.set_cursor`` and sent with the next poll. A crash before that
re-delivers the update, and the core drops it by ``(channel, message_id)``.
"""

from __future__ import annotations

import asyncio
import logging

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramConflictError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.types import Update

from bot.backoff import Backoff
from bot.channel import ChannelHost, DeliveryError
from bot.config.channels import TelegramChannelConfig, TelegramGroupConfig
from channels.telegram.albums import Albums
from channels.telegram.callbacks import ReplyPrompts, callback_message
from channels.telegram.edits import EditHistory
from channels.telegram.group_names import GroupNames
from channels.telegram.ignored_groups import IgnoredGroups
from channels.telegram.membership import membership_messages
from channels.telegram.menus import OwnerMenus
from channels.telegram.migration import GroupMigrations
from channels.telegram.poll_conflict import PollConflicts, is_other_poller
from channels.telegram.polling import Batch, poll_updates
from channels.telegram.sender import TelegramSender
from channels.telegram.token_state import TokenState
from channels.telegram.translate import BotIdentity, translate_message
from channels.telegram.unreadable import record_unparsed, record_unreadable

log = logging.getLogger("my_agent.telegram")

MAX_UPDATE_FAILURES = 5  # an update whose handling keeps crashing is skipped after this


class TelegramReceiver:
    """The receiving half of :class:`~channels.telegram.adapter.TelegramChannel`, which
    sets these attributes and implements :meth:`_setup` (getMe, webhook, menus)."""

    name: str
    config: TelegramChannelConfig
    bot: Bot
    session: AiohttpSession
    sender: TelegramSender
    prompts: ReplyPrompts
    menus: OwnerMenus
    migrations: GroupMigrations
    group_names: GroupNames
    albums: Albums
    edits: EditHistory
    groups: dict[str, TelegramGroupConfig]
    ignored: IgnoredGroups
    token: TokenState
    conflicts: PollConflicts
    me: BotIdentity | None
    offset: int
    _host: ChannelHost | None
    _stopping: asyncio.Event
    _failures: dict[int, int]

    async def _setup(self) -> None:
        raise NotImplementedError

    async def _token_refused(self, exc: TelegramAPIError) -> float:
        raise NotImplementedError

    async def _pause(self, seconds: float) -> None:
        """Sleep unless stopping (stop interrupts it at once)."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    async def _run(self) -> None:
        """Poll until stopped. A failure the polling loop does not expect (a bug, or one
        in its own error handling) is logged and the loop starts over: before, it ended
        the polling task for good while the daemon went on saying "ready" (the backoff's
        overflow at the 1,024th failed poll in a row, session 38)."""
        restarts = Backoff(1.0, self.config.reconnect_backoff_cap)
        while not self._stopping.is_set():
            try:
                await self._polling()
            except asyncio.CancelledError:
                raise
            except Exception:
                delay = restarts.next()
                log.exception("Telegram polling stopped unexpectedly; again in %.1fs", delay)
                await self._pause(delay)

    async def _polling(self) -> None:
        backoff = Backoff(1.0, self.config.reconnect_backoff_cap)
        host = self._host
        assert host is not None  # set by start()
        if self.token.refused is not None:  # refused at start: said so, ask again later
            await self._pause(self.token.retry_every)
        while not self._stopping.is_set():
            try:
                # set up again also when a send found the token refused since: its
                # getMe says when Telegram accepts it, and the held sends go
                if self.me is None or self.token.refused is not None:
                    await self._setup()
                updates = await self._poll()
                if backoff.attempt:  # after failures: sends held for the outage go now
                    await host.reachable(self.name)
                backoff.reset()
                await self.conflicts.polled(host)
                if self.menus.stale is not None:
                    await self.menus.refresh()
            except asyncio.CancelledError:
                raise
            except (TelegramUnauthorizedError, TelegramNotFound) as exc:
                await self._pause(await self._token_refused(exc))
                continue
            except Exception as exc:  # network down, 5xx, conflict...
                delay = backoff.next()
                if isinstance(exc, TelegramRetryAfter):
                    # Flood control says when: polling sooner only lengthens the ban.
                    delay = max(delay, float(exc.retry_after))
                elif isinstance(exc, TelegramConflictError) and is_other_poller(exc.message):
                    # another instance polls: said, and told past a few (poll_conflict)
                    await self.conflicts.conflict(host, exc.message)
                    await self._pause(delay)
                    continue
                elif isinstance(exc, TelegramConflictError):
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
        await self.sender.positions.persist()  # a private chat's newest message, if new
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
            said = update.message or update.edited_message
            if said is not None and not await self.group_names.admit(said.chat, self._host):
                return True  # another chat under an allowed group's name: ignored
            if update.message is not None:  # a move of an allowed group, before the drop
                await self.migrations.observe(update.message, self._host)
            if said is not None and self.ignored.drops(said.chat):
                return True  # a group not allowed: logged hourly, not per message
            if update.message is not None:  # replies to older ones are threaded under them
                self.sender.positions.saw(update.message.chat.id, update.message.message_id)
            kept = await record_unparsed(self._host, update, groups=self.groups)
            if kept is not None:  # a part aiogram cannot parse: kept as received, labelled
                return kept
            members = (
                membership_messages(update.message, me=self.me, groups=self.groups)
                if update.message is not None
                else None
            )
            if members is not None:  # who joined or left: the group's context, no words
                for arrived in members:
                    await self._host.deliver(self.migrations.apply(arrived))
                return True
            if update.message is not None:
                inbound = translate_message(update.message, me=self.me, groups=self.groups)
            elif update.edited_message is not None:
                inbound = translate_message(
                    update.edited_message, me=self.me, groups=self.groups, edited=True
                )
            elif update.callback_query is not None:
                inbound = await callback_message(
                    update.callback_query, bot=self.bot, prompts=self.prompts, channel=self.name
                )
            else:
                log.info("skipping update %s of an unsupported type", update.update_id)
                inbound = None
            if inbound is not None and self.edits.unchanged(inbound):
                log.debug("skipping an edit of %s that changes no word", inbound.message_ref)
                inbound = None  # formatting only: nothing new to record or answer
            if inbound is not None:
                inbound = self.edits.apply(inbound)  # an edit: what it said before
                await self._host.deliver(self.albums.apply(self.migrations.apply(inbound)))
                self.edits.remember(inbound)
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
