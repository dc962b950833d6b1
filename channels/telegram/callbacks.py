"""A button press (``callback_query``): acknowledged, then its command handed to the core.

A bare "reply to this party" button asks for the message first (a prompt the owner
answers), so it reaches the core only once the owner has written it.
"""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.exceptions import AiogramError
from aiogram.types import CallbackQuery

from bot.events import InboundMessage
from channels.telegram.keyboards import bare_reply_target, reply_prompt
from channels.telegram.render import escape
from channels.telegram.sender import TelegramSender

log = logging.getLogger("my_agent.telegram")


async def callback_message(
    query: CallbackQuery, *, bot: Bot, sender: TelegramSender, channel: str
) -> InboundMessage | None:
    """A button press: acknowledge it, then hand its command to the core."""
    try:
        await bot.answer_callback_query(query.id)
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
        await sender.send_part(chat_id, escape(text), markup=markup, reply_to=button_message)
        return None
    user = query.from_user
    return InboundMessage(
        channel=channel,
        sender_id=str(user.id),
        sender_name=user.full_name,
        sender_aliases=(f"@{user.username}",) if user.username else (),
        text=data,
        message_id=f"callback:{query.id}",
        chat_id=str(chat_id),
        metadata={"callback": True, "button_message": getattr(message, "message_id", None)},
    )
