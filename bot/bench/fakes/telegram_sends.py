"""What the fake Bot API (:mod:`bot.bench.fakes.telegram_api`) does with the bot's sends:
``sendMessage``, ``sendPhoto`` / ``sendDocument``, refused as Telegram refuses them (a
chat not found, blocked, kicked, migrated; HTML it cannot parse; too long a text or
caption; bad button data) with :class:`ApiError`. A part of
:class:`~bot.bench.fakes.telegram_api.FakeTelegramServer` (its base).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from bot.bench.fakes.telegram_html import HtmlError, parse_telegram_html


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        description: str,
        retry_after: int | None = None,
        migrate_to_chat_id: int | None = None,
    ) -> None:
        super().__init__(description)
        self.code, self.description, self.retry_after = code, description, retry_after
        self.migrate_to_chat_id = migrate_to_chat_id


class SendMethods:
    """The sending half of :class:`~bot.bench.fakes.telegram_api.FakeTelegramServer`."""

    me: dict[str, Any]
    sent: list[dict[str, Any]]
    missing_chats: set[int]
    blocked_chats: set[int]
    kicked_chats: set[int]
    migrated_chats: dict[int, int]
    deleted_topics: set[int]
    _message_ids: dict[int, int]

    if TYPE_CHECKING:  # UpdateInjection's

        @staticmethod
        def as_message(record: dict[str, Any]) -> dict[str, Any]: ...

    def _check_chat(self, chat_id: int, p: dict[str, Any]) -> None:
        """Refuse a send to ``chat_id`` as Telegram does when it cannot be written to."""
        thread = p.get("message_thread_id")
        if thread is not None and int(thread) in self.deleted_topics:
            raise ApiError(400, "Bad Request: message thread not found")
        if chat_id in self.missing_chats:
            raise ApiError(400, "Bad Request: chat not found")
        if chat_id in self.blocked_chats:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        if chat_id in self.kicked_chats:
            raise ApiError(403, "Forbidden: bot was kicked from the group chat")
        if chat_id in self.migrated_chats:
            raise ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                migrate_to_chat_id=self.migrated_chats[chat_id],
            )

    def _send_message(self, p: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(p["chat_id"])
        self._check_chat(chat_id, p)
        text = p.get("text", "")
        visible = text
        if p.get("parse_mode", "").upper() == "HTML":
            try:
                visible = parse_telegram_html(text)
            except HtmlError as exc:
                raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if not visible.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if len(visible.encode("utf-16-le")) // 2 > 4096:
            raise ApiError(400, "Bad Request: message is too long")
        markup = p.get("reply_markup")
        for row in (markup or {}).get("inline_keyboard", []):
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(data.encode()) <= 64:
                    raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
        self._message_ids[chat_id] += 1
        kind = "private" if chat_id > 0 else "supergroup"
        msg: dict[str, Any] = {
            "message_id": self._message_ids[chat_id],
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": kind},
            "from": self.me,
            "text": visible,
            # kept for assertions (Telegram would return entities instead)
            "raw_text": text,
            "parse_mode": p.get("parse_mode"),
        }
        if markup:
            msg["reply_markup"] = markup
        self.sent.append(msg)
        return self.as_message(msg)

    def _send_file(self, kind: str, p: dict[str, Any]) -> dict[str, Any]:
        """sendPhoto / sendDocument by a file_id the bot received (no upload here): the
        record has ``photo`` (as Telegram's sizes) or ``document``, and any caption."""
        chat_id = int(p["chat_id"])
        self._check_chat(chat_id, p)
        file_id = p.get(kind)
        if not file_id:
            raise ApiError(400, f"Bad Request: there is no {kind} in the request")
        caption = p.get("caption", "")
        if len(caption) > 1024:
            raise ApiError(400, "Bad Request: message caption is too long")
        self._message_ids[chat_id] += 1
        content: dict[str, Any] = (
            {"photo": [{"file_id": file_id, "file_unique_id": file_id, "width": 9, "height": 9}]}
            if kind == "photo"
            else {"document": {"file_id": file_id, "file_unique_id": file_id}}
        )
        msg: dict[str, Any] = {
            "message_id": self._message_ids[chat_id],
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": self.me,
            **content,
            **({"caption": caption} if caption else {}),
            "text": caption,  # kept for assertions, as for sendMessage's records
        }
        self.sent.append(msg)
        return {k: v for k, v in self.as_message(msg).items() if k != "text"}
