"""A button press (``callback_query``): acknowledged, then its command handed to the core.

A bare "reply to this party" button (Reply, or Reply all) asks for the message first
(a prompt the owner answers), so it reaches the core only once the owner has written
it. The prompt goes out in the background (:class:`ReplyPrompts`): before session 27 it
was sent while the press was handled, and a flood wait longer than the sender waits out
failed the press five times in a second (each a request more during the ban, each press
acknowledged again), then dropped it: the owner pressed Reply and never got the prompt.
"""

from __future__ import annotations

import asyncio
import logging

from aiogram import Bot
from aiogram.exceptions import AiogramError
from aiogram.types import CallbackQuery, ForceReply

from bot.channel import PermanentSendError, RetryLater
from bot.events import InboundMessage
from bot.tasks import spawn
from channels.telegram.keyboards import bare_reply_target, reply_prompt
from channels.telegram.render import escape
from channels.telegram.sender import TelegramSender

log = logging.getLogger("my_agent.telegram")

PROMPT_TRIES = 5  # flood waits a Reply prompt sits out before it is given up on


class ReplyPrompts:
    """Reply prompts being sent, each in a task of its own: a flood wait holds the
    prompt, not the handling of the updates after the press."""

    def __init__(self, sender: TelegramSender) -> None:
        self.sender = sender
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, chat_id: int, text: str, markup: ForceReply, reply_to: int | None) -> None:
        """Send the prompt ``text`` to ``chat_id``, threaded under ``reply_to``."""
        task = spawn(self._send(chat_id, text, markup, reply_to), name=f"reply-prompt-{chat_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(
        self, chat_id: int, text: str, markup: ForceReply, reply_to: int | None
    ) -> None:
        for _ in range(PROMPT_TRIES):
            try:
                await self.sender.send_part(chat_id, escape(text), markup=markup, reply_to=reply_to)
                return
            except RetryLater as exc:  # a flood wait longer than the sender sits out
                if await self.sender.wait_unless_stopping(exc.retry_after):
                    break  # stopping: the owner presses again after the restart
            except (PermanentSendError, AiogramError) as exc:
                log.warning("the Reply prompt for chat %s was not sent: %s", chat_id, exc)
                return
        log.warning("the Reply prompt for chat %s was not sent (flood control)", chat_id)

    async def stop(self) -> None:
        """End the prompts still waiting (the channel stops)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def callback_message(
    query: CallbackQuery, *, bot: Bot, prompts: ReplyPrompts, channel: str
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
    bare = bare_reply_target(data)
    if bare is not None:  # Reply, or Reply all (session 42): the words are asked for
        command, target = bare
        text, markup = reply_prompt(target, command=command)
        # under the escalation: the prompt names the party by id, the quote says who
        prompts.send(chat_id, text, markup, getattr(message, "message_id", None))
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
