"""What a message refers to beyond its own words: whose words a forward carries, and
the message a reply answers (in this chat or another), in short, for the model.

A forward says ``[forwarded from Anna Berg]``; a reply ``[replying to Max: “The ferry
leaves at 7.”]`` (the part the user picked, when they quoted one); a reply to a message
of another chat ``[replying to a message of City News (another chat): “…”]``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from aiogram.types import Message

from bot.graphemes import cut
from channels.telegram.media import content_type, describe_media, in_placeholder
from channels.telegram.service_messages import SERVICE_TYPES

if TYPE_CHECKING:
    from channels.telegram.translate import BotIdentity


def speaks_as_chat(message: Message) -> bool:
    """Whether ``message`` is the words of a chat (``sender_chat``), not of its ``from``:
    an anonymous admin (``from`` a bot), a user posting as a channel, and a linked
    channel's post forwarded into its discussion group, whose ``from`` is Telegram's
    placeholder account 777000 "Telegram" (not a bot: until session 39 such posts were
    recorded as said by a member named "Telegram", and replies to them quoted "Telegram")."""
    chat = message.sender_chat
    if chat is None:
        return False
    user = message.from_user
    return (
        user is None or user.is_bot or chat.type == "channel" or bool(message.is_automatic_forward)
    )


def forward_source(message: Message, me: BotIdentity) -> str | None:
    """Whose words a forwarded message carries (a person's or a chat's name; "your own
    message" for the bot's, "their own message" for the sender's), or None when it is
    not a forward. Before session 26 the bot's own answer forwarded back to it came
    "from My Agent", a name the model did not know for its own."""
    origin = message.forward_origin
    if origin is None:
        return None
    user = getattr(origin, "sender_user", None)
    if user is not None and user.id == me.id:
        return "your own message"
    if user is not None and message.from_user is not None and user.id == message.from_user.id:
        return "their own message"
    return origin_name(origin)


# Forwarded words older than this say when they were written.
FORWARD_DATED_AFTER = timedelta(hours=1)


def forward_written(message: Message) -> str:
    """``", written 2026-11-20 14:03 UTC"`` when a forward carries words older than
    :data:`FORWARD_DATED_AFTER`, else "". Before session 26 the model had no date:
    "the meeting moved to tomorrow", forwarded a week later, read as tomorrow."""
    origin = message.forward_origin
    written = getattr(origin, "date", None)
    sent = message.date
    if not isinstance(written, datetime) or not isinstance(sent, datetime):
        return ""
    if sent - written < FORWARD_DATED_AFTER:
        return ""
    return f", written {written:%Y-%m-%d %H:%M} UTC"


# What our labels say of whose words these are: a name or a title someone chose that
# reads like one of them is quoted as chosen (:func:`chosen_name`).
_OURS = ("your own message", "their own message", "your message", "a message", "a chat",
         "someone", "you", "yourself", "the owner", "the assistant")  # fmt: skip
_OURS_START = ("your ", "their own", "the owner", "the assistant", "someone calling")


def chosen_name(name: str) -> str:
    """A name or title its holder chose, as a label shows it: as it is, unless it reads
    like our own words for whose they are ("your own message", "their own message"):
    then ``someone calling themselves "…"``. Before session 39 a hidden user named "your
    own message" had a forward read as the assistant's own answer, and a member named
    "your message" a reply read as one to the assistant (session 28 did the same for
    group lines)."""
    plain = " ".join(in_placeholder(name).split())
    folded = plain.lower().strip(" \"'\u201c\u201d.:")
    if folded in _OURS or folded.startswith(_OURS_START):
        return f'someone calling themselves "{plain}"'
    return name


def origin_name(origin: Any) -> str:
    """Who wrote a message from elsewhere (a ``MessageOrigin``): a person or a chat,
    by the name they chose (:func:`chosen_name`)."""
    user = getattr(origin, "sender_user", None)
    if user is not None:
        return chosen_name(str(user.full_name))
    name = getattr(origin, "sender_user_name", None)
    if name:
        return chosen_name(str(name))
    chat = getattr(origin, "chat", None) or getattr(origin, "sender_chat", None)
    title = getattr(chat, "title", None) or getattr(chat, "username", None)
    signature = getattr(origin, "author_signature", None)
    if title and signature:
        return chosen_name(f"{signature} ({title})")
    return chosen_name(str(title or signature)) if title or signature else "someone"


QUOTE_CHARS = 120  # of the message replied to: enough to tell which one it was
# What a message of another chat holds besides words (ExternalReplyInfo has no text).
EXTERNAL_KINDS = ("photo", "video", "document", "audio", "voice", "video_note", "animation",
                  "sticker", "story", "poll", "location", "venue", "contact")  # fmt: skip


def _excerpt(quote: str) -> str:
    excerpt = in_placeholder(quote)
    if len(excerpt) > QUOTE_CHARS:
        excerpt = cut(excerpt, QUOTE_CHARS).rsplit(" ", 1)[0] + "…"
    return excerpt


def external_reply_context(message: Message) -> str | None:
    """``[replying to a message of News (another chat): “…”]`` for a reply to a message
    of another chat (Telegram's "Reply in another chat": a channel post asked about in
    the bot's chat), or None. Telegram sends no text of that message, only the part
    quoted, if any; before, the owner's "what do you make of this?" came without a word
    of what "this" was."""
    ext = message.external_reply
    if ext is None:
        return None
    who = origin_name(ext.origin)
    chat = getattr(ext.chat, "title", None) or getattr(ext.chat, "username", None)
    if chat and chat not in who:
        who = f"{who} in {chat}"
    kind = next((k for k in EXTERNAL_KINDS if getattr(ext, k, None)), None)
    what = f"a {kind.replace('_', ' ')}" if kind else "a message"
    quote = message.quote.text if message.quote is not None else ""
    said = f": \u201c{_excerpt(quote)}\u201d" if quote.strip() else ""
    return f"[replying to {what} of {in_placeholder(who)} (another chat){said}]"


def reply_context(message: Message, me: BotIdentity) -> str | None:
    """``[replying to Max: “…”]`` for a reply, so it can be told what it answers once
    that message has left the working context; None when it is no reply (a forum
    topic's messages all answer its service message)."""
    original = message.reply_to_message
    if original is None or content_type(original) in SERVICE_TYPES:
        return None
    quote = message.quote.text if message.quote is not None else None  # a part picked
    if quote is None:
        media = describe_media(original)
        words = original.text if original.text is not None else original.caption or ""
        quote = f"{media[0] if media else ''} {words}"
    excerpt = _excerpt(quote)
    author = original.from_user
    if author is not None and author.id == me.id:
        who = "your message"
    elif author is not None and message.from_user is not None and author.id == message.from_user.id:
        # Not by name: in a private chat the model may not know the name is the user's
        # own, and "[replying to Olga Berg: …] I meant 6" read as someone else's words.
        who = "their own message"
    elif speaks_as_chat(original) and original.sender_chat is not None:
        who = chosen_name(original.sender_chat.title) if original.sender_chat.title else "a chat"
    else:
        who = chosen_name(author.full_name) if author is not None else "a message"
    return f"[replying to {in_placeholder(who)}: \u201c{excerpt}\u201d]"
