"""A member joining or leaving an allowed group, kept as the group's context.

Telegram announces both with a service message (``new_chat_members``, which may list
several people added at once, and ``left_chat_member``; ``from`` is whoever added or
removed them). Every other service message is skipped (:mod:`.service_messages`); these
two are handed to the core as one message per person, from that person, never
addressed (recorded, never answered): "[joined the group]" or "[left the group]", with
``membership`` in its metadata. A member's reply reads the group from their latest
arrival on (:mod:`bot.brain.restricted_window`): before session 30 it read from their
first message ever, and a member who left and came back was read what was said while
they were away. Telegram may leave joins unannounced (a large group, or one that hides
them): such a member reads from their first message after they left.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiogram.types import Message, User

from bot.config.channels import TelegramGroupConfig
from bot.events import InboundMessage
from bot.transcript_lines import MEMBERSHIP
from channels.telegram.translate import GROUP_TYPES, BotIdentity, allowed_group, message_identity

SAID = {"joined": "[joined the group]", "left": "[left the group]"}


def membership_messages(
    message: Message, *, me: BotIdentity, groups: Mapping[str, TelegramGroupConfig]
) -> list[InboundMessage] | None:
    """The messages that record who joined or left with ``message``, or None when it
    announces no such change (an empty list: one in a chat not allowed, or of the bot
    itself: nothing to record)."""
    changes: list[tuple[User, str]] = [(u, "joined") for u in message.new_chat_members or ()]
    if message.left_chat_member is not None:
        changes.append((message.left_chat_member, "left"))
    if not changes:
        return None
    chat = message.chat
    group = allowed_group(chat, groups) if chat.type in GROUP_TYPES else None
    if group is None:
        return []
    message_id, received = message_identity(message, edited=False)
    return [
        InboundMessage(
            channel="telegram",
            sender_id=str(user.id),
            sender_name=user.full_name,
            sender_aliases=(f"@{user.username}",) if user.username else (),
            text=SAID[change],
            # one per person: several added at once are several arrivals
            message_id=f"{message_id}:{change}:{user.id}",
            chat_id=str(chat.id),
            received_at=received,
            group_id=str(chat.id),
            group_title=chat.title or group.title,
            addressed=False,
            message_ref=message_id,
            metadata={
                "telegram_message_id": message.message_id,
                "chat_type": chat.type,
                MEMBERSHIP: change,
            },
        )
        for user, change in changes
        if user.id != me.id  # the bot's own arrival is no member's
    ]
