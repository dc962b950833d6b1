"""The command menus Telegram shows (``setMyCommands``), per kind of chat.

The owner's chats get every command; anyone else only what they may use (a stranger's
menu offered /trust, /block, /reply and /search, which answered "not available"). An
owner known only by @username has no chat to scope to, so the full menu stays everyone's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiogram import Bot
from aiogram.exceptions import AiogramError, TelegramBadRequest
from aiogram.types import BotCommand, BotCommandScopeAllGroupChats, BotCommandScopeChat

log = logging.getLogger("my_agent.telegram")

# The owner's.
COMMANDS = [
    BotCommand(command="new", description="Start a fresh conversation (model kept)"),
    BotCommand(command="model", description="Show the model and the choices, or switch"),
    BotCommand(command="help", description="What I can do"),
    BotCommand(command="status", description="Conversation and assistant status"),
    BotCommand(command="rename", description="Rename this conversation"),
    BotCommand(command="search", description="Search past conversations"),
    BotCommand(command="trust", description="Trust an external party"),
    BotCommand(command="block", description="Block an external party"),
    BotCommand(command="reply", description="Reply to an external party"),
    BotCommand(command="replyall", description="Reply to a party and all on their mail"),
]
# What anyone else may use (bot/commands.py run_stranger; in groups only /help).
STRANGER_COMMANDS = [
    BotCommand(command="new", description="Start over"),
    BotCommand(command="help", description="What I can do"),
]
GROUP_COMMANDS = [BotCommand(command="help", description="What I can do")]


async def set_owner_menu(bot: Bot, owner: str) -> bool:
    """The full menu in the owner's chat; False while there is no such chat (Telegram
    answers "chat not found" until the owner has written to the bot)."""
    try:
        await bot.set_my_commands(COMMANDS, scope=BotCommandScopeChat(chat_id=int(owner)))
    except TelegramBadRequest as exc:
        log.info("the owner's menu waits for their first message (%s)", exc.message)
        return False
    return True


def numeric(owner_ids: Sequence[str]) -> list[str]:
    """The owner identities that name a chat (numeric ids, not @usernames)."""
    return [i for i in owner_ids if i.lstrip("-").isdigit()]


async def set_menus(bot: Bot, owner_ids: Sequence[str], former: Sequence[str] = ()) -> set[str]:
    """Register the menus: the owner's chats (numeric ids), everyone else, groups.
    ``former``: owner ids no longer configured (a reload), whose chat loses the owner's
    menu. Returns the owners whose chat does not exist yet (set their menu when they
    write)."""
    owners = numeric(owner_ids)
    for gone in set(numeric(former)) - set(owners):
        try:
            await bot.delete_my_commands(scope=BotCommandScopeChat(chat_id=int(gone)))
        except TelegramBadRequest as exc:  # no such chat: it has no menu either
            log.info("the former owner %s had no menu to remove (%s)", gone, exc.message)
    if not owners:
        await bot.set_my_commands(COMMANDS)
        # (groups had only /help while a numeric id was configured)
        await bot.delete_my_commands(scope=BotCommandScopeAllGroupChats())
        return set()
    waiting = {owner for owner in owners if not await set_owner_menu(bot, owner)}
    await bot.set_my_commands(STRANGER_COMMANDS)
    await bot.set_my_commands(GROUP_COMMANDS, scope=BotCommandScopeAllGroupChats())
    return waiting


class OwnerMenus:
    """The menus as the owner identities change: set at start, again after a reload
    (:meth:`changed`; Telegram unreachable: tried again after the next poll), and an
    owner's own once their chat exists (:meth:`first_message`)."""

    def __init__(self, bot: Bot, owner_ids: list[str]) -> None:
        self.bot = bot
        self.owner_ids = owner_ids
        self.waiting: set[str] = set()  # owners whose chat has no menu yet
        self.stale: list[str] | None = None  # a reload's former owners, menus not set
        # one setting of the menus at a time: a reload's refresh and the polling loop's
        # retry of it could interleave their scopes, and the older finishing last left
        # its owners' menus (two SIGHUPs in quick succession)
        self._lock = asyncio.Lock()

    async def setup(self) -> None:
        """Set every menu (at start); an error is the caller's (setup is retried)."""
        async with self._lock:
            former = list(self.stale or ())
            self.waiting = await set_menus(self.bot, self.owner_ids, former)
            self._settled(former)

    def _settled(self, former: list[str]) -> None:
        """The menus were set for the owners and ``former``: not stale any more, unless
        a reload came in meanwhile (its refresh sets them again)."""
        if (self.stale or []) == former:
            self.stale = None

    def changed(self, owner_ids: list[str]) -> None:
        """The owner identities are now ``owner_ids``: the menus are stale until
        :meth:`refresh`."""
        former, self.owner_ids = self.owner_ids, owner_ids
        self.stale = [*(self.stale or ()), *former]

    async def refresh(self) -> None:
        """Set the menus again after :meth:`changed`; on failure they stay stale."""
        async with self._lock:
            if self.stale is None:
                return  # set by the refresh this one waited for
            former, owners = list(self.stale), list(self.owner_ids)
            try:
                self.waiting = await set_menus(self.bot, owners, former)
            except AiogramError as exc:
                log.warning("command menus not refreshed (%s); trying again after the next "
                            "poll", exc)  # fmt: skip
                return
            self._settled(former)
            log.info("command menus refreshed for owner ids %s", ", ".join(owners) or "-")

    async def first_message(self, chat_id: str) -> None:
        """A message came from ``chat_id``: an owner writing for the first time now has
        a chat, so it can have its menu."""
        if chat_id not in self.waiting:
            return
        try:
            if await set_owner_menu(self.bot, chat_id):
                self.waiting.discard(chat_id)
        except AiogramError as exc:  # cosmetic: tried again at their next message
            log.debug("setMyCommands for %s failed: %s", chat_id, exc)
