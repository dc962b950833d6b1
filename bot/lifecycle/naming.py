"""Conversation naming: title, topics and suggestSplit (seed 000 "Conversation Naming",
seed 001 "M2-S5").

With a utility model (the ``haiku`` alias) the model returns a JSON object that is parsed
defensively: anything unusable falls back to the offline naming. Offline (no API key, or
the model failed) the title comes from the conversation's keywords
(:func:`bot.keyword_titles.keyword_title`) and never suggests a split.

Titles are channel-aware: a Telegram chat is "Contact — Topic", an e-mail thread starts
from its subject. Their shape (cleaning, casing, the channel's form) is
:mod:`bot.lifecycle.titles`; its names stay importable from here.
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
from bot.lifecycle.titles import (
    SEPARATOR,
    TITLE_MAX_CHARS,
    TITLE_MAX_WORDS,
    TOPICS_MAX,
    clean_subject,
    clean_title,
    clean_topics,
    compose_title,
    contact_name,
    email_subject,
    strip_contact,
    title_case,
    truncate,
)

log = logging.getLogger("my_agent.lifecycle")

__all__ = [
    "SEPARATOR",
    "TITLE_MAX_CHARS",
    "TITLE_MAX_WORDS",
    "TOPICS_MAX",
    "Namer",
    "Naming",
    "clean_subject",
    "clean_title",
    "clean_topics",
    "compose_title",
    "contact_name",
    "email_subject",
    "kebab",
    "parse_naming",
    "salvage_naming",
    "strip_contact",
    "title_case",
]

_OPEN_BRACE = re.compile(r"\{")
# Fields of an answer that is not valid JSON (salvage_naming).
_QUOTED = re.compile(r"""(["'])((?:(?!\1)[^\\\n]|\\.)+)\1""")
_TITLE_FIELD = re.compile(r"""["']title["']\s*:\s*(["'])((?:(?!\1)[^\\\n]|\\.)+)\1""")
_TOPICS_FIELD = re.compile(r"""["']topics["']\s*:\s*\[([^\]]*)""")
_SPLIT_FIELD = re.compile(r"""["']suggestSplit["']\s*:\s*(true|false)""", re.I)


@dataclass(frozen=True)
class Naming:
    """The outcome of one naming pass."""

    title: str
    topics: list[str] = field(default_factory=list)
    suggest_split: bool = False
    split_topic: str | None = None
    method: Literal["llm", "keywords", "subject"] = "keywords"


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


def salvage_naming(text: str) -> dict[str, Any] | None:
    """The fields of an answer that is almost JSON (a trailing comma, single quotes, an
    object cut short), or None without a ``title`` field: its title was thrown away for
    the offline keywords, and the model asked again after a backoff."""
    found = _TITLE_FIELD.search(text or "")
    if found is None:
        return None
    data: dict[str, Any] = {"title": _unescape(found.group(2))}
    topics = _TOPICS_FIELD.search(text)
    if topics is not None:
        data["topics"] = [_unescape(m.group(2)) for m in _QUOTED.finditer(topics.group(1))]
    split = _SPLIT_FIELD.search(text)
    if split is not None:
        data["suggestSplit"] = split.group(1).lower() == "true"
    return data


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


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
            title = truncate(title_case(subject), TITLE_MAX_CHARS)
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
            data = salvage_naming(answer)
            if data is None:
                log.warning("naming %s: the model's answer is not JSON; naming offline", record.id)
                return None
            log.info("naming %s: the model's answer is not valid JSON; its fields kept", record.id)
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
