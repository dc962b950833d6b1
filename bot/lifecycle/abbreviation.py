"""Abbreviation: meeting notes of a conversation for the search index (seed 000
"Abbreviation Generation", "Background Abbreviation", "Abbreviation Failure Handling").

:class:`Abbreviator` writes the notes: the ``haiku`` alias with the meeting-notes prompt
when a utility model is configured, the offline extractive abbreviation
(:func:`bot.extractive.extractive_abbreviation`) otherwise. :func:`abbreviate` is one
pass over one conversation: generate, store (transcript event + table), embed; a failure
leaves ``needs_abbreviation = 1`` for the sweep and the next start, and an embedding
failure keeps the text. The serial worker that runs the passes, so a reply never waits
for them, is :class:`bot.lifecycle.queue.AbbreviationQueue`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from bot.brain.base import RequestRefused, UtilityModel
from bot.brain.cost import tracking
from bot.brain.worded_refusals import refused_in_words, without_preamble
from bot.conversations import ConversationManager
from bot.extractive import HEADER, Turn, extractive_abbreviation
from bot.index import ConversationRecord
from bot.labels import title_for_model
from bot.lifecycle import prompts
from bot.lifecycle.queue import AbbreviationQueue
from bot.lifecycle.records import VectorIndex

# AbbreviationQueue lived here (bot.lifecycle.queue since session 22): still importable.
__all__ = [
    "AbbreviationError",
    "AbbreviationQueue",
    "Abbreviator",
    "Outcome",
    "Speaker",
    "abbreviate",
    "as_tuples",
    "offline_notes",
    "set_flag",
]

log = logging.getLogger("my_agent.lifecycle")

# Who said a turn, as notes name them (``None``: the turn's ``sender`` as stored).
Speaker = Callable[[Mapping[str, Any]], "str | None"]


def as_tuples(turns: Sequence[Mapping[str, Any]], speaker: Speaker | None = None) -> list[Turn]:
    """Transcript turn lines as the ``(role, content, sender)`` items of bot.extractive;
    ``speaker`` names each turn's sender (the owner's id on a channel by their name)."""
    return [
        (
            str(t.get("role") or ""),
            str(t.get("content") or ""),
            speaker(t) if speaker is not None else t.get("sender"),
        )
        for t in turns
    ]


class AbbreviationError(Exception):
    """The notes could not be produced (model unreachable, empty answer); ``retry_after``:
    the seconds the API asked us to wait (a 429's ``retry-after``), when it said."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def offline_notes(text: str | None) -> bool:
    """Whether ``text`` are the offline extractive notes (labelled by their first line)."""
    return bool(text) and str(text).startswith(HEADER)


class Abbreviator:
    """Writes the meeting notes of a conversation, with the model or offline."""

    def __init__(
        self,
        model: UtilityModel | None,
        *,
        model_alias: str = "haiku",
        budget_chars: int = 48000,
        max_tokens: int = 400,
        speaker: Speaker | None = None,
    ) -> None:
        self.model = model
        self.speaker = speaker
        self.model_alias = model_alias
        self.budget_chars = budget_chars
        self.max_tokens = max_tokens

    @property
    def method(self) -> Literal["llm", "extractive"]:
        return "llm" if self.model is not None else "extractive"

    async def extractive(self, turns: Sequence[Mapping[str, Any]]) -> str:
        """The offline extractive notes of ``turns`` (labelled by their first line)."""
        # Pure Python over possibly thousands of turns: keep it off the event loop.
        return await asyncio.to_thread(extractive_abbreviation, as_tuples(turns, self.speaker))

    async def abbreviate(
        self, record: ConversationRecord, turns: Sequence[Mapping[str, Any]]
    ) -> str:
        """The notes for ``turns``; raises :class:`AbbreviationError` on failure."""
        if self.model is None:
            text = await self.extractive(turns)
        else:
            covered = record.abbreviated_turn if record.abbreviation else 0
            skipped = prompts.left_out(turns, self.budget_chars, covered)
            prompt = prompts.abbreviation_prompt(
                turns,
                channel=record.channel,
                title=title_for_model(record),  # not a stranger's chosen name
                previous=record.abbreviation,
                budget_chars=self.budget_chars,
                skipped=skipped,
                skipped_points=await self.extractive(skipped) if skipped else None,
            )
            try:
                text = await self.model.complete(
                    system=prompts.ABBREVIATION_SYSTEM,
                    prompt=prompt,
                    model_alias=self.model_alias,
                    max_tokens=self.max_tokens,
                )
            except asyncio.CancelledError:
                raise
            except RequestRefused as exc:
                text = ""  # this conversation's prompt, not an outage: below
                log.warning("the model refused the notes of %s (%s)", record.id, exc)
            except Exception as exc:
                wait = getattr(exc, "retry_after", None)
                raise AbbreviationError(f"{type(exc).__name__}: {exc}", retry_after=wait) from exc
            # (a header such as "Meeting notes:" is no part of the notes: session 29)
            text = without_preamble(text or "")
            if refused_in_words(text):
                # "I'm sorry, but I can't help with summarizing this conversation." was
                # stored as its notes, embedded and ranked (before session 39)
                log.warning("the model refused the notes of %s: %r", record.id, text[:80])
                text = ""
            if not text:
                # Refused or empty for this conversation (a refusal, a prompt the API
                # rejects): asking again gives the same, and as a failure it paused the
                # whole queue at every sweep, starving every other conversation. Its notes
                # are written offline instead (labelled as such by their first line).
                log.warning("notes of %s written offline: the model gave none", record.id)
                text = await self.extractive(turns)
        text = (text or "").strip()
        if not text:
            raise AbbreviationError("empty abbreviation")
        return text


async def set_flag(conversations: ConversationManager, conv_id: str, flag: bool) -> bool:
    """Set ``needs_abbreviation`` of ``conv_id`` to ``flag`` unless it is already so;
    True when it was written. While the model is down every sweep (and every start)
    passes over each conversation owed notes: rewriting a flag already set was a write
    per conversation, 15,000 a sweep after an import."""
    # The column alone, not the record (a record read and parsed for each of them took
    # longer than the writes it saves).
    row = await conversations.index.db.fetchone(
        "SELECT needs_abbreviation FROM conversations WHERE id = ?", (conv_id,)
    )
    if row is None or bool(row[0]) == flag:
        return False
    await conversations.mark_needs_abbreviation(conv_id, flag)
    return True


@dataclass(frozen=True)
class Outcome:
    """What one pass over a conversation did (for logs and tests)."""

    conversation_id: str
    status: Literal["abbreviated", "offline", "embedded", "skipped", "failed", "missing"]
    through_turn: int = 0
    embedded: bool | None = None  # None: no vector index configured
    error: str | None = None  # the model's failure (also when notes were written offline)
    retry_after: float | None = None  # seconds the API asked us to wait, with ``error``
    # The model was asked and gave no notes (a refusal, an empty answer): the offline
    # notes written instead are final for this run (Recovery._offline_noted).
    declined: bool = False


async def abbreviate(
    conversations: ConversationManager,
    abbreviator: Abbreviator,
    vectors: VectorIndex | None,
    conv_id: str,
    *,
    rewrite: bool = False,
    fallback: bool = False,
    model: bool = True,
) -> Outcome:
    """One pass: notes for new turns (or only the missing embedding), stored and embedded.

    ``rewrite``: the notes cover the last turn number but not every line of it (a reply
    that landed after them), so they are written again. ``fallback``: when the model
    fails, the offline notes are stored as a stand-in (``needs_abbreviation`` kept, in the
    transcript too, so the model writes them once it answers); ``model=False``: the model
    is not asked (it is down), the stand-in is written at once (with ``fallback``) or the
    pass fails.
    """
    record = await conversations.get(conv_id)
    if record is None:
        return Outcome(conv_id, "missing")
    if record.turn_count <= 0:
        return Outcome(conv_id, "skipped")  # /new before any message: nothing to note
    current = (
        bool(record.abbreviation) and record.abbreviated_turn >= record.turn_count and not rewrite
    )
    stand_in = (
        current
        and record.needs_abbreviation
        and abbreviator.method == "llm"
        and offline_notes(record.abbreviation)
    )
    if stand_in:
        # A stand-in from an outage (or offline notes whose embedding failed): the model
        # writes them now; while it is down they stay as they are, still owed.
        current = False
    # Offline notes stand in for missing or offline ones; the model's notes, even behind,
    # are kept (and owed) until it answers.
    noted = bool(record.abbreviation) and not offline_notes(record.abbreviation)
    may_stand_in = fallback and not stand_in and not noted
    if not model and not may_stand_in:
        await set_flag(conversations, conv_id, True)
        return Outcome(conv_id, "skipped", record.abbreviated_turn)
    if current and not record.needs_abbreviation:
        return Outcome(conv_id, "skipped", record.abbreviated_turn)
    status: Literal["abbreviated", "offline", "embedded"]
    error: str | None = None
    declined = False
    retry_after: float | None = None
    if current:
        # The text is up to date; a previous pass failed to embed it.
        text, through, status = record.abbreviation or "", record.abbreviated_turn, "embedded"
    else:
        # cast: ConversationManager.list shadows the builtin in its own annotations.
        turns = cast(list[dict[str, Any]], await conversations.read_turns(conv_id, readouts=False))
        if not turns:
            return Outcome(conv_id, "skipped")
        through = max(int(t.get("turnNumber") or 0) for t in turns)
        try:
            if not model:
                raise AbbreviationError("the model is down")
            with tracking() as spent:
                text = await abbreviator.abbreviate(record, turns)
            extra = spent.fields()
        except AbbreviationError as exc:
            error, retry_after = str(exc), exc.retry_after
            if not may_stand_in:
                log.warning("abbreviation of %s failed (%s); retried on the sweep", conv_id, exc)
                await set_flag(conversations, conv_id, True)
                return Outcome(conv_id, "failed", error=error, retry_after=retry_after)
            if model:  # (not asked: the pass that found it down warned)
                log.warning("abbreviation of %s failed (%s); notes written offline", conv_id, exc)
            # Search keeps finding it meanwhile; the flag, in the transcript, keeps the
            # model's notes owed (the sweep, the next start, after a reindex too).
            text = await abbreviator.extractive(turns)
            extra = {"needsAbbreviation": True}
        # Which wrote them, in the event too (offline notes also stand in for a
        # conversation the model refused): the header says it, the field says it plainly.
        extra["method"] = "extractive" if offline_notes(text) else "llm"
        declined = error is None and abbreviator.method == "llm" and offline_notes(text)
        if not any(t.get("role") == "assistant" and t.get("turnNumber") == through for t in turns):
            # Its reply may land while the notes are written: the index then counts them
            # as behind (bot.index_writes), also after a crash or in a rebuild.
            extra["answered"] = False
        await conversations.set_abbreviation(conv_id, text, through, **extra)
        status = "abbreviated" if error is None else "offline"
        log.log(
            logging.INFO if error is None else logging.DEBUG,  # (an outage: one a pass)
            "abbreviated %s through turn %d (%s, %d chars)",
            conv_id,
            through,
            # what wrote them: the model's refusal leaves offline notes with no error,
            # which this line called "llm" while the event said "extractive"
            extra["method"] if error is None else "offline stand-in",
            len(text),
        )
    embedded: bool | None = None
    if vectors is not None:
        try:
            await vectors.index_abbreviation(conv_id, text)
            embedded = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The text stays (display, FTS); only the vector is retried later.
            log.warning(
                "embedding the abbreviation of %s failed (%s); retried on the sweep", conv_id, exc
            )
            embedded = False
    if embedded is False:
        await set_flag(conversations, conv_id, True)
    elif status == "embedded":
        await set_flag(conversations, conv_id, False)
    return Outcome(conv_id, status, through, embedded, error, retry_after, declined)
