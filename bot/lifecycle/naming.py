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
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.brain.base import UtilityModel
from bot.graphemes import cut
from bot.index import ConversationRecord
from bot.keyword_titles import kebab, keyword_title, keyword_topics
from bot.lifecycle import prompts
from bot.lifecycle.abbreviation import Speaker, as_tuples
from bot.lifecycle.naming_answers import as_bool, parse_naming, salvage_naming, strings
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
    one_word,
    strip_contact,
    title_case,
    widen_title,
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


@dataclass(frozen=True)
class Naming:
    """The outcome of one naming pass."""

    title: str
    topics: list[str] = field(default_factory=list)
    suggest_split: bool = False
    split_topic: str | None = None
    method: Literal["llm", "keywords", "subject"] = "keywords"


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
        # The subject whole (not cut to six words), cleaned as a model's title is: it
        # kept emoji, capitals and trailing dots ("🎉 Party on Saturday! 🎂").
        title = clean_title(subject, max_words=0) if subject else ""
        if title:
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
        # A title the model gave (named through a turn): offered to keep. A stand-in (the
        # keywords of an outage, an escalation's placeholder; through turn 0) was offered
        # too, and a model that kept it made it a title of its own (before session 39).
        current = record.title if record.last_named_turn > 0 else None
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
        data = self._fields(record, answer)
        topic_title = self._topic_title(data, contact, subject)
        if data is None or not topic_title:
            if data is not None:
                log.warning("naming %s: no usable title in the model's answer", record.id)
            return None
        if one_word(topic_title):
            # 2-6 words (seed 000): "Kubernetes" said too little. Asked once more; if the
            # model insists (or fails), widened from its topics.
            again = await self._ask_again(record, prompt, topic_title)
            second = self._topic_title(again, contact, subject)
            if again is not None and second and not one_word(second):
                data, topic_title = again, second
            else:
                topic_title = widen_title(topic_title, strings(data.get("topics")))
                log.info("naming %s: a one-word title widened to %r", record.id, topic_title)
        split = as_bool(data.get("suggestSplit"))
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

    def _fields(self, record: ConversationRecord, answer: str) -> dict[str, Any] | None:
        """The fields of the model's naming ``answer`` (valid JSON or nearly), or None."""
        data = parse_naming(answer)
        if data is None:
            data = salvage_naming(answer)
            if data is None:
                log.warning("naming %s: the model's answer is not JSON; naming offline", record.id)
                return None
            log.info("naming %s: the model's answer is not valid JSON; its fields kept", record.id)
        return data

    @staticmethod
    def _topic_title(data: dict[str, Any] | None, contact: str | None, subject: str | None) -> str:
        """The cleaned title of an answer's fields ("" when there is none worth keeping):
        without the contact a Telegram title is prefixed with, or the ``Re:``/``Fwd:`` the
        model copied from an e-mail's subject ("Re: Invoice for March")."""
        raw_title = data.get("title") if data is not None else None
        if not isinstance(raw_title, str):
            return ""
        if contact:
            raw_title = strip_contact(raw_title, contact)
        if subject:
            raw_title = clean_subject(raw_title)
        title = clean_title(raw_title)
        return title if any(c.isalnum() for c in title) else ""

    async def _ask_again(
        self, record: ConversationRecord, prompt: str, title: str
    ) -> dict[str, Any] | None:
        """The fields of a second answer, the model told its title was one word; None
        when it fails (the first answer's title is widened instead)."""
        assert self.model is not None
        try:
            answer = await self.model.complete(
                system=prompts.NAMING_SYSTEM,
                prompt=prompt + "\n\n" + prompts.ONE_WORD_AGAIN.format(title=title),
                model_alias=self.model_alias,
                max_tokens=200,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the first answer stands, widened
            log.info("naming %s: asking again for a longer title failed (%s)", record.id, exc)
            return None
        return self._fields(record, answer)
