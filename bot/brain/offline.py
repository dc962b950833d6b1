"""The offline brain: what the daemon does when no language model is configured.

It never pretends to be a model. Every reply is labelled as offline and shows what
recall finds for the message, so the owner still gets something useful: their own
past conversations on the subject. Third parties get a plain, labelled notice.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bot.brain.base import BrainReply, BrainRequest, DeltaSink
from bot.graphemes import cut, isolate
from bot.labels import UNTITLED
from bot.owner_days import local_day
from bot.search.fusion import snippet
from bot.search.query import MAX_QUERY_CHARS, STOP_WORDS, bounded_query, query_terms

if TYPE_CHECKING:
    from bot.search import SearchResult, SearchService

log = logging.getLogger("my_agent.brain.offline")

OFFLINE_LABEL = "[offline mode: no language model is configured]"
# Turns of the current conversation this close to the message are not "recall": they are
# the message itself and what the owner still sees above it.
RECENT_TURNS = 10
KEYWORD_ONLY = "keyword search only: conversations that say it in other words are not found"
# Vectors missing (rebuilt after a new embedding model, or some failed to embed): the
# conversations without theirs, likewise.
PARTIAL = (
    "search by meaning is incomplete: conversations that say it in other words may not be found"
)
# An e-mail turn may start with its subject, labelled ("Subject: Lisbon trip",
# channels/email/inbound.py): the label is in every such turn, no word to recall by (it
# recalled every earlier mail as related); the subject's own words are.
_SUBJECT_LABEL = "Subject: "
# How the owner asks for recall ("remember when we talked about the kayak trip?", "did
# I mention my sister?"): words of the question, not of its subject. Searched for, they
# found every conversation where someone said "remember to ..." or "as we discussed".
_RECALL_WORDS = re.compile(
    r"\b(?:remember(?:ed)?|recall(?:ed)?|talk(?:ed)?|discuss(?:ed)?|mention(?:ed)?|"
    r"chat(?:ted)?|spoke|conversations?)\b",
    re.IGNORECASE,
)
# Pages of results read at most to find ``max_results`` that are recall (the message
# itself and its earlier copies are skipped).
MAX_PAGES = 3
# What is read of a message, and of a recalled turn, to tell the same question asked
# again (:func:`_words`): two texts alike this far are the same message. Before session
# 40 both were read whole, once per result, and a pasted 10 MB log took seconds of the
# event loop each time.
WORDS_CHARS = 10 * MAX_QUERY_CHARS


@dataclass(frozen=True)
class _Message:
    """What a reply reads of the message being answered, once: its words
    (:func:`_words`) and the terms its recalled snippets are centred on (the search's
    bounded query's)."""

    words: list[str]
    terms: list[str]


class OfflineBrain:
    """Labelled recall-only replies; streams them in small pieces like a model would."""

    name = "offline"
    uses_history = False  # the restricted notice does not depend on the group's messages

    def __init__(self, search: SearchService | None, max_results: int = 3) -> None:
        self.search = search
        self.max_results = max_results

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        if request.profile == "restricted":
            text = (
                f"{OFFLINE_LABEL} Your message has been recorded and the owner can read it. "
                "No automatic answer is available right now."
            )
        else:
            text = await self._owner_reply(request)
        if on_delta is not None:
            for piece in _chunks(text, 24):
                await on_delta(piece)
                await asyncio.sleep(0)
        return BrainReply(text=text, model="offline")

    async def _owner_reply(self, request: BrainRequest) -> str:
        # The key hint is for the owner's own chats: a group's members read the owner's
        # replies there, and a reply-all mail's other recipients (both scope recall to
        # the conversation). Before session 40 every message of the owner's in a group
        # posted "Set ANTHROPIC_API_KEY" where the whole family read it.
        private = request.recall_scope is None
        lines = [f"{OFFLINE_LABEL} Set ANTHROPIC_API_KEY to get real answers." if private
                 else OFFLINE_LABEL]  # fmt: skip
        found: list[SearchResult] = []
        hint: str | None = None  # how the search was incomplete, when it was
        if self.search is not None and request.text.strip():
            try:
                found, hint = await self._recall(request)
            except Exception:
                log.exception("recall failed for the offline reply")
                lines.append("Recall is unavailable at the moment.")
        if found:
            lines.append("From past conversations:")
            config = getattr(self.search, "config", None)
            # The owner's calendar day, not the UTC one (an evening in New York is
            # already the next day in UTC).
            zone = ZoneInfo(config.owner.timezone) if config is not None else ZoneInfo("UTC")
            for i, result in enumerate(found, 1):
                title = result.title or UNTITLED  # as the dashboard lists it
                date = local_day(result.timestamp or "", zone)
                snippet = " ".join((result.snippet or result.abbreviation or "").split())
                if len(snippet) > 200:
                    snippet = cut(snippet, 197) + "..."
                lines.append(
                    f"{i}. {isolate(title)} ({result.channel}, {date}, {result.found_in()}): "
                    f"{isolate(snippet)}"
                )
            if hint:
                lines.append(f"({hint})")
        elif len(lines) == 1:
            # Without an embedding model only the message's own words were looked for: a
            # bare "nothing turned up" read as "never talked about it".
            said = f" ({hint})" if hint else ""
            lines.append(f"Nothing related turned up in past conversations.{said}")
        for note in request.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    async def _recall(self, request: BrainRequest) -> tuple[list[SearchResult], str | None]:
        """Up to ``max_results`` past conversations on the message's subject, and how the
        search was incomplete: keyword-only (no embedding model, or it failed on the
        message), or with the vectors being rebuilt; None when it was not."""
        assert self.search is not None
        # The reply's work is bounded by the search's own query, not by the message:
        # before session 40 the snippet of an older turn looked for every distinct word
        # of the whole message (50,000 for a pasted 1 MB log, one scan of the old turn
        # each) and a reply held the event loop 25-44 s (systemd's watchdog killed the
        # daemon, and the owed reply did it again after the restart).
        query = _subject(bounded_query(request.text).removeprefix(_SUBJECT_LABEL))
        mine = _Message(_words(request.text), query_terms(query))
        found: list[SearchResult] = []
        hint: str | None = None
        cursor = None
        for _ in range(MAX_PAGES):
            # a group's members read the reply: its own conversation only (recall_scope)
            page = await self.search.search(
                query,
                conversation_id=request.recall_scope,
                limit=self.max_results + 2,
                cursor=cursor,
                asked_in=request.conversation_id,  # the message, stored just before
            )
            hint = None  # (a message without words to look for: nothing was missed)
            if not page.no_words and page.method != "hybrid":
                hint = KEYWORD_ONLY
            elif not page.no_words and page.vectors_incomplete:
                hint = PARTIAL
            if page.match == "loose":
                # nothing shares a word with the message or comes close in meaning: the
                # nearest conversations were listed as related, whatever they were about
                break
            for result in page.results:
                if result.match == "loose":
                    # The page shares a word with the message (the message itself, stored
                    # before this reply, always does), but this conversation neither
                    # does nor comes close: it was listed as related, whatever its subject.
                    continue
                if result.conversation_id == request.conversation_id and self._recent(
                    result, request.turn_number
                ):
                    # The message itself, or what is still on the owner's screen; an
                    # older part of this conversation that matched too is recall.
                    part = await self._recall_part(result, request, mine, older=True)
                elif await self._repeats_message(result, mine):
                    # The owner asked this before (unanswered offline: the replies are
                    # not recalled): word for word, it outranks the conversation it asks
                    # about, with the model most of all. Its other turns may be recall.
                    part = await self._recall_part(result, request, mine, older=False)
                else:
                    part = result
                if part is not None:
                    found.append(part)
                if len(found) >= self.max_results:
                    return found, hint
            cursor = page.next_cursor
            if cursor is None:
                break
        return found, hint

    @staticmethod
    def _recent(result: SearchResult, turn_number: int | None) -> bool:
        """Whether a result in the current conversation is shown by its message or the
        turns just before it (its snippet is its best turn's text): no recall there.
        An older part of a long (pinned channel) conversation is still listed."""
        if not result.turn_scores:
            return True  # found by its abbreviation alone: this conversation as a whole
        if turn_number is None:
            return False
        return result.turn_scores[0][0] > turn_number - RECENT_TURNS

    async def _repeats_message(self, result: SearchResult, mine: _Message) -> bool:
        """Whether the result's best turn only says the message again (same words)."""
        if not result.turn_scores:
            return False
        text, _ = await self._turn_text(result.conversation_id, result.turn_scores[0][0])
        return _words(text) == mine.words

    async def _recall_part(
        self, result: SearchResult, request: BrainRequest, mine: _Message, *, older: bool
    ) -> SearchResult | None:
        """The result's best-matching turn that is recall, as a result of its own: one
        that does not only repeat the message and (``older``: the current conversation)
        is older than the recent turns; None when none matched well (half the best
        turn's score).

        Before, a current conversation whose best turn was the message itself was skipped
        whole, and the older turn that holds the answer ("what was my hotel budget?",
        asked 15 turns later in a long pinned conversation) never showed."""
        if self.search is None or not result.turn_scores:
            return None
        if older and request.turn_number is None:
            return None
        cut = (request.turn_number or 0) - RECENT_TURNS
        floor = result.turn_scores[0][1] / 2
        candidates = [
            (n, s) for n, s in result.turn_scores if s >= floor and (not older or n <= cut)
        ]
        for i, (number, _) in enumerate(candidates):
            text, said = await self._turn_text(result.conversation_id, number)
            if not text.strip() or _words(text) == mine.words:
                continue
            # the old turn may be a pasted log of megabytes: read off the event loop
            shown = await asyncio.to_thread(snippet, text, mine.terms)
            return replace(
                result,
                snippet=shown,
                turn_range=f"turn {number}",
                turn_scores=candidates[i:],
                timestamp=said or result.timestamp,  # dated as the turn shown
            )
        return None

    async def _turn_text(self, conversation_id: str, number: int) -> tuple[str, str]:
        """The recallable lines of one turn number (not the offline replies), and when
        the first was said."""
        assert self.search is not None
        rows = await self.search.db.fetchall(
            "SELECT content, timestamp FROM turns WHERE conversation_id = ? AND "
            "turn_number = ? AND recall = 1 ORDER BY id",
            (conversation_id, number),
        )
        return " ".join(str(row[0]) for row in rows), str(rows[0][1] or "") if rows else ""

    async def close(self) -> None:
        return None


def _subject(text: str) -> str:
    """``text`` without the words that ask for recall, unless nothing else is left."""
    rest = " ".join(_RECALL_WORDS.sub(" ", text).split())
    return rest if any(w not in STOP_WORDS for w in query_terms(rest)) else text


def _words(text: str) -> list[str]:
    """The words of a message (its first :data:`WORDS_CHARS` characters), to tell the
    same question asked again."""
    return query_terms(text.removeprefix(_SUBJECT_LABEL)[:WORDS_CHARS], drop_stop_words=False)


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
