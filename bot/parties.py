"""Third parties' records, as the index mirrors them (seed 000 "External
Communications").

The model of a party (:class:`PartyRecord`, its handle, its tier from the config) and
:func:`apply_party_lines`, which reflects a party file's lines in the ``external_*``
tables: the one projection both :class:`bot.external.ExternalStore` (as it appends) and
start-up recovery (as it replays, :mod:`bot.recovery`) use. Pure functions of their
arguments and a connection; the files themselves are the store's.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.brain.cost import stored_input
from bot.config import AppConfig
from bot.db import SyncConn
from bot.events import SENT_AT, iso, utcnow
from bot.graphemes import cut
from bot.party_edits import EDIT_MARK
from bot.transcript_lines import Line

TIERS = ("known", "untrusted", "blocked")


# What the index keeps of one message to or from a party (the dashboard's list, the
# restricted brain's history): their file keeps up to trust.party_message_max_chars.
INDEX_MESSAGE_CHARS = 8000


def cut_text(text: str, limit: int, label: str) -> str:
    """``text``, or its first ``limit`` characters and a line saying how many more
    there were and ``label`` (where they are, or that they were not kept)."""
    if len(text) <= limit:
        return text
    kept = cut(text, limit)
    return f"{kept}\n[cut: {len(text) - len(kept)} more characters {label}]"


# Characters that change how text around them reads without showing themselves: bidi
# embeddings, overrides and isolates (U+202E shows "gpj.exe" as "exe.jpg"), marks,
# zero-width spaces, controls. A stranger's name and words must not rearrange our lines.
# The zero-width joiner and non-joiner stay: emoji sequences (a family) and Persian or
# Indic words are spelled with them, and neither moves text.
_UNSEEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u202a-\u202e\u2060-\u2069\ufeff]"
)
# The longest name shown for a party: a name of pages pushed our own lines out of view.
NAME_CHARS = 64


# Tag characters (U+E0000-E007F) draw nothing yet spell ASCII a model reads ("ASCII
# smuggling": a stranger's name or message carrying hidden instructions). Their one
# use is a subdivision flag (the black flag, tags, a cancel tag: England's), kept whole.
_TAG_FLAG = re.compile("\U0001f3f4[\U000e0020-\U000e007e]{1,30}\U000e007f")
_TAG = re.compile("[\U000e0000-\U000e007f]")
# A variation selector picks how the character before it is drawn (an emoji's colour
# form, an ideograph's variant): one is enough. A run of them after one character draws
# nothing and can hold any bytes (one selector per byte).
_SELECTOR_RUN = re.compile(
    "([\ufe00-\ufe0f\U000e0100-\U000e01ef])[\ufe00-\ufe0f\U000e0100-\U000e01ef]+"
)


def visible(text: str) -> str:
    """``text`` without :data:`_UNSEEN` characters (line breaks and tabs stay), tag
    characters outside a flag, and variation selectors after the first of a run."""
    text = _UNSEEN.sub("", text)
    if _TAG.search(text):
        flags = _TAG_FLAG.findall(text)
        parts = [_TAG.sub("", part) for part in _TAG_FLAG.split(text)]
        text = "".join(p + f for p, f in zip(parts, [*flags, ""], strict=True))
    return _SELECTOR_RUN.sub(r"\1", text)


# What an escalation quotes of a message with nothing to see: a message of zero-width
# characters was quoted as an empty pair of quotes, as if the party had sent nothing.
NO_VISIBLE_TEXT = "(no visible text)"
# Blank letters that draw nothing (Hangul fillers, the braille blank): not Cf or Z*.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def shows_nothing(text: str) -> bool:
    """Whether ``text`` draws nothing: only white space, controls, format characters
    (the zero-width joiners :func:`visible` keeps) and blank letters."""
    return all(
        c in _BLANK_LETTERS or unicodedata.category(c) in ("Cc", "Cf", "Zs", "Zl", "Zp")
        for c in text
    )


def shown_name(name: str) -> str:
    """A name a party chose, as our lines show it: visible, on one line, at most
    :data:`NAME_CHARS` characters (cut with an ellipsis)."""
    name = " ".join(visible(name).split())
    return name if len(name) <= NAME_CHARS else cut(name, NAME_CHARS - 1) + "\u2026"


def party_handle(channel: str, party_key: str) -> str:
    """A short stable id the owner can type: ``p`` + 7 hex digits."""
    return "p" + hashlib.sha1(f"{channel}:{party_key}".encode()).hexdigest()[:7]


@dataclass
class PartyRecord:
    id: str
    channel: str
    party_key: str
    display_name: str | None
    chat_id: str | None
    tier: str
    tier_source: str
    created: str
    updated: str
    message_count: int = 0
    last_escalation: str | None = None
    context_reset_at: int = 0
    model: str | None = None
    # what the model's answers to them cost, all told (bot/schema_party_costs.py)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_total: float = 0.0

    @property
    def who(self) -> str:
        """The name, with the address beside it on e-mail: a display name is whatever the
        sender typed ("Your Bank", the owner's own name); the address is who it is."""
        name = shown_name(self.display_name or "") or self.party_key
        if self.channel == "email" and name.lower() != self.party_key.lower():
            return f"{name} <{self.party_key}>"
        return name

    @property
    def label(self) -> str:
        return f"{self.who} ({self.channel})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "channel": self.channel,
            "party": self.party_key,
            "name": self.display_name,
            "tier": self.tier,
            "tierSource": self.tier_source,
            "created": self.created,
            "updated": self.updated,
            "messageCount": self.message_count,
            "lastEscalation": self.last_escalation,
            "cost": round(self.cost_total, 6),
            "tokensIn": self.tokens_in,
            "tokensOut": self.tokens_out,
        }


PARTY_COLUMNS = (
    "id, channel, party_key, display_name, chat_id, tier, tier_source, created, "
    "updated, message_count, last_escalation, context_reset_at, model, tokens_in, tokens_out, "
    "cost_total"
)


def party_from_row(row: Any) -> PartyRecord:
    """A :class:`PartyRecord` from a row of ``SELECT {PARTY_COLUMNS}``."""
    return PartyRecord(*row)


def configured_tier(
    config: AppConfig, channel: str, party_key: str, aliases: Sequence[str] = ()
) -> str | None:
    """The tier ``trust.contacts`` gives this party (identities normalised), if any:
    by its key, else by one of its ``aliases`` (``"@alice": known`` for a Telegram user
    whose key is the numeric id)."""
    names = [party_key, *(normalise_identity(channel, a) for a in aliases if a)]
    contacts = {
        normalise_identity(channel, identity): tier
        for identity, tier in config.trust.contacts.get(channel, {}).items()
    }
    for name in names:
        if name in contacts:
            return contacts[name]
    return None


def normalise_identity(channel: str, identity: str) -> str:
    """Canonical form of an identity on a channel (compared case-insensitively)."""
    value = identity.strip()
    if channel == "email":
        from email.utils import parseaddr

        value = parseaddr(value)[1] or value
        return value.lower()
    if channel == "telegram":
        return value.lower() if value.startswith("@") else value.lstrip("+")
    return value.lower()


def apply_party_lines(
    conn: SyncConn, party_id: str, lines: list[Line], config: AppConfig
) -> list[int]:
    """Reflect party-record lines in the tables; returns escalation row ids created."""
    created: list[int] = []
    for line in lines:
        _apply_line(conn, party_id, line, config, created)
        _add_spent(conn, party_id, line)
    return created


def _add_spent(conn: SyncConn, party_id: str, line: Line) -> None:
    """Add what a line says the model spent (``usage``, ``cost``: the model's answer on
    its ``out`` line, one made and dropped on its ``refused`` event, a rescued record's
    totals on its ``meta`` line) to the party's sums, counted as a conversation's turns
    are (:func:`bot.brain.cost.stored_input`: the cache's tokens are input)."""
    usage, cost = line.get("usage"), line.get("cost")
    if not isinstance(usage, Mapping) and not isinstance(cost, int | float):
        return
    tokens_in = stored_input(usage) if isinstance(usage, Mapping) else 0
    tokens_out = int(usage.get("output", 0) or 0) if isinstance(usage, Mapping) else 0
    conn.execute(
        "UPDATE external_parties SET tokens_in = tokens_in + ?, tokens_out = tokens_out + ?,"
        " cost_total = cost_total + ? WHERE id = ?",
        (tokens_in, tokens_out, float(cost) if isinstance(cost, int | float) else 0.0, party_id),
    )


def _apply_line(
    conn: SyncConn, party_id: str, line: Line, config: AppConfig, created: list[int]
) -> None:
    """Reflect one line (:func:`apply_party_lines`); an escalation's row id is added to
    ``created``."""
    kind, ts = line.get("type"), line.get("timestamp") or iso(utcnow())
    if kind == "meta":
        conn.execute(
            "INSERT OR IGNORE INTO external_parties (id, channel, party_key, display_name,"
            " chat_id, tier, tier_source, created, updated) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                party_id,
                line.get("channel"),
                line.get("party"),
                line.get("name"),
                line.get("chatId"),
                line.get("tier", "untrusted"),
                line.get("tierSource", "default"),
                line.get("created", ts),
                line.get("created", ts),
            ),
        )
        # Config may have changed since the record was created: config beats default.
        configured = configured_tier(config, str(line.get("channel")), str(line.get("party")))
        if configured:
            conn.execute(
                "UPDATE external_parties SET tier = ?, tier_source = 'config' "
                "WHERE id = ? AND tier_source != 'owner'",
                (configured, party_id),
            )
    elif kind == "message":
        cur = conn.execute(
            "INSERT INTO external_messages (party_id, direction, content, timestamp,"
            " message_ref, kind, sent_at, answers) VALUES (?,?,?,?,?,?,?,?)",
            (
                party_id,
                line.get("direction", "in"),
                cut_text(
                    str(line.get("content", "")),
                    INDEX_MESSAGE_CHARS,
                    "in the party's file",
                ),
                ts,
                line.get("messageRef"),
                # the model's answer to a known party (its line names what it
                # answers): counted apart, for trust.known_replies_per_hour
                "answer" if line.get("answers") else line.get("kind", "message"),
                # when it was written, as the channel said (a line written before
                # session 42 has none: bot/schema_party_messages.py)
                sent_at_of(line),
                # the message of theirs it answers, kept for a record rebuilt from the
                # index (bot/party_rescue.py, session 42)
                str(line["answers"]) if line.get("answers") else None,
            ),
        )
        del cur
        if line.get("handles"):
            conn.execute(
                "UPDATE external_parties SET meta = json_set(meta, '$.handles', json(?))"
                " WHERE id = ?",
                (json.dumps(line["handles"]), party_id),
            )
        conn.execute(
            "UPDATE external_parties SET updated = ?, message_count = message_count + ?,"
            " display_name = coalesce(?, display_name), chat_id = coalesce(?, chat_id)"
            " WHERE id = ?",
            (
                ts,
                1 if line.get("direction") == "in" else 0,
                line.get("name"),
                line.get("chatId"),
                party_id,
            ),
        )
    elif kind == "event":
        event = line.get("event")
        if event == "tier":
            conn.execute(
                "UPDATE external_parties SET tier = ?, tier_source = ? WHERE id = ?",
                (line.get("tier"), line.get("source", "owner"), party_id),
            )
        elif event == "escalation":
            cur = conn.execute(
                "INSERT INTO escalations (party_id, created, text) VALUES (?,?,?)",
                (party_id, ts, line.get("text", "")),
            )
            created.append(int(cur.lastrowid))
            if not line.get(EDIT_MARK):  # an edit's notice holds back no new message
                conn.execute(
                    "UPDATE external_parties SET last_escalation = ? WHERE id = ?",
                    (ts, party_id),
                )
        elif event == "resolved":
            conn.execute(
                "UPDATE escalations SET status = 'resolved', resolution = ? "
                "WHERE party_id = ? AND status = 'pending'",
                (line.get("resolution"), party_id),
            )
        elif event == "withdrawn" and line.get("at"):
            # the model's answer made at ``at``, taken back unsent (the owner blocked
            # them, bot.known_answers): out of the exchange the model reads, marked on
            # the dashboard, still counted in the hourly budget (it was paid)
            conn.execute(
                "UPDATE external_messages SET kind = 'withdrawn' WHERE id = (SELECT max(id)"
                " FROM external_messages WHERE party_id = ? AND direction = 'out'"
                " AND kind = 'answer' AND timestamp = ?)",
                (party_id, line["at"]),
            )
        elif event == "reset":
            row = conn.execute(
                "SELECT coalesce(max(id), 0) FROM external_messages WHERE party_id = ?",
                (party_id,),
            ).fetchone()
            conn.execute(
                "UPDATE external_parties SET context_reset_at = ? WHERE id = ?",
                (row[0], party_id),
            )


def sent_at_of(fields: Mapping[str, Any]) -> str | None:
    """When a message says it was written (its ``sentAt``, :data:`bot.events.SENT_AT`:
    an ISO time), if it says so: its line in a party's file, or its channel's metadata
    (:attr:`bot.events.InboundMessage.metadata`)."""
    sent = fields.get(SENT_AT)
    return sent if isinstance(sent, str) and sent else None
