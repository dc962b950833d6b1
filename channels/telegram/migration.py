"""Allowed groups that Telegram moved to a new chat id (a group upgraded to a supergroup).

Telegram upgrades a basic group to a supergroup on its own (more members, some admin
settings) and gives it a new chat id, announcing the move with a service message in each
chat (``migrate_to_chat_id`` in the old one, ``migrate_from_chat_id`` in the new one).
The allow-list names the old id, so without this the bot went silent in the group. The
new id inherits the old one's settings, and its messages keep the old id as ``group_id``
so the group's conversation goes on. Sends to the old id go to the new one
(:meth:`GroupMigrations.current`). A move is also learnt from a send's 400 "group chat
was upgraded to a supergroup chat" (:meth:`GroupMigrations.learn`): the service messages
are not seen when the upgrade happened while the bot was away (Telegram keeps updates
24 hours). The moves are kept as a channel cursor in ``state.db`` so they survive a
restart.
"""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping
from dataclasses import replace
from typing import Any

from aiogram.types import Message

from bot.channel import ChannelHost
from bot.config.channels import TelegramGroupConfig
from bot.events import InboundMessage

log = logging.getLogger("my_agent.telegram")

CURSOR_KEY = "migrated_groups"


async def load_mapping(host: ChannelHost, key: str) -> dict[str, Any]:
    """The JSON object kept as the Telegram channel cursor ``key`` (empty when there is
    none, or when it cannot be read: said in the log)."""
    stored = await host.get_cursor("telegram", key)
    try:
        value = json.loads(stored) if stored else {}
    except ValueError:
        value = None
    if not isinstance(value, dict):
        log.warning("ignoring an unreadable %s cursor", key)
        return {}
    return value


class GroupMigrations:
    """Follows allowed groups to their new ids; ``groups`` is the adapter's allow-list."""

    def __init__(self, groups: MutableMapping[str, TelegramGroupConfig]) -> None:
        self.groups = groups
        self.moved: dict[str, str] = {}  # new chat id -> the group's configured id
        self.chats: dict[str, str] = {}  # the group's configured id -> its chat id now

    async def load(self, host: ChannelHost) -> None:
        """Apply the moves recorded before a restart."""
        for new, old in (await load_mapping(host, CURSOR_KEY)).items():
            self._follow(str(new), str(old))

    async def observe(self, message: Message, host: ChannelHost) -> None:
        """Record the move ``message`` announces, when it is one of an allowed group."""
        if message.migrate_to_chat_id is not None:
            old, new = str(message.chat.id), str(message.migrate_to_chat_id)
        elif message.migrate_from_chat_id is not None:
            old, new = str(message.migrate_from_chat_id), str(message.chat.id)
        else:
            return
        await self.learn(old, new, host)

    async def learn(self, old: str, new: str, host: ChannelHost) -> None:
        """Chat ``old`` is now chat ``new``: follow it, when it is an allowed group."""
        old = self.moved.get(old, old)  # moved twice: still the configured group
        if new in self.moved or old not in self.groups:
            return
        self._follow(new, old)
        log.info("allowed group %s is now chat %s; following it", old, new)
        await host.set_cursor("telegram", CURSOR_KEY, json.dumps(self.moved))

    def _follow(self, new: str, old: str) -> None:
        group = self.groups.get(old)
        if group is not None:
            self.moved[new] = old
            self.chats[old] = new  # in the order of the moves: the last is the newest
            self.groups.setdefault(new, group)

    def current(self, chat_id: str) -> str:
        """Where a message to ``chat_id`` goes now: its supergroup's id if it moved
        (before, every send asked the old id first and was told of the move again)."""
        return self.chats.get(self.moved.get(chat_id, chat_id), chat_id)

    def apply(self, inbound: InboundMessage) -> InboundMessage:
        """The group's configured id for a message from its new chat (same conversation)."""
        old = self.moved.get(inbound.group_id or "")
        return replace(inbound, group_id=old) if old else inbound
