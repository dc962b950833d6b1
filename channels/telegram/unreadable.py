"""What is kept of a message the adapter cannot read.

An update whose handling keeps failing (a message of a shape the translation does not
expect, a defect) is retried :data:`~channels.telegram.receiving.MAX_UPDATE_FAILURES`
times and then passed over, so that one message cannot stop every later one. Passed
over silently, it was lost: nobody but the log knew it had come. Its chat, sender and
words as Telegram sent them are recorded instead, labelled, and answered like any
message (the owner learns that something they sent was not understood). So is a message
with a part aiogram could not parse at all (:func:`record_unparsed`), at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from aiogram.types import Message, Update

from bot.channel import ChannelHost, DeliveryError
from bot.config.channels import TelegramGroupConfig
from bot.events import InboundMessage
from channels.telegram.polling import unread_parts
from channels.telegram.translate import GROUP_TYPES, allowed_group, message_identity

log = logging.getLogger("my_agent.telegram")


async def record_unreadable(
    host: ChannelHost,
    update: Update,
    *,
    groups: Mapping[str, TelegramGroupConfig],
    error: str,
) -> bool:
    """Deliver what can be kept of an update that cannot be handled
    (:func:`unreadable_message`); False: not durable, poll it again."""
    message = update.message or update.edited_message
    try:
        inbound = (
            unreadable_message(
                message,
                groups=groups,
                error=error,
                edited=update.message is None,
            )
            if message is not None
            else None
        )
        if inbound is not None:
            await host.deliver(inbound)
    except asyncio.CancelledError:
        raise
    except DeliveryError as exc:
        log.warning("update %s not recorded (%s); will retry", update.update_id, exc)
        return False
    except Exception:
        log.exception("update %s cannot be recorded at all; skipping it", update.update_id)
    return True


async def record_unparsed(
    host: ChannelHost, update: Update, *, groups: Mapping[str, TelegramGroupConfig]
) -> bool | None:
    """:func:`record_unreadable` for a message kept without parts aiogram could not parse
    (:func:`~channels.telegram.polling.unread_parts`, named in its label); None when it
    has none (handle it as usual)."""
    unread = unread_parts(update)
    if not unread:
        return None
    named = ", ".join(part.replace("_", " ") for part in unread)
    error = f"its {named}, of a shape not understood"
    return await record_unreadable(host, update, groups=groups, error=error)


def unreadable_message(
    message: Message,
    *,
    groups: Mapping[str, TelegramGroupConfig],
    error: str,
    edited: bool = False,
) -> InboundMessage | None:
    """The event recording ``message`` as received (its text or caption), labelled with
    ``error``; None where the message would not have been taken anyway (a group that is
    not allowed, a channel post)."""
    chat = message.chat
    group_id = group_title = None
    if chat.type in GROUP_TYPES:
        config = allowed_group(chat, groups)
        if config is None:
            return None
        group_id, group_title = str(chat.id), chat.title or config.title
    elif chat.type != "private":
        return None
    user, as_chat = message.from_user, message.sender_chat
    if user is not None:
        sender_id, sender_name = str(user.id), user.full_name
        aliases: tuple[str, ...] = (f"@{user.username}",) if user.username else ()
    elif as_chat is not None:
        sender_id, sender_name, aliases = str(as_chat.id), as_chat.title or str(as_chat.id), ()
    else:
        return None
    words = " ".join((message.text or message.caption or "").split())
    label = f"[a message the assistant could not read ({error})"
    text = f"{label}; as received:] {words}" if words else f"{label}]"
    message_id, received = message_identity(message, edited)
    return InboundMessage(
        channel="telegram",
        sender_id=sender_id,
        sender_name=sender_name,
        sender_aliases=aliases,
        text=text,
        message_id=message_id,
        chat_id=str(chat.id),
        received_at=received,
        group_id=group_id,
        group_title=group_title,
        # in a group, whether it asked the bot is what could not be read: kept as context
        addressed=group_id is None,
        message_ref=f"{chat.id}:{message.message_id}",
        metadata={
            "telegram_message_id": message.message_id,
            "chat_type": chat.type,
            "unreadable": error,
        },
    )
