"""Conversation naming: title, topics and suggestSplit (seed 000 "Conversation Naming",
seed 001 "M2-S5").

With a utility model (the ``haiku`` alias) the model returns a JSON object that is parsed
defensively: anything unusable falls back to the offline naming. Offline (no API key, or
the model failed) the title comes from the conversation's keywords
(:func:`bot.keyword_titles.keyword_title`) and never suggests a split.

Titles are channel-aware: a Telegram chat is "Contact — Topic", an e-mail thread starts
from its subject.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.brain.base import UtilityModel
from bot.graphemes import cut
from bot.index import ConversationRecord
from bot.keyword_titles import kebab, keyword_title, keyword_topics
from bot.lifecycle import prompts
from bot.lifecycle.abbreviation import Speaker, as_tuples

log = logging.getLogger("my_agent.lifecycle")

TITLE_MAX_CHARS = 80
TITLE_MAX_WORDS = 6
TOPICS_MAX = 5
SEPARATOR = " — "

_SMALL_WORDS = frozenset(
    "a an and as at but by for from in into nor of on or over per the to via vs with".split()
)
_SUBJECT_PREFIX = re.compile(r"^\s*((re|fw|fwd|aw|wg|sv|vs|tr)\s*(\[\d+\])?\s*:\s*)+", re.I)
_OPEN_BRACE = re.compile(r"\{")
_NUMERIC_ID = re.compile(r"^-?\d+$")


@dataclass(frozen=True)
class Naming:
    """The outcome of one naming pass."""

    title: str
    topics: list[str] = field(default_factory=list)
    suggest_split: bool = False
    split_topic: str | None = None
    method: Literal["llm", "keywords", "subject"] = "keywords"


# -- formatting rules ----------------------------------------------------------------
def title_case(text: str) -> str:
    """Title Case that keeps acronyms and brand casing (API, iPhone) as written."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        core = word.strip("\"'()[]")
        if any(c.isupper() or c.isdigit() for c in core[1:]) or "_" in core:
            out.append(word)  # API, iPhone, v2.1, user_id: keep
        elif 0 < i < len(words) - 1 and core.lower() in _SMALL_WORDS:
            out.append(word.lower())
        else:
            out.append(word[:1].upper() + word[1:].lower() if word else word)
    return " ".join(out)


def clean_title(raw: str, *, max_words: int = TITLE_MAX_WORDS) -> str:
    """One line, no quotes or trailing punctuation, Title Case, <= max_words and 80 chars."""
    text = " ".join(str(raw).split())
    text = text.strip().strip("\"'`*#").strip()
    text = re.sub(r"^(title|name)\s*:\s*", "", text, flags=re.I)
    text = text.strip().strip("\"'`").rstrip(".!?:;,").strip()
    words = text.split()
    if max_words and len(words) > max_words:
        words = words[:max_words]
        # Cut mid-phrase, a title ended on "for the" (then capitalised: "... for The").
        while len(words) > 1 and words[-1].lower().strip(",;:-—") in _SMALL_WORDS:
            words.pop()
        words[-1] = words[-1].rstrip(",;:-—") or words[-1]
    text = title_case(" ".join(words))
    return _truncate(text, TITLE_MAX_CHARS)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    # On a grapheme boundary: a title of Devanagari or emoji cut by code points ended in
    # a consonant without its vowel sign, or half a family emoji.
    start = cut(text, limit)
    start = start.rsplit(" ", 1)[0] if " " in start else start
    return start.rstrip(" -—,:;")


def clean_topics(raw: Any) -> list[str]:
    """Distinct kebab-case topics (at most 5) from whatever the model returned."""
    if isinstance(raw, str):
        raw = re.split(r"[,;\n]", raw)
    if not isinstance(raw, list):
        return []
    out: list[str] = []
    for item in raw:
        if not isinstance(item, str | int | float):
            continue
        slug = kebab(str(item))
        if slug and slug not in out:
            out.append(slug)
        if len(out) == TOPICS_MAX:
            break
    return out


def clean_subject(subject: str) -> str:
    """An e-mail subject without ``Re:`` / ``Fwd:`` chains and list tags."""
    text = _SUBJECT_PREFIX.sub("", subject or "")
    text = re.sub(r"^\s*\[[^\]]{1,30}\]\s*", "", text)  # [list-name]
    return " ".join(text.split())


# -- channel context -----------------------------------------------------------------
def contact_name(record: ConversationRecord, turns: Sequence[Mapping[str, Any]]) -> str | None:
    """Who a Telegram chat is with: group title, contact name, then the sender handle."""
    meta = record.channel_meta or {}
    candidates = [meta.get(k) for k in ("contact", "group_title", "contact_name", "sender_name")]
    candidates += [t.get("sender") for t in turns if t.get("role") == "user"]
    for value in candidates:
        # A bare numeric id ("123456", "-100123") says nothing to a reader: skip it.
        if isinstance(value, str) and value.strip() and not _NUMERIC_ID.match(value.strip()):
            return cut(" ".join(value.split()), 40)
    return None


def email_subject(record: ConversationRecord, turns: Sequence[Mapping[str, Any]]) -> str | None:
    """The thread's subject from the conversation's channel metadata or its first mail."""
    meta = record.channel_meta or {}
    candidates = [meta.get("subject")] + [t.get("subject") for t in turns]
    for value in candidates:
        if isinstance(value, str) and clean_subject(value):
            return clean_subject(value)
    return None


def strip_contact(title: str, contact: str) -> str:
    """``title`` without a leading ``contact`` and separator (``Hanan — ``, ``Hanan: ``).

    The model is told the contact is prefixed for it, yet sometimes writes it anyway;
    kept, the title read "Hanan — Hanan — Server Check".
    """
    text = " ".join(title.split()).strip("\"'` ")
    if not text.casefold().startswith(contact.casefold()):
        return title
    rest = text[len(contact) :]
    stripped = rest.lstrip(" —–-:|,")
    if stripped == rest.lstrip() or not stripped:
        return title  # "Hananfest Planning" or only the name: not a prefix
    return stripped


def compose_title(channel: str, topic_title: str, contact: str | None) -> str:
    """Apply the channel's title shape to a topic title."""
    if channel == "telegram" and contact and topic_title:
        budget = TITLE_MAX_CHARS - len(contact) - len(SEPARATOR)
        return contact + SEPARATOR + _truncate(topic_title, max(budget, 10))
    return topic_title


# -- parsing the model's answer --------------------------------------------------------
def parse_naming(text: str) -> dict[str, Any] | None:
    """The JSON object in a model's answer (code fences and chatter tolerated), or None.

    Each ``{`` is tried in turn and the first object with a ``title`` wins (else the
    first object): one greedy match from the first ``{`` to the last ``}`` swallowed any
    braces in prose after the object ("I kept {boiler} as the theme"), the whole answer
    stopped being JSON, and a good title was replaced by the offline one.
    """
    text = text or ""
    decoder = json.JSONDecoder()
    first: dict[str, Any] | None = None
    for match in _OPEN_BRACE.finditer(text):
        try:
            data, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(data, dict):
            if "title" in data:
                return data
            first = first if first is not None else data
    return first


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value) if isinstance(value, bool | int) else False


class Namer:
    """Produces a :class:`Naming` for a conversation, with a model or offline."""

    def __init__(
        self,
        model: UtilityModel | None,
        *,
        model_alias: str = "haiku",
        budget_chars: int = 12000,
        speaker: Speaker | None = None,
    ) -> None:
        self.model = model
        self.model_alias = model_alias
        self.budget_chars = budget_chars
        self.speaker = speaker

    async def name(
        self,
        record: ConversationRecord,
        turns: Sequence[Mapping[str, Any]],
        *,
        abbreviation: str | None = None,
    ) -> Naming:
        """Name the conversation from its turns (and its abbreviation when re-naming)."""
        contact = contact_name(record, turns) if record.channel == "telegram" else None
        subject = email_subject(record, turns) if record.channel == "email" else None
        if self.model is not None:
            try:
                naming = await self._with_model(record, turns, abbreviation, contact, subject)
            except Exception as exc:  # the model is down: name offline now, never block
                log.warning("naming %s with the model failed (%s); naming offline", record.id, exc)
                naming = None
            if naming is not None:
                return naming
        # Keyword extraction over every turn is pure CPU: off the event loop, as the
        # offline abbreviation is, so a long conversation never stalls incoming messages.
        return await asyncio.to_thread(
            self.offline, record, turns, contact=contact, subject=subject
        )

    def offline(
        self,
        record: ConversationRecord,
        turns: Sequence[Mapping[str, Any]],
        *,
        contact: str | None = None,
        subject: str | None = None,
    ) -> Naming:
        """Keyword naming (no model): the subject for e-mail, else the key words."""
        items = as_tuples(turns, self.speaker)
        topics = clean_topics(keyword_topics(items))
        if subject:
            title = _truncate(title_case(subject), TITLE_MAX_CHARS)
            return Naming(title=title, topics=clean_topics([subject, *topics]), method="subject")
        keywords = clean_title(keyword_title(items))
        title = compose_title(record.channel, keywords or "New Conversation", contact)
        return Naming(title=title, topics=topics, method="keywords")

    async def _with_model(
        self,
        record: ConversationRecord,
        turns: Sequence[Mapping[str, Any]],
        abbreviation: str | None,
        contact: str | None,
        subject: str | None,
    ) -> Naming | None:
        assert self.model is not None
        hint = None
        if contact:
            hint = prompts.CHANNEL_NAMING_HINTS["telegram"].format(contact=contact)
        elif subject:
            hint = prompts.CHANNEL_NAMING_HINTS["email"].format(subject=subject)
        current = record.title
        if current and contact and current.startswith(contact + SEPARATOR):
            current = current[len(contact) + len(SEPARATOR) :]
        prompt = prompts.naming_prompt(
            turns,
            channel_hint=hint,
            abbreviation=abbreviation,
            current_title=current,
            budget_chars=self.budget_chars,
        )
        answer = await self.model.complete(
            system=prompts.NAMING_SYSTEM,
            prompt=prompt,
            model_alias=self.model_alias,
            max_tokens=200,
        )
        data = parse_naming(answer)
        if data is None:
            log.warning("naming %s: the model's answer is not JSON; naming offline", record.id)
            return None
        raw_title = data.get("title")
        if isinstance(raw_title, str) and contact:
            raw_title = strip_contact(raw_title, contact)
        topic_title = clean_title(raw_title) if isinstance(raw_title, str) else ""
        if len(topic_title.split()) < 1 or not any(c.isalnum() for c in topic_title):
            log.warning("naming %s: no usable title in the model's answer", record.id)
            return None
        split = _as_bool(data.get("suggestSplit"))
        split_topic = data.get("splitTopic")
        return Naming(
            title=compose_title(record.channel, topic_title, contact),
            topics=clean_topics(data.get("topics")),
            suggest_split=split,
            split_topic=cut(" ".join(split_topic.split()), 60)
            if split and isinstance(split_topic, str) and split_topic.strip()
            else None,
            method="llm",
        )
