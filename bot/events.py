"""Channel-neutral events: what channels hand to the core and what the core hands back.

These frozen dataclasses are the only types that cross the boundary between
``channels/`` and ``bot/``. No aiogram, IMAP or aiohttp object ever travels in them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal

ChannelName = str  # "web" | "telegram" | "email" | "test" (free-form so tests can add fakes)

_EMPTY: Mapping[str, Any] = MappingProxyType({})
# The text of a message that said nothing, as the channels store it: every such Telegram
# message (no text, no caption), and the owner's mail of no subject and a blank body. The
# transcript then shows that something came, not an empty turn.
EMPTY_MESSAGE_LABEL = "[empty message]"

# In a message's metadata (and so its turn's): when it was written, as the channel says
# (Telegram's date, an e-mail's Date header), ISO UTC. The turn's ``timestamp`` stays its
# arrival: turns are appended in the order they come, and idle timers, the conversation
# list and the group budgets go by what happened here. A message written well before it
# came (the daemon was down) is labelled so for the model (bot/brain/late_turns.py).
SENT_AT = "sentAt"


def utcnow() -> datetime:
    """Timezone-aware now in UTC (every timestamp we store is UTC ISO-8601)."""
    return datetime.now(UTC)


# How far ahead of the clock a stored time may be and still be "now" (a slewed clock, a
# stamp taken a moment before the read).
CLOCK_SLACK = timedelta(minutes=5)


def not_after() -> str:
    """The latest stored time an hourly count takes in: now plus :data:`CLOCK_SLACK`.
    A row stamped later was written before the clock was set back (an RTC ahead at boot,
    then NTP): counted, it kept an hourly budget spent for as long as the set-back
    (a day's set-back: a day without answers), session 40."""
    return iso(utcnow() + CLOCK_SLACK)


def iso(ts: datetime) -> str:
    """ISO-8601 with a ``Z`` suffix and millisecond precision, like the seed's examples."""
    if ts.tzinfo is not UTC:
        ts = ts.astimezone(UTC)
    # formatted by hand: 2.3 us against strftime's 4.8 (three timestamps per message and
    # its reply, docs/benchmarks.md ingest "Session 4")
    return (
        f"{ts.year:04d}-{ts.month:02d}-{ts.day:02d}T{ts.hour:02d}:{ts.minute:02d}:"
        f"{ts.second:02d}.{ts.microsecond // 1000:03d}Z"
    )


@dataclass(frozen=True)
class Attachment:
    """Metadata of a non-text part (photo, document, voice, mail attachment).

    The bytes are never passed to the core: only what a human needs to know it exists.
    """

    kind: str  # "photo", "document", "voice", "sticker", "location", "file", ...
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    description: str | None = None  # e.g. "52.52, 13.40" for a location, emoji for a sticker
    # The channel's own handle on the file (Telegram's file_id), by which that channel can
    # send it on (the owner's /reply with a photo) without the bytes ever passing here.
    ref: str | None = None


@dataclass(frozen=True)
class InboundMessage:
    """A message received on a channel, already translated from the wire format.

    ``sender_id`` is the channel-native identity (Telegram numeric user id, e-mail
    address, "owner" for the authenticated dashboard). ``sender_aliases`` carries other
    identities of the same sender (a Telegram ``@username``). ``chat_id`` says where a
    reply goes (Telegram chat id, the sender's address). ``message_id`` is unique per
    channel and is used to drop duplicates after a restart.
    """

    channel: ChannelName
    sender_id: str
    text: str
    message_id: str
    chat_id: str
    sender_name: str | None = None
    sender_aliases: tuple[str, ...] = ()
    received_at: datetime = field(default_factory=utcnow)
    attachments: tuple[Attachment, ...] = ()
    # Groups (seed 000 "Group chats"): one conversation per group.
    group_id: str | None = None
    group_title: str | None = None
    # False: recorded as context, never answered (a group message not meant for us, an
    # automatic mail: a bounce or an out-of-office reply, where answering loops)
    addressed: bool = True
    # True: an earlier run of ours handled it, and the channel hands it over again (a
    # mail marked handled on the server, above a cursor an older backup took back):
    # recorded where it is missing, never answered, acknowledged nor escalated. Sent
    # with ``addressed`` False.
    replayed: bool = False
    # Threading (e-mail): our own reference and the ones it points back to, nearest first.
    message_ref: str | None = None
    thread_refs: tuple[str, ...] = ()
    subject: str | None = None
    # The channel's verdict on whether the sender identity is authenticated (DKIM/SPF for
    # mail). None means the channel has no such notion and the identity is trusted as is.
    identity_verified: bool | None = None
    # Web: the dashboard names the conversation it is writing into.
    conversation_id: str | None = None
    # Anything else worth keeping in the transcript (full mail body, edit marker, ...).
    # ``readers``: who besides the sender will read the reply (e-mail reply-all's other
    # recipients); the owner's reply then recalls this conversation only.
    # ``thread_index``: the e-mail's Outlook thread (the channel's reference to it), which
    # the core keeps with the turn and hands back with the reply, as ``reply_to``.
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


# In an OutboundMessage's metadata: the owner's own words to a third party (``/reply``,
# the dashboard's Reply) go to them alone, where their message asked to be answered:
# never reply-all to the others it went to, whom the owner was never told of (session 40).
TO_PARTY_ALONE = "to_party_alone"
# ... unless the owner asks for everyone (``/replyall``, the dashboard's Reply with "to
# all"): the channel answers as a mail client's reply-all does, to the sender (where
# their message asked to be answered) and its To and Cc but our own address, each once,
# whatever the case of its letters; never when we were only blind-copied on it (the
# others would learn that the owner had it). Session 41: the owner could not answer all.
TO_ALL = "to_all"


@dataclass(frozen=True)
class OutboundMessage:
    """A message the core asks a channel to deliver.

    ``kind`` tells the channel what it is so it can render it (an escalation gets
    buttons on Telegram, for example). ``actions`` are (label, command) pairs such as
    ("Trust", "/trust ab12cd"): a channel that can show buttons shows them, a channel
    that cannot lists the commands in text.
    """

    channel: ChannelName
    chat_id: str
    text: str
    kind: Literal["reply", "command", "escalation", "acknowledgement", "notice"] = "reply"
    conversation_id: str | None = None
    party_id: str | None = None
    in_reply_to: str | None = None  # channel message id / Message-ID being answered
    thread_refs: tuple[str, ...] = ()
    subject: str | None = None
    actions: tuple[tuple[str, str], ...] = ()
    outbox_id: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # Set by the outbox, stored with its row: the same for every retry of the row, never
    # the same for two rows, also across a lost state.db (whose row ids start again at
    # 1): the row's dedup key (a transcript turn, a received message), else a random
    # token. A channel derives its own message ids from it (e-mail's Message-ID).
    send_key: str | None = None

    @property
    def as_written(self) -> bool:
        """Whether the text is shown as written, never read as Markdown: an escalation
        quotes a third party word for word (a planted link or heading would look like
        the assistant's own), a command's answer quotes stored text ("*args" stays
        "*args"), and a readout (the offline brain's recall, an apology) is marked
        ``plain`` by the core. Every channel that renders Markdown asks this."""
        return self.kind in ("escalation", "command") or bool(self.metadata.get("plain"))


@dataclass(frozen=True)
class SendResult:
    """What a channel reports after sending: its own id for the message (e.g. Message-ID)."""

    message_ref: str | None = None
    # Recipients the channel could not address (the others got the message), and why:
    # the owner is told (bot/send_failures.py), not only the log.
    left_out: tuple[str, ...] = ()
    left_out_reason: str = ""


@dataclass(frozen=True)
class StreamEvent:
    """A piece of a reply in progress, for channels that can show streaming."""

    conversation_id: str
    turn_number: int
    delta: str
    done: bool = False


_SURROGATE = re.compile("[\ud800-\udfff]")
_SCRUBBED_FIELDS = (
    "sender_id",
    "text",
    "message_id",
    "chat_id",
    "sender_name",
    "group_id",
    "group_title",
    "message_ref",
    "subject",
    "conversation_id",
    "sender_aliases",
    "thread_refs",
    "metadata",
)


def placement(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Where in its chat a message was: the ``topic`` of a chat with topics (a Telegram
    forum group's thread). Everything said back to it goes there, replies, notices and
    command answers alike; without it they landed in the chat's general topic."""
    topic = metadata.get("topic")
    return {"topic": topic} if isinstance(topic, int | str) and topic != "" else {}


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (valid in JSON, not encodable) as U+FFFD; the
    very same string when it has none."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub("\ufffd", text)


def _clean(value: Any) -> Any:
    """``value`` with lone surrogates replaced; the very same object when it has none."""
    if not value:
        return value  # None, "", (), an empty mapping: most fields of most messages
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, Mapping):
        items = {k: _clean(v) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    if isinstance(value, list | tuple):
        cleaned = [_clean(v) for v in value]
        changed = any(c is not v for c, v in zip(cleaned, value, strict=True))
        return type(value)(cleaned) if changed else value
    return value


def scrubbed(message: InboundMessage) -> InboundMessage:
    """``message`` with lone UTF-16 surrogates replaced by U+FFFD (the same object when
    it has none).

    JSON lets a client send ``"\\ud800"`` alone (a browser, the loopback API); Python keeps
    it in a ``str`` but no UTF-8 file or SQLite text can hold it, so the transcript append
    failed and the message was lost."""
    changes: dict[str, Any] = {}
    for name in _SCRUBBED_FIELDS:
        value = getattr(message, name)
        cleaned = _clean(value)
        if cleaned is not value:
            changes[name] = cleaned
    return replace(message, **changes) if changes else message
