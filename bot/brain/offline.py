"""The offline brain: what the daemon does when no language model is configured.

It never pretends to be a model. Every reply is labelled as offline and shows what
recall finds for the message, so the owner still gets something useful: their own
past conversations on the subject. Third parties get a plain, labelled notice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bot.brain.base import BrainReply, BrainRequest, DeltaSink
from bot.labels import UNTITLED
from bot.owner_days import local_day
from bot.search.fusion import snippet
from bot.search.query import query_terms

if TYPE_CHECKING:
    from bot.search import SearchResult, SearchService

log = logging.getLogger("my_agent.brain.offline")

OFFLINE_LABEL = "[offline mode: no language model is configured]"
# Turns of the current conversation this close to the message are not "recall": they are
# the message itself and what the owner still sees above it.
RECENT_TURNS = 10
# An e-mail turn may start with its subject, labelled ("Subject: Lisbon trip",
# channels/email/inbound.py): the label is in every such turn, no word to recall by (it
# recalled every earlier mail as related); the subject's own words are.
_SUBJECT_LABEL = "Subject: "


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
        lines = [f"{OFFLINE_LABEL} Set ANTHROPIC_API_KEY to get real answers."]
        found = []
        if self.search is not None and request.text.strip():
            try:
                query = request.text.removeprefix(_SUBJECT_LABEL)
                page = await self.search.search(query, limit=self.max_results + 2)
                for result in page.results:
                    if result.conversation_id == request.conversation_id and self._recent(
                        result, request.turn_number
                    ):
                        # The message itself, or what is still on the owner's screen; an
                        # older part of this conversation that matched too is recall.
                        older = await self._older_part(result, request)
                        if older is None:
                            continue
                        result = older
                    found.append(result)
                    if len(found) >= self.max_results:
                        break
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
                    snippet = snippet[:197] + "..."
                lines.append(
                    f"{i}. {title} ({result.channel}, {date}, {result.turn_range}): {snippet}"
                )
        elif len(lines) == 1:
            lines.append("Nothing related turned up in past conversations.")
        for note in request.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

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

    async def _older_part(self, result: SearchResult, request: BrainRequest) -> SearchResult | None:
        """The current conversation's best-matching turn older than the recent ones, as
        a result of its own; None when none matched well (half the best turn's score).

        Before, a current conversation whose best turn was the message itself was skipped
        whole, and the older turn that holds the answer ("what was my hotel budget?",
        asked 15 turns later in a long pinned conversation) never showed."""
        if self.search is None or request.turn_number is None or not result.turn_scores:
            return None
        cut = request.turn_number - RECENT_TURNS
        floor = result.turn_scores[0][1] / 2
        older = [(n, s) for n, s in result.turn_scores if n <= cut and s >= floor]
        if not older:
            return None
        number = older[0][0]
        rows = await self.search.db.fetchall(
            "SELECT content FROM turns WHERE conversation_id = ? AND turn_number = ? "
            "AND recall = 1 ORDER BY id",
            (result.conversation_id, number),
        )
        text = " ".join(str(row[0]) for row in rows)
        if not text.strip():
            return None
        return replace(
            result,
            snippet=snippet(text, query_terms(request.text)),
            turn_range=f"turn {number}",
            turn_scores=older,
        )

    async def close(self) -> None:
        return None


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
