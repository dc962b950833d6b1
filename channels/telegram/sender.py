"""Sending to Telegram: rendering, splitting, buttons and a bounded retry policy.

One :class:`~bot.events.OutboundMessage` may become several Telegram messages (4,096
UTF-16 units each), then one per file it passes on (``metadata["files"]``, the owner's
``/reply`` with a photo: by file_id). They are sent in order; the inline keyboard goes on
the last text part.
Each call follows the retry policy of ``retries.py`` (flood waits, backoff, a bounded
number of tries); then the exception goes to the core's outbox, which retries the
message later. Parts already delivered are remembered per outbox id, so that retry does
not send them twice.
A stop ends those waits at once (:meth:`TelegramChannel.stop_waiting`): the message stays
in the outbox for the next start. The parts delivered of a message that goes back to the
outbox are also saved (:attr:`TelegramSender.save`, the channel's cursor ``parts``), so the
retry after a restart does not send them twice either. Errors that no retry can fix (chat
not found, bot blocked) raise :class:`~bot.channel.PermanentSendError`. A part Telegram
refuses to parse is resent as plain text: a reply is never lost to a formatting problem,
nor to a forum topic deleted since (sent to the general topic instead).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramForbiddenError, TelegramNotFound
from aiogram.methods import SendDocument, SendMessage, SendPhoto, TelegramMethod
from aiogram.types import ForceReply, InlineKeyboardMarkup, LinkPreviewOptions, ReplyParameters

from bot.channel import PermanentSendError
from bot.config.channels import TelegramChannelConfig
from bot.events import OutboundMessage, SendResult
from channels.telegram.chat_positions import ChatPositions, threaded_under
from channels.telegram.keyboards import actions_as_text, inline_keyboard, split_actions
from channels.telegram.render import escape, render_parts
from channels.telegram.retries import ApiCalls, Sleep, chat_ref, topic_id
from channels.telegram.splitting import html_to_plain, split_visible

log = logging.getLogger("my_agent.telegram")

Markup = InlineKeyboardMarkup | ForceReply
Save = Callable[[str], Awaitable[None]]
SAVED_MAX = 200  # messages whose delivered parts are kept across restarts, newest


def _is_parse_error(exc: TelegramBadRequest) -> bool:
    return "can't parse entities" in exc.message.lower()


class TelegramSender(ApiCalls):
    """Sends rendered messages as ordered parts (:class:`ApiCalls`: the retry policy)."""

    def __init__(
        self, bot: Bot, config: TelegramChannelConfig, sleep: Sleep = asyncio.sleep
    ) -> None:
        super().__init__(bot, config, sleep)
        self._progress: dict[int, tuple[int, str | None]] = {}  # outbox id -> parts sent, ref
        # The same for messages that went back to the outbox part-way, as saved across
        # restarts (outbox id -> parts sent, ref, fingerprint): an id may be used again
        # once its row is gone, so an entry counts only for the message it was made for.
        self._saved: dict[int, tuple[int, str | None, str]] = {}
        self.save: Save | None = None  # set by the channel: persists what restore reads
        self._finished: set[int] = set()  # saved as all delivered, until the next save
        self.positions = ChatPositions()  # the newest message of each chat (threading)

    def restore(self, stored: str | None) -> None:
        """Take back the partial deliveries :attr:`save` persisted (JSON), if readable."""
        try:
            raw = json.loads(stored) if stored else {}
            self._saved = {int(k): (int(v[0]), v[1], str(v[2])) for k, v in raw.items()}
        except (ValueError, TypeError, IndexError, AttributeError):
            log.warning("the saved Telegram part progress is unreadable; ignoring it")
            self._saved = {}

    async def _keep(self, key: int, mark: str, progress: tuple[int, str | None] | None) -> None:
        """Save (or, ``progress`` None, drop) the parts of outbox ``key`` delivered;
        the messages saved as all delivered before it are dropped (marked sent since)."""
        for old in self._finished - {key}:
            self._saved.pop(old, None)
        self._finished &= {key}
        if progress is None:
            if self._saved.pop(key, None) is None:
                return
        else:
            self._saved[key] = (*progress, mark)
            while len(self._saved) > SAVED_MAX:
                del self._saved[min(self._saved)]
        if self.save is None:
            return
        try:
            await self.save(json.dumps({str(k): list(v) for k, v in self._saved.items()}))
        except asyncio.CancelledError:
            raise
        except Exception:
            # Only a duplicate part at worst (after a restart): not worth failing a send.
            log.exception("could not save the Telegram part progress of outbox %s", key)

    async def send_part(
        self,
        chat_id: int | str,
        part_html: str,
        *,
        markup: Markup | None = None,
        reply_to: int | None = None,
        topic: int | None = None,
        silent: bool = False,
    ) -> Any:
        """Send one HTML part (plain-text fallback on a parse error); returns the Message.
        ``topic``: the forum topic (``message_thread_id``) it goes to; ``silent``: no
        notification (a later part of a message whose first part just rang)."""
        kwargs: dict[str, Any] = {
            "chat_id": chat_id,
            "disable_notification": silent or None,
            "reply_markup": markup,
            "link_preview_options": LinkPreviewOptions(is_disabled=True),
        }
        if topic is not None:
            kwargs["message_thread_id"] = topic
        if reply_to is not None:
            kwargs["reply_parameters"] = ReplyParameters(
                message_id=reply_to, allow_sending_without_reply=True
            )
        try:
            try:
                return await self.call_in_topic(
                    SendMessage(text=part_html, parse_mode="HTML", **kwargs)
                )
            except TelegramBadRequest as exc:
                if not _is_parse_error(exc):
                    raise
                log.error("Telegram refused our HTML (%s); sending plain text", exc.message)
                return await self.call_in_topic(
                    SendMessage(text=html_to_plain(part_html), **kwargs)
                )
        except (TelegramForbiddenError, TelegramNotFound, TelegramBadRequest) as exc:
            raise PermanentSendError(f"telegram refused the message: {exc.message}") from exc

    async def send_file(
        self,
        chat_id: int | str,
        file: Mapping[str, Any],
        topic: int | None = None,
        silent: bool = False,
    ) -> Any:
        """Send on a file this bot received, by its ``ref`` (Telegram's file_id: no
        download, no upload): a photo as a photo, anything else as a document."""
        ref = str(file["ref"])
        common: dict[str, Any] = {
            "chat_id": chat_id,
            "message_thread_id": topic,
            "disable_notification": silent or None,
        }
        method: TelegramMethod[Any] = (
            SendPhoto(photo=ref, **common)
            if file.get("kind") == "photo"
            else SendDocument(document=ref, **common)
        )
        try:
            return await self.call_in_topic(method)
        except (TelegramForbiddenError, TelegramNotFound, TelegramBadRequest) as exc:
            raise PermanentSendError(f"telegram refused the file: {exc.message}") from exc

    async def send(self, msg: OutboundMessage) -> SendResult:
        """Render ``msg`` and send it as ordered parts; returns the ref of the last part."""
        chat_id = chat_ref(self.route(msg.chat_id))
        buttons, listed = split_actions(msg.actions)
        text = msg.text
        if listed:
            text = f"{text}\n\n{actions_as_text(listed)}".strip()
        # An escalation, a command's answer, a readout: as written (OutboundMessage.as_written)
        parts = split_visible(escape(text)) if msg.as_written else render_parts(text)
        markup = inline_keyboard(buttons)
        # Files sent on after the words (the owner's /reply with a photo to a party).
        files = [f for f in msg.metadata.get("files") or () if isinstance(f, dict) and f.get("ref")]
        if not parts:
            if markup is None and not files:
                log.info("nothing to send to %s (empty text)", chat_id)
                return SendResult(message_ref=None)
            if markup is not None:
                parts = [escape("…")]
        reply_to = threaded_under(msg, chat_id, self.positions)
        key = msg.outbox_id
        mark = hashlib.sha256(f"{msg.chat_id}\n{text}\n{len(files)}".encode()).hexdigest()[:16]
        done, ref = self._progress.get(key, (0, None)) if key is not None else (0, None)
        saved = self._saved.get(key) if key is not None else None
        if key is not None and not done and saved is not None and saved[2] == mark:
            done, ref = saved[0], saved[1]  # delivered before a restart
            self._progress[key] = (done, ref)
        if done:
            log.info("resuming outbox message %s after %d delivered part(s)", key, done)
        try:
            return await self._send_parts(
                chat_id,
                parts,
                files,
                markup,
                reply_to,
                key,
                done,
                ref,
                topic=_topic(msg),
                mark=mark,
            )
        except BaseException:
            if key is not None:
                # back to the outbox: remember what it got, across a restart too
                await self._keep(key, mark, self._progress.get(key))
            raise
        finally:
            if key is not None and key not in self._progress and key not in self._finished:
                await self._keep(key, mark, None)  # delivered, or given up on

    async def _send_parts(
        self,
        chat_id: int | str,
        parts: list[str],
        files: list[dict[str, Any]],
        markup: Markup | None,
        reply_to: int | None,
        key: int | None,
        done: int,
        ref: str | None,
        *,
        topic: int | None = None,
        mark: str = "",
    ) -> SendResult:
        """Send ``parts`` then ``files`` from index ``done`` on (see :meth:`send`).

        A part Telegram confirmed with more to follow is saved at once (``mark``: the
        message's fingerprint): killed (SIGKILL, power cut) while a later part was in
        flight, the daemon's retry after the restart sent the confirmed parts again.
        The last part is not: the outbox marks the message sent right after it, and a
        write more per reply would compete with the transcripts' (docs/benchmarks.md)."""
        total = len(parts) + len(files)
        for index in range(done, total):
            last = index == len(parts) - 1
            # One notification a message: its later parts (and files) come silently, as
            # long as its first part of this attempt rang. Before, a reply of four parts
            # made the phone ring four times.
            silent = index > done
            try:
                if index >= len(parts):
                    file = files[index - len(parts)]
                    sent = await self.send_file(chat_id, file, topic, silent=silent)
                else:
                    sent = await self.send_part(
                        chat_id,
                        parts[index],
                        markup=markup if last else None,
                        reply_to=reply_to if index == 0 else None,
                        topic=topic,
                        silent=silent,
                    )
            except PermanentSendError:
                if key is not None:
                    self._progress.pop(key, None)  # the outbox gives up on it
                raise
            ref = f"{sent.chat.id}:{sent.message_id}"
            self.positions.saw(sent.chat.id, sent.message_id)
            if key is not None:
                self._progress[key] = (index + 1, ref)
                if index + 1 < total:
                    await self._keep(key, mark, self._progress[key])
        if key is not None:
            self._progress.pop(key, None)
            if key in self._saved:
                # Saved part by part: kept as all delivered (not dropped) until the next
                # save, which comes once the outbox has marked this message sent (its
                # worker sends one message at a time); killed before that mark, the
                # retry after the restart finds every part delivered and sends none.
                await self._keep(key, mark, (total, ref))
                self._finished.add(key)
        return SendResult(message_ref=ref)


def _topic(msg: OutboundMessage) -> int | None:
    """The forum topic ``msg`` goes to (:func:`bot.events.placement`), if any."""
    return topic_id(msg.metadata.get("topic"))
