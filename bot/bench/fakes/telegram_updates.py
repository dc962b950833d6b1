"""Updates the fake Bot API (:mod:`bot.bench.fakes.telegram_api`) hands to long polls:
messages, edits and button presses a test injects, built as Telegram builds them. A part
of :class:`~bot.bench.fakes.telegram_api.FakeTelegramServer` (its base).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any


class UpdateInjection:
    """The update-making half of :class:`~bot.bench.fakes.telegram_api.FakeTelegramServer`."""

    _updates: list[dict[str, Any]]
    _history: list[dict[str, Any]]
    _next_update_id: int
    _message_ids: dict[int, int]
    _cond: asyncio.Condition

    def _user(self, user_id: int, username: str | None, first_name: str) -> dict[str, Any]:
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username:
            user["username"] = username
        return user

    @staticmethod
    def as_message(record: dict[str, Any]) -> dict[str, Any]:
        """A sent record as Telegram would embed it in an update (no test-only keys)."""
        msg = {k: v for k, v in record.items() if k not in ("raw_text", "parse_mode")}
        if "inline_keyboard" not in (msg.get("reply_markup") or {}):
            msg.pop("reply_markup", None)  # only inline keyboards travel with a message
        return msg

    def make_message(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        from_id: int | None = None,
        username: str | None = None,
        first_name: str = "Ann",
        chat_type: str | None = None,
        title: str | None = None,
        reply_to: dict[str, Any] | None = None,
        entities: list[dict[str, Any]] | None = None,
        **content: Any,
    ) -> dict[str, Any]:
        """A Message object; ``content`` adds photo=, document=, caption=, sticker=..."""
        kind = chat_type or ("private" if chat_id > 0 else "supergroup")
        chat: dict[str, Any] = {"id": chat_id, "type": kind}
        if kind == "private":
            chat["first_name"] = first_name
        else:
            chat["title"] = title or f"Group {chat_id}"
        self._message_ids[chat_id] += 1
        msg: dict[str, Any] = {
            "message_id": self._message_ids[chat_id],
            "date": int(time.time()),
            "chat": chat,
            "from": self._user(from_id if from_id is not None else chat_id, username, first_name),
        }
        if text is not None:
            msg["text"] = text
        if entities:
            msg["entities"] = entities
        if reply_to is not None:
            msg["reply_to_message"] = self.as_message(reply_to)
        msg.update(content)
        return msg

    def push_update(self, kind: str, payload: dict[str, Any]) -> int:
        """Queue ``{"update_id", kind: payload}`` and wake long polls; returns the id."""
        self._next_update_id += 1
        update = {"update_id": self._next_update_id, kind: payload}
        self._updates.append(update)
        self._history.append(update)
        asyncio.get_running_loop().create_task(self._notify())
        return self._next_update_id

    def inject_message(self, chat_id: int, text: str | None = None, **kw: Any) -> dict[str, Any]:
        msg = self.make_message(chat_id, text, **kw)
        self.push_update("message", msg)
        return msg

    def inject_edit(self, original: dict[str, Any], new_text: str) -> dict[str, Any]:
        edited = dict(original, text=new_text, edit_date=int(time.time()) + 1)
        self.push_update("edited_message", edited)
        return edited

    def inject_callback(
        self,
        from_id: int,
        data: str,
        message: dict[str, Any],
        *,
        username: str | None = None,
        first_name: str = "Ann",
    ) -> str:
        query_id = f"cbq{self._next_update_id + 1}"
        self.push_update(
            "callback_query",
            {
                "id": query_id,
                "from": self._user(from_id, username, first_name),
                "chat_instance": "ci1",
                "message": self.as_message(message),
                "data": data,
            },
        )
        return query_id

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()
