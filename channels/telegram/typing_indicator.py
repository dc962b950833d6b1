"""The "typing…" indicator of the chats a reply is being written for.

Telegram shows a chat action for about 5 s, so it is sent again every 4.5 s until the
reply is sent there, or for ``channels.telegram.typing_max_seconds`` at the most.
While Telegram refuses the bot token (``alert:token``) nothing is asked: every chat
action would be refused too. The indicator resumes once the token is accepted, if its
reply is still owed and within that bound.
Under flood control (a 429 to a chat action, or to a send in that chat: :meth:`hold`)
nothing is asked until Telegram's ``retry_after`` has passed: each would be refused too,
and asking during a flood wait may lengthen it. Before session 27 "typing…" was asked
every 4.5 s all through the wait, and a chat action's own 429 was ignored.
Several replies owed in one chat (a question asked while the last was answered, in a
group two members asking): "typing…" is kept until the last of them is sent
(:meth:`TypingIndicator.settle`), each owed for ``typing_max_seconds`` at the most (one
never sent does not keep it). Before session 27 it stopped at the first reply sent
while the second was still being written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiogram import Bot
from aiogram.exceptions import (
    AiogramError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.methods import SendChatAction

from bot.config.channels import TelegramChannelConfig
from bot.tasks import spawn
from channels.telegram.retries import chat_ref, topic_id

log = logging.getLogger("my_agent.telegram")

TYPING_REFRESH_SECONDS = 4.5  # Telegram shows "typing" for about 5 s


class TypingIndicator:
    """One refreshing "typing…" task per chat. ``route`` maps a chat id to the one to
    send to (a group that moved to a supergroup: its new id); ``accepted`` is set while
    Telegram accepts the bot token (:attr:`TokenState.accepted`), and ``refused`` is
    called when a chat action meets a 401 (the token revoked since the last poll)."""

    def __init__(
        self,
        bot: Bot,
        config: TelegramChannelConfig,
        route: Callable[[str], str],
        accepted: asyncio.Event,
        refused: Callable[[], Awaitable[object]],
    ) -> None:
        self.bot = bot
        self.config = config
        self.route = route
        self.accepted = accepted
        self.refused = refused
        self.closed = False  # the channel is stopped: no more chat actions
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # chat -> loop times until which each reply owed there keeps "typing…", oldest first
        self._owed: dict[str, list[float]] = {}
        # chat (as sent to, routed) -> loop time until which Telegram holds it back
        self._quiet_until: dict[str, float] = {}

    def __contains__(self, chat_id: object) -> bool:
        return chat_id in self._tasks

    async def start(self, chat_id: str, topic: int | str | None = None) -> None:
        """Show "typing…" in ``chat_id`` (in its forum ``topic``, if any) until
        :meth:`stop` for that chat (bounded)."""
        thread = topic_id(topic)
        now = asyncio.get_running_loop().time()
        owed = [t for t in self._owed.get(chat_id, ()) if t > now]
        self._owed[chat_id] = [*owed, now + self.config.typing_max_seconds]
        reachable = await self._chat_action(chat_id, thread)
        self.stop(chat_id)
        if reachable and self.config.typing_max_seconds > 0:
            self._tasks[chat_id] = spawn(
                self._keep_typing(chat_id, thread), name=f"typing-{chat_id}"
            )

    def settle(self, chat_id: str, answer: bool, topic: int | str | None = None) -> None:
        """A message was sent to ``chat_id``; ``answer``: a reply (or the notice standing
        for one), which settles the oldest reply owed there. Telegram clears "typing…"
        at each message the bot sends: it is shown again at once while a reply is still
        owed there, else stopped."""
        now = asyncio.get_running_loop().time()
        owed = [t for t in self._owed.pop(chat_id, ()) if t > now][1 if answer else 0 :]
        task = self._tasks.get(chat_id)
        self.stop(chat_id)
        if not owed or task is None or task.done() or self.closed:
            return  # none owed, or not shown (the chat refuses the bot, bound reached)
        self._owed[chat_id] = owed
        self._tasks[chat_id] = spawn(
            self._keep_typing(chat_id, topic_id(topic), at_once=True), name=f"typing-{chat_id}"
        )

    def stop(self, chat_id: str) -> None:
        """Stop refreshing the indicator of ``chat_id``."""
        task = self._tasks.pop(chat_id, None)
        if task is not None:
            task.cancel()

    def hold(self, chat_id: str, seconds: float) -> None:
        """Telegram asked to wait ``seconds`` before the next request to ``chat_id``
        (a 429's ``retry_after``): no "typing…" there until then."""
        now = asyncio.get_running_loop().time()
        self._quiet_until = {c: t for c, t in self._quiet_until.items() if t > now}
        key = self.route(chat_id)
        self._quiet_until[key] = max(self._quiet_until.get(key, 0.0), now + seconds)

    def _held(self, chat_id: str) -> bool:
        until = self._quiet_until.get(self.route(chat_id))
        return until is not None and asyncio.get_running_loop().time() < until

    def stop_all(self) -> None:
        """Stop every chat's indicator (the channel stops)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        self._owed.clear()

    async def _keep_typing(self, chat_id: str, topic: int | None, at_once: bool = False) -> None:
        """Refresh "typing…" until the last reply owed in ``chat_id`` is due; ``at_once``:
        shown again first (a message sent there has just cleared it)."""
        loop = asyncio.get_running_loop()
        until = max(self._owed.get(chat_id) or [loop.time()])
        if at_once and not await self._chat_action(chat_id, topic):
            until = 0.0  # the chat refuses the bot: not asked again
        while loop.time() + TYPING_REFRESH_SECONDS < until:
            await asyncio.sleep(TYPING_REFRESH_SECONDS)
            if not self.accepted.is_set():
                # The token is refused: each chat action would be too. Before, one was
                # asked every 4.5 s in every chat a reply was owed, each refused (401),
                # while the reply waited for the token. Resumed once it is accepted.
                try:
                    await asyncio.wait_for(self.accepted.wait(), until - loop.time())
                except TimeoutError:
                    break
            if not await self._chat_action(chat_id, topic):
                break
        if self._tasks.get(chat_id) is asyncio.current_task():
            del self._tasks[chat_id]
            self._owed.pop(chat_id, None)  # all due: none keeps "typing…" any longer

    async def _chat_action(self, chat_id: str, topic: int | None = None) -> bool:
        """Show "typing…" once; False when the chat refuses the bot (blocked, gone):
        no use asking again. Before, a chat that had blocked the bot was asked every
        4.5 s for ``typing_max_seconds``, refused each time. Not asked while the token
        is refused (True: the indicator waits for it, see :meth:`_keep_typing`)."""
        if self.closed:
            return False
        if not self.accepted.is_set() or self._held(chat_id):
            return True  # shown again once the token is accepted / the flood wait is over
        try:
            await self.bot(
                SendChatAction(
                    chat_id=chat_ref(self.route(chat_id)),
                    action="typing",
                    message_thread_id=topic,
                )
            )
        except TelegramUnauthorizedError:
            # revoked since the last poll: sends are held and chat actions paused
            await self.refused()
        except (TelegramForbiddenError, TelegramNotFound, TelegramBadRequest) as exc:
            log.debug("sendChatAction to %s refused: %s; not asked again", chat_id, exc)
            return False
        except TelegramRetryAfter as exc:
            log.debug("sendChatAction to %s: flood control, quiet for %ss", chat_id,
                      exc.retry_after)  # fmt: skip
            self.hold(chat_id, float(exc.retry_after))
        except AiogramError as exc:  # cosmetic: never worth failing a reply for
            log.debug("sendChatAction to %s failed: %s", chat_id, exc)
        return True
