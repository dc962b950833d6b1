"""The pages of the search behind one ``search_conversations`` call (bot.brain.recall_search).

The model continues a broad search with the ``nextCursor`` of a result, passed back as
``cursor``; the cursor is the search's own (bot.search.cursor), so no conversation is
listed twice or skipped. Until session 41 the tool had no cursor: the model could not
read past the first 25 conversations of a broad query (``my-agent search`` and
``/search`` could).
"""

from __future__ import annotations

from typing import Any

from bot.brain.tool_budget import ToolError
from bot.brain.tool_calls import maybe_await
from bot.search.results import InvalidCursor


def only_current(result: Any, turn: int) -> bool:
    """Whether ``result`` (in the conversation being answered) matched the message being
    answered alone: then it is no result at all."""
    return bool(result.matched_turns) and all(n == turn for n in result.matched_turns)


class SearchPages:
    """The search's pages behind one call: ``search`` (``SearchService``) with the
    call's ``query`` and ``filters`` (``SearchService.search`` keyword arguments)."""

    def __init__(self, search: Any, query: str, filters: dict[str, Any]) -> None:
        self.search = search
        self.query = query
        self.filters = filters
        self.next_cursor: str | None = None

    async def fetch(self, limit: int, cursor: str | None) -> Any:
        """The page of ``limit`` after ``cursor`` (None: the first); a cursor the search
        refuses is a :class:`ToolError` the model reads."""
        try:
            page = await maybe_await(
                self.search.search(self.query, limit=limit, cursor=cursor, **self.filters)
            )
        except InvalidCursor as exc:  # another query's, malformed, or too much changed
            raise ToolError(f"cursor: {exc}") from None
        self.next_cursor = page.next_cursor
        return page

    async def fill(self, page: Any, current: tuple[str, int] | None) -> list[Any]:
        """``page``'s results, and one from the next page when the message being answered
        drops out (it is stored before the reply and matches itself), so the model still
        reads a full page. Asking the search for ``limit + 1`` instead, as before session 41,
        would skip a conversation on the next page whenever nothing dropped out: the
        cursor continues after all it listed."""
        results = list(page.results)
        dropped = current is not None and any(
            r.conversation_id == current[0] and only_current(r, current[1]) for r in results
        )
        if dropped and self.next_cursor:
            results += (await self.fetch(1, self.next_cursor)).results
        return results


__all__ = ["SearchPages", "only_current"]
