"""Telegram messages -> :class:`bot.events.InboundMessage`, faithfully and never crashing.

This module decides nothing about owners or strangers (the router does); it only says
who wrote, where, what (text or a clear placeholder for media), and, in a group, whether
the bot was addressed (mentioned, replied to, or the group set to ``respond: always``).
Groups that are not on ``channels.telegram.groups`` are dropped here, with a log line.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiogram.types import Chat, Message, MessageEntity

from bot.command_syntax import COMMANDS, parse_command
from bot.config.channels import TelegramGroupConfig
from bot.events import (
    EMPTY_MESSAGE_LABEL,
    SENT_AT,
    Attachment,
    InboundMessage,
    iso,
    utcnow,
)
from bot.identity import ANONYMOUS_ADMIN, ANONYMOUS_ADMIN_NAME
from channels.telegram.keyboards import command_from_prompt
from channels.telegram.media import content_type, describe_media, in_placeholder
from channels.telegram.quoting import (
    external_reply_context,
    forward_source,
    forward_written,
    reply_context,
    speaks_as_chat,
)
from channels.telegram.service_messages import SERVICE_TYPES

log = logging.getLogger("my_agent.telegram")

GROUP_TYPES = frozenset({"group", "supergroup"})
# A shape aiogram cannot name (a newer Bot API than it knows): perhaps a person's words,
# perhaps a notice of the chat's (a service message of that newer API). Recorded as
# "[unknown]" everywhere; in a private chat it is answered (the owner sent something:
# the assistant may say it cannot read it), in a ``respond: always`` group only when it
# is addressed all the same (a reply to the bot, a mention). Before session 27 every
# such notice in a group was answered as if a member had said "[unknown]".
UNKNOWN_TYPE = "unknown"

_COMMAND = re.compile(r"^/(\w{1,64})@(\w{3,64})\b")


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is (from getMe): needed to recognise mentions and replies to it."""

    id: int
    username: str | None

    def mention_pattern(self) -> re.Pattern[str] | None:
        if not self.username:
            return None
        return re.compile(rf"(?<![\w@])@{re.escape(self.username)}\b", re.IGNORECASE)


def _entity_text(text: str, entity: MessageEntity) -> str:
    # Entity offsets count UTF-16 code units, not Python characters. A lone surrogate
    # (JSON can carry one) is one unit too: without "surrogatepass" the encoding raised,
    # and every message holding one failed five times before it was kept as unreadable.
    raw = text.encode("utf-16-le", errors="surrogatepass")
    return raw[entity.offset * 2 : (entity.offset + entity.length) * 2].decode(
        "utf-16-le", errors="replace"
    )


def _with_link_targets(text: str, entities: list[MessageEntity] | None) -> str:
    """``text`` with each hidden link's address after its words: Telegram shows "the
    article", the address is only in the ``text_link`` entity (forwarded posts, formatted
    messages), and without it the assistant could not tell where it points."""
    links = [e for e in entities or () if e.type == "text_link" and e.url]
    if not links:
        return text
    raw = text.encode("utf-16-le", errors="surrogatepass")
    for entity in sorted(links, key=lambda e: e.offset + e.length, reverse=True):
        if entity.url and entity.url not in _entity_text(text, entity):
            end = (entity.offset + entity.length) * 2  # UTF-16 units, two bytes each
            raw = raw[:end] + f" ({entity.url})".encode("utf-16-le", "surrogatepass") + raw[end:]
    return raw.decode("utf-16-le", errors="surrogatepass")  # the router scrubs them


def _mentions_bot(message: Message, text: str, me: BotIdentity) -> bool:
    entities = message.entities or message.caption_entities or []
    for entity in entities:
        if entity.type == "text_mention" and entity.user and entity.user.id == me.id:
            return True
        if entity.type in ("mention", "bot_command") and me.username:
            if _entity_text(text, entity).lower().endswith("@" + me.username.lower()):
                return True
    pattern = me.mention_pattern()
    return bool(pattern and pattern.search(text))


def _normalise_command(text: str, me: BotIdentity) -> tuple[str, bool | None]:
    """Strip ``@ourbot`` from ``/cmd@ourbot``; report whether a command was aimed at us
    (True), at another bot (False) or whether there is no addressed command (None)."""
    m = _COMMAND.match(text)
    if not m:
        return text, None
    if me.username and m.group(2).lower() == me.username.lower():
        return f"/{m.group(1)}{text[m.end() :]}", True
    return text, False


def _our_bare_command(text: str) -> bool:
    """``/help``, ``/new``: one of this bot's commands without ``@ourbot``. Telegram's
    apps add the bot's name only when a group has several bots; with this one alone,
    the command picked from its menu (``/help``) comes bare. Before session 26 such a
    command was taken for chat in a ``respond: mention`` group: recorded, never run.
    Not ``/start``, which every bot has: bare in a group it is rarely this one's."""
    command = parse_command(text)
    return command is not None and command[0] in COMMANDS


def message_identity(message: Message, edited: bool) -> tuple[str, datetime]:
    """The id and time the core records ``message`` under. An edit is its own message,
    dated when it was made: its id adds the edit's date and a hash of what it says.
    With the date alone, two edits within one second had one id and the core dropped
    the second as a duplicate (the owner's correction lost); a redelivered edit (its
    confirmation lost) keeps its id and is still dropped."""
    message_id = f"{message.chat.id}:{message.message_id}"
    if not edited:
        return message_id, message.date if isinstance(message.date, datetime) else utcnow()
    stamp = message.edit_date or int(utcnow().timestamp())
    said = (message.text or message.caption or "").encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(said).hexdigest()[:8]
    return f"{message_id}:edit:{stamp}:{digest}", datetime.fromtimestamp(stamp, UTC)


def allowed_group(
    chat: Chat, groups: Mapping[str, TelegramGroupConfig]
) -> TelegramGroupConfig | None:
    """The configuration of a group chat on the allow-list (by id, or by the ``@name`` of
    a public group), None when it is not on it."""
    found = groups.get(str(chat.id))
    if found is None and chat.username:
        found = groups.get("@" + chat.username.lower())
    return found


def translate_message(
    message: Message,
    *,
    me: BotIdentity,
    groups: Mapping[str, TelegramGroupConfig],
    edited: bool = False,
) -> InboundMessage | None:
    """The event for ``message``, or None when it must be skipped (logged here)."""
    chat = message.chat
    ct = content_type(message)
    if ct in SERVICE_TYPES:
        log.debug("skipping service message %s in chat %s", ct, chat.id)
        return None
    if edited and message.location is not None and message.location.live_period:
        # A live location is edited as the phone moves, every few seconds for up to a
        # day: before, each move was an "[edited] [location …]" message, recorded and
        # answered. The sharing itself was recorded when it began.
        log.debug("skipping a live location's move in chat %s", chat.id)
        return None
    user = message.from_user
    aliases: tuple[str, ...]
    # An admin who stays anonymous writes as the group itself (``sender_chat`` is the
    # chat, ``from`` Telegram's GroupAnonymousBot): every such admin has the group's id,
    # and the group's title, which its admins choose, said nothing of who wrote.
    anonymous = message.sender_chat is not None and message.sender_chat.id == chat.id
    if message.sender_chat is not None and speaks_as_chat(message):
        sender_id, aliases = str(message.sender_chat.id), ()
        sender_name = ANONYMOUS_ADMIN_NAME if anonymous else message.sender_chat.title
    elif user is not None:
        sender_id, sender_name = str(user.id), user.full_name
        aliases = (f"@{user.username}",) if user.username else ()
    else:
        log.info("skipping message %s in chat %s without a sender", message.message_id, chat.id)
        return None

    group_cfg: TelegramGroupConfig | None = None
    if chat.type in GROUP_TYPES:
        group_cfg = allowed_group(chat, groups)
        if group_cfg is None:
            # normally dropped before, by channels.telegram.ignored_groups (said hourly)
            log.debug("ignoring a message in group %s: not in channels.telegram.groups", chat.id)
            return None
    elif chat.type != "private":
        log.info("ignoring a message in %s chat %s", chat.type, chat.id)
        return None

    media = describe_media(message)
    if message.text is not None:
        body = _with_link_targets(message.text, message.entities)
    else:
        body = _with_link_targets(message.caption or "", message.caption_entities)
    body, command_for_us = _normalise_command(body, me)
    attachments: tuple[Attachment, ...] = ()
    if media is not None:
        placeholder, attachment = media
        body = f"{placeholder} {body}".strip()
        attachments = (attachment,)
    source = forward_source(message, me)
    if source is not None:
        # Someone else's words, passed on: never the sender's own (nor their command).
        label = f"forwarded from {in_placeholder(source)}{forward_written(message)}"
        body = f"[{label}] {body}".strip()

    reply_to = message.reply_to_message
    replied_to_bot = bool(reply_to and reply_to.from_user and reply_to.from_user.id == me.id)
    metadata: dict[str, Any] = {"telegram_message_id": message.message_id, "chat_type": chat.type}
    if anonymous:
        metadata[ANONYMOUS_ADMIN] = True  # never the owner nor a contact (bot.identity)
    if reply_to is not None:
        metadata["reply_to"] = f"{chat.id}:{reply_to.message_id}"
        prompt_cmd = command_from_prompt(reply_to.text) if replied_to_bot else None
        context = reply_context(message, me)
        if prompt_cmd and message.text is not None and _our_bare_command(body):
            # One of our commands typed under the prompt (Telegram keeps the reply header
            # on the owner's next message): it runs. Before session 40 "/block p..."
            # went to the stranger as the owner's answer, and nothing was blocked.
            pass
        elif prompt_cmd:
            # The answer to a Reply button, whatever it holds: a photo's caption is its
            # words (the /reply command tells the owner what it cannot pass on); before,
            # anything but text went to the assistant.
            words = message.text if message.text is not None else message.caption or ""
            body = f"{prompt_cmd} {words.strip()}".strip()
        elif context is not None and not body.startswith("/"):  # a command stays one
            body = f"{context} {body}"
    elif message.external_reply is not None and not body.startswith("/"):
        context = external_reply_context(message)
        body = f"{context} {body}" if context else body
    if source is not None:
        metadata.update(forwarded=True, forwarded_from=source)
    if message.is_topic_message and message.message_thread_id is not None:
        # a forum group's topic: what is said back goes there (bot.events.placement)
        metadata["topic"] = message.message_thread_id
    if message.media_group_id:
        metadata["media_group"] = message.media_group_id  # an album (channels/.../albums.py)
    message_id, received = message_identity(message, edited)
    if message.edit_date if edited else message.date:
        # When it was written (Telegram's date, an edit's its own): Telegram keeps
        # updates a day, and after an outage they come hours late. Before session 40
        # the date stayed in ``received_at``, which nothing past the spool reads: the
        # owner's "remind me in 10 minutes" was answered as just said.
        metadata[SENT_AT] = iso(received)
    if edited:
        metadata.update(edited=True, original_message_id=f"{chat.id}:{message.message_id}")
        # its words without our label: what the owner is told a stranger changed an
        # escalated message to (bot/party_edits.py)
        metadata["new_text"] = body or EMPTY_MESSAGE_LABEL
        if not body.startswith("/") or source is not None:
            body = f"[edited] {body}".strip()
        # else a message edited into a command (often a typo fixed: "/model opsu") is
        # run as one, once: its id carries the edit's date, so a redelivered edit is
        # the same command and the core's dedup drops it. Before, "[edited] /model
        # opus" went to the model and nothing switched.
    if not body:
        body = EMPTY_MESSAGE_LABEL

    # ``/new@other_bot`` is another bot's, even where everything else is ours: in a
    # group set to ``respond: always`` and in a private chat too (pasted from elsewhere,
    # or typed by habit). Before, a private chat was always addressed, and the router ran
    # the other bot's /model or /new here. It is recorded, not answered. Asked of the
    # body as it is now: a forward, a caption under a placeholder, the words of a Reply
    # prompt's answer are no command.
    addressed = _normalise_command(body, me)[1] is not False
    group_id = group_title = None
    if group_cfg is not None:
        group_id, group_title = str(chat.id), chat.title or group_cfg.title
        addressed = (
            addressed
            and (
                (group_cfg.respond == "always" and ct != UNKNOWN_TYPE)
                or replied_to_bot
                or command_for_us is True
                or (command_for_us is None and _our_bare_command(body))
                or _mentions_bot(message, message.text or message.caption or "", me)
            )
            # never a bot (no loops); an anonymous admin writes as the group, through
            # Telegram's GroupAnonymousBot, and is a person
            and not (user is not None and user.is_bot and message.sender_chat is None)
        )
    return InboundMessage(
        channel="telegram",
        sender_id=sender_id,
        sender_name=sender_name,
        sender_aliases=aliases,
        text=body,
        message_id=message_id,
        chat_id=str(chat.id),
        received_at=received,
        attachments=attachments,
        group_id=group_id,
        group_title=group_title,
        addressed=addressed,
        message_ref=f"{chat.id}:{message.message_id}",
        metadata=metadata,
    )
