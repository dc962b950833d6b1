"""Public groups allowed by their ``@name``: held to the chat first seen under it.

``channels.telegram.groups`` may name a public group by its ``@name`` instead of its chat
id. A group's name is not its own for good: its admins can change it, and once given up
anyone may give it to a group of their own. Matched by name at every message, the bot
then answered a stranger's group as the allowed one (paid model calls, the owner's
notices) for as long as the stranger wanted. The first chat seen under an allowed name is
kept (``state.db``, the channel cursor ``group_names``); another chat under that name
later is ignored, with a warning saying how to allow it (its chat id in the list), the
same choice as for the owner's ``@username`` (a numeric id is the owner, a username only
matches).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from aiogram.types import Chat

from bot.channel import ChannelHost
from bot.config.channels import TelegramGroupConfig
from channels.telegram.migration import load_mapping
from channels.telegram.translate import GROUP_TYPES

log = logging.getLogger("my_agent.telegram")

CURSOR_KEY = "group_names"


class GroupNames:
    """The chat each allowed ``@name`` was first seen as; ``groups`` is the allow-list."""

    def __init__(self, groups: Mapping[str, TelegramGroupConfig]) -> None:
        self.groups = groups
        self.chats: dict[str, int] = {}  # "@name" (lower case) -> its chat id
        self._warned: set[int] = set()  # impostor chats already named in the log

    async def load(self, host: ChannelHost) -> None:
        """The names' chats kept before a restart."""
        chats = await load_mapping(host, CURSOR_KEY)
        self.chats = {str(k): v for k, v in chats.items() if isinstance(v, int)}

    async def admit(self, chat: Chat, host: ChannelHost) -> bool:
        """False when ``chat`` is allowed only by an ``@name`` that was first seen as
        another chat; the first chat seen under an allowed name is kept as its own."""
        if chat.type not in GROUP_TYPES or not chat.username or str(chat.id) in self.groups:
            return True
        name = "@" + chat.username.lower()
        if name not in self.groups:
            return True  # not allowed at all: the translation ignores it
        known = self.chats.get(name)
        if known is None:
            self.chats[name] = chat.id
            await host.set_cursor("telegram", CURSOR_KEY, json.dumps(self.chats))
            log.info("allowed group %s is chat %s; kept to it", name, chat.id)
            return True
        if known == chat.id:
            return True
        if chat.id not in self._warned:
            self._warned.add(chat.id)
            log.warning(
                "ignoring chat %s (%r): it is called %s now, but the allowed group of that "
                "name is chat %s; if this is the group, put %s in channels.telegram.groups",
                chat.id, chat.title, name, known, chat.id,
            )  # fmt: skip
        return False
