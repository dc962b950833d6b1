"""The ``search_conversations`` recall tool: its input schema, the checking of the
model's arguments, and its results as the model reads them (bot.brain.tools offers it).

It runs the project's search (the same engine as ``my-agent search`` and ``/search``);
dates are days of the owner's calendar (bot.owner_days); a result in the conversation
being answered leaves out the message being answered, and a snippet quoting a group
line is marked by whose it is (the owner's, a member's) as in the working context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from bot.brain.context import group_line
from bot.brain.recall_pages import SearchPages, only_current
from bot.brain.tool_budget import ToolError
from bot.brain.tool_calls import int_input, maybe_await, wrap_data
from bot.config.model import AppConfig
from bot.graphemes import cut
from bot.labels import ESCALATION_PREFIX, name_for_model
from bot.owner_days import day_range, local_day
from bot.search.results import InvalidFilter

SEARCH_MAX_LIMIT = 25
SNIPPET_CHARS = 220  # as long as the search's own snippets
SEARCH_CHANNELS = ("web", "telegram", "email")
KEYWORD_ONLY_NOTE = (
    "search by meaning is unavailable right now: only conversations containing the "
    "query's words were found; try other words (synonyms) before concluding that a "
    "subject never came up"
)
PARTIAL_NOTE = (
    "search by meaning is incomplete (its vectors are being rebuilt or not all made yet): "
    "conversations without theirs were found only if they contain the query's words; "
    "try other words (synonyms) before concluding that a subject never came up"
)
# Scores are relative (the best scores 1), so the model is told when no result shares a
# word with the query, and when none is even close in meaning (SearchPage.match).
MATCH_NOTES = {
    "date": "no conversation uses the query's words: these were held on the dates it names",
    "meaning": "no conversation uses the query's words: these are the closest by meaning",
    "loose": (
        "no conversation uses the query's words and none is close in meaning: these are "
        "only the nearest and probably unrelated; do not present them as the answer"
    ),
}
# A group's members read the owner's reply there: no other conversation is theirs to see.
GROUP_ONLY = (
    "in a group chat only this group's own conversation can be read: the owner's other "
    "conversations are private and the group's members read your reply"
)


def _dates(span: Mapping[str, Any], zone: ZoneInfo) -> tuple[str | None, str | None]:
    """The model's dateRange (days of the owner's calendar, or timestamps) as the
    search's UTC bounds (bot.owner_days.day_range)."""
    for key in ("from", "to"):
        if span.get(key) is not None and not isinstance(span.get(key), str):
            raise ToolError(f"dateRange.{key} must be an ISO date string like 2026-02-14")
    try:
        return day_range(span.get("from"), span.get("to"), zone, ("dateRange.from", "dateRange.to"))
    except InvalidFilter as exc:
        raise ToolError(str(exc)) from None


SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for, in natural language."},
        "channel": {
            "type": "string",
            "enum": list(SEARCH_CHANNELS),
            "description": "Only conversations on this channel.",
        },
        "dateRange": {
            "type": "object",
            "properties": {
                "from": {
                    "type": "string",
                    "description": "ISO date in the owner's time zone, inclusive",
                },
                "to": {
                    "type": "string",
                    "description": "ISO date in the owner's time zone, inclusive",
                },
            },
        },
        "conversationId": {
            "type": "string",
            "description": "Only this conversation (an id from an earlier result).",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": SEARCH_MAX_LIMIT,
            "description": "Maximum results (default 10).",
        },
        "cursor": {
            "type": "string",
            "description": (
                "The nextCursor of an earlier result, with the same query and filters: "
                "the next page (none listed twice, none skipped)."
            ),
        },
    },
    "required": ["query"],
}
_DATE_KEYS = ("from", "to")


def _known_arguments(args: Mapping[str, Any], dates: Mapping[str, Any]) -> None:
    """Refuse an argument the search does not know (``date_from``, ``dateRange.start``):
    ignored, it searched everything while the model believed it had narrowed it down."""
    unknown = sorted(set(args) - set(SEARCH_SCHEMA["properties"]))
    unknown += sorted(f"dateRange.{k}" for k in set(dates) - set(_DATE_KEYS))
    if unknown:
        raise ToolError(
            f"unknown argument {', '.join(unknown)}: search_conversations takes query, "
            "channel, dateRange (from, to), conversationId, limit and cursor"
        )


def _others_match(page: Any, current: str) -> str:
    """The page's ``match`` without the conversation being answered: its message is
    stored before the reply and shares the query's words with itself, so the page read
    "words" and the nearest other conversations went to the model unmarked, however
    unrelated (each result's own ``match`` says how it relates)."""
    others = {r.match for r in page.results if r.conversation_id != current}
    if page.match != "words" or not others or "words" in others:
        return str(page.match)
    return next(m for m in ("date", "meaning", "loose") if m in others)


class ConversationSearch:
    """One reply's ``search_conversations`` over the project's services: ``search``
    (``SearchService``) and ``conversations`` (``ConversationManager``), either of
    which may stand alone in tests and diagnostics."""

    def __init__(self, config: AppConfig, services: Any) -> None:
        self.config = config
        self.services = services

    async def run(
        self,
        args: dict[str, Any],
        current: tuple[str, int] | None = None,
        only: str | None = None,
    ) -> str:
        """The results of one call, wrapped as data; a bad argument raises
        :class:`ToolError`. ``current`` and ``only``: as for :meth:`RecallTools.tools`."""
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        channel = args.get("channel") or None
        if channel is not None and (
            not isinstance(channel, str) or channel.strip().lower() not in SEARCH_CHANNELS
        ):
            # "mail" matched nothing and read as "never talked about it" to the model
            raise ToolError(f"channel must be one of {', '.join(SEARCH_CHANNELS)} (or left out)")
        dates = args.get("dateRange") or {}
        if not isinstance(dates, dict):
            raise ToolError("dateRange must be an object with from/to")
        _known_arguments(args, dates)
        conversation = args.get("conversationId") or None
        if conversation is not None and not isinstance(conversation, str):
            raise ToolError("conversationId must be a conversation id string")
        if only is not None and conversation not in (None, only):
            raise ToolError(GROUP_ONLY)
        if conversation is not None and only is None and not await self._exists(conversation):
            raise ToolError(f"no conversation {conversation!r}: use an id from a search result")
        limit = int_input(args.get("limit"), "limit") or self.config.search.default_limit
        limit = max(1, min(limit, SEARCH_MAX_LIMIT))
        cursor = args.get("cursor") or None
        if cursor is not None and not isinstance(cursor, str):
            raise ToolError("cursor must be the nextCursor string of an earlier result")
        zone = ZoneInfo(self.config.owner.timezone)
        date_from, date_to = _dates(dates, zone)
        pages = SearchPages(
            self.services.search,
            query.strip(),
            {
                "channel": channel,
                "date_from": date_from,
                "date_to": date_to,
                "conversation_id": only or conversation,
                # the message answered, stored just before: its vectors may be pending
                "asked_in": current[0] if current is not None else None,
            },
        )
        page = await pages.fetch(limit, cursor)
        if page.no_words:
            # searched for nothing: an empty list read as "never talked about it"
            raise ToolError(
                "query has no words to look for (only punctuation, symbols or emoji): "
                "search with words"
            )
        results = []
        total = page.total
        # the nearest conversations listed after the matches, probably unrelated: counted
        # apart, or the model read "totalMatches: 57" as 57 conversations on the subject
        loose = page.loose if page.match != "loose" else 0
        match = page.match
        for r in await pages.fill(page, current):
            item = {
                "conversationId": r.conversation_id,
                "conversationName": await self._title(r),
                "channel": r.channel,
                "snippet": r.snippet,
                "turnRange": r.turn_range,
                "matchedTurns": list(r.matched_turns),
                "date": local_day(r.timestamp, zone),
                "score": round(float(r.score), 4),
                "topics": list(r.topics),
            }
            if loose and r.match == "loose":
                item["probablyUnrelated"] = True
            if current is not None and r.conversation_id == current[0]:
                if only_current(r, current[1]):
                    total -= 1
                    loose -= bool(loose and r.match == "loose")
                    # The page's words may be the message's own: what the rest shares
                    # with the query is said by the other conversations alone.
                    match = _others_match(page, current[0])
                    continue
                await self._without_current(item, r, current[1])
            await self._label_group_snippet(item, r)
            results.append(item)
        related = sum(1 for item in results if not item.get("probablyUnrelated"))
        found: dict[str, Any] = {"results": results, "totalMatches": max(total - loose, related)}
        if loose:
            found["probablyUnrelated"] = loose
        if pages.next_cursor:
            found["nextCursor"] = pages.next_cursor
        if not page.total_exact:  # more turns match than the ranking read (bot.search.tail)
            found["totalIsLowerBound"] = True
        if page.method != "hybrid":
            # No model (none configured, or it failed on this query): only the query's own
            # words were looked for, and an empty list read as "never talked about it".
            found["searchMode"] = "keyword-only"
            found["note"] = KEYWORD_ONLY_NOTE
        elif match in MATCH_NOTES and results:
            found["match"] = match
            found["note"] = MATCH_NOTES[match]
        if page.method == "hybrid" and page.vectors_incomplete:
            # the vectors are rebuilt: an empty list is no "never came up" either
            found["searchMode"] = "partial"
            found["note"] = "; ".join(filter(None, (PARTIAL_NOTE, found.get("note"))))
        return wrap_data("search_conversations", found)

    async def _title(self, result: Any) -> str | None:
        """A result's title as the model reads it (:func:`bot.labels.name_for_model`):
        an escalation's automatic title names strangers by the names they chose; an
        unnamed mail thread or chat is named as the owner sees it (it was null)."""
        conversations = getattr(self.services, "conversations", None)
        title = str(result.title or "")
        if conversations is None or (title and not title.startswith(ESCALATION_PREFIX)):
            return result.title  # (only those need their record read)
        record = await maybe_await(conversations.get(result.conversation_id))
        return name_for_model(record) if record is not None else result.title

    async def _exists(self, conversation_id: str) -> bool:
        conversations = getattr(self.services, "conversations", None)
        if conversations is None:  # a search service alone (tests, diagnostics)
            return True
        return await maybe_await(conversations.get(conversation_id)) is not None

    async def _without_current(self, item: dict[str, Any], result: Any, turn: int) -> None:
        """Take the message being answered out of ``item`` (a result in its own
        conversation): it is stored before the reply, so search found the question it
        was asked for (a result that matched nothing else is dropped: :func:`only_current`)."""
        others = [n for n in result.matched_turns if n != turn]
        item["matchedTurns"] = others
        item["currentConversation"] = True  # the model is in it: not a past conversation
        best = [n for n, _ in result.turn_scores if n != turn]
        if result.turn_scores and result.turn_scores[0][0] == turn and best:
            # the snippet quoted the question: quote the best other matching turn instead
            lines = await self.services.conversations.read_turns(
                result.conversation_id, best[0], best[0], readouts=False
            )
            text = " ".join(" ".join(str(x.get("content") or "").split()) for x in lines)
            item["snippet"] = text if len(text) <= SNIPPET_CHARS else cut(text, SNIPPET_CHARS) + "…"
            said = next((str(x["timestamp"]) for x in lines if x.get("timestamp")), None)
            if said:  # dated as the turn quoted, not as the question (today)
                item["date"] = local_day(said, ZoneInfo(self.config.owner.timezone))

    async def _label_group_snippet(self, item: dict[str, Any], result: Any) -> None:
        """Mark a snippet that quotes a group's line as the working context and
        ``fetch_context`` mark its turn (:func:`bot.brain.group_lines.group_line`): bare, a
        member's words read as the owner's own (a member of an allow-listed group could
        put words in the owner's mouth for a later recall), and the owner's, unmarked,
        like a member's. Only a group's conversation has members; its best turns are
        read to find whose words these are."""
        conversations = getattr(self.services, "conversations", None)
        if conversations is None:  # a search service alone (tests, diagnostics)
            return
        record = await maybe_await(conversations.get(result.conversation_id))
        if ":group:" not in str(getattr(record, "identity_key", None) or ""):
            return
        quoted = " ".join(str(item.get("snippet") or "").strip("…").split())[:60]
        for number, _ in list(result.turn_scores)[:3]:
            lines = await conversations.read_turns(
                result.conversation_id, number, number, readouts=False
            )
            for line in lines:
                if quoted and quoted in " ".join(str(line.get("content") or "").split()):
                    item["snippet"] = group_line(line, str(item["snippet"]))
                    return


__all__ = [
    "GROUP_ONLY",
    "KEYWORD_ONLY_NOTE",
    "MATCH_NOTES",
    "SEARCH_CHANNELS",
    "SEARCH_MAX_LIMIT",
    "SEARCH_SCHEMA",
    "ConversationSearch",
]
