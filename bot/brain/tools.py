"""The recall tools (seed 000 "Agent Recall Tools") the brain gives the model.

``search_conversations`` runs the project's search (bot.brain.recall_search);
``fetch_context`` reads turns from a transcript (bot.brain.recall_fetch). A tool never
raises into the brain, and everything it returns quotes stored conversations (text
written by anyone: a forwarded mail, a pasted web page), so it goes out wrapped as data,
not instructions: both are the plumbing of bot.brain.tool_calls.
"""

from __future__ import annotations

from typing import Any

from bot.brain.recall_fetch import FETCH_DEFAULT_TURNS, FETCH_SCHEMA, fetch_turns
from bot.brain.recall_search import GROUP_ONLY, SEARCH_SCHEMA, ConversationSearch
from bot.brain.tool_budget import ResultBudget, ToolError
from bot.brain.tool_calls import Tool, ToolHandler, execute, tool_map, wrap_data
from bot.config.model import AppConfig

# The plumbing lives in bot.brain.tool_calls; importers of this module use these names.
__all__ = ["RecallTools", "Tool", "ToolHandler", "execute", "tool_map", "wrap_data"]


class RecallTools:
    """``search_conversations`` and ``fetch_context`` over the project's services.

    ``services`` needs ``search`` (``SearchService``) and ``conversations``
    (``ConversationManager``: ``get``, ``read_lines``).
    """

    def __init__(self, config: AppConfig, services: Any) -> None:
        self.config = config
        self.services = services

    def tools(
        self, current: tuple[str, int] | None = None, *, only: str | None = None
    ) -> list[Tool]:
        """The tools for one reply; ``current`` (conversation id, turn number) is the
        message being answered, which search leaves out of its results; ``only``: the one
        conversation they may read (a group's own, whose members read the reply). Their
        results share one :class:`ResultBudget`: every round re-sends them all."""
        budget = ResultBudget()

        async def search(args: dict[str, Any]) -> str:
            return budget.take(
                "search_conversations", await self.search_conversations(args, current, only)
            )

        async def fetch(args: dict[str, Any]) -> str:
            if only is not None and args.get("conversationId") != only:
                raise ToolError(GROUP_ONLY)
            # a page cut to what is left beats a refusal: the note says what to fetch next
            return budget.take("fetch_context", await self.fetch_context(args, budget.left))

        where = (
            "this group chat's own earlier messages (its members read your reply: no other "
            "conversation is reachable here)"
            if only is not None
            else "the owner's past conversations (all channels)"
        )
        return [
            Tool(
                "search_conversations",
                f"Search {where} by meaning and keywords. Returns conversation ids, "
                "titles, snippets and matching turns; nextCursor when more match (pass "
                "it as cursor, with the same query and filters, for the next page).",
                SEARCH_SCHEMA,
                search,
            ),
            Tool(
                "fetch_context",
                "Load turns of one past conversation by id (from search_conversations). "
                f"Without turnRange returns the last {FETCH_DEFAULT_TURNS} turns.",
                FETCH_SCHEMA,
                fetch,
            ),
        ]

    async def search_conversations(
        self,
        args: dict[str, Any],
        current: tuple[str, int] | None = None,
        only: str | None = None,
    ) -> str:
        """The results of a ``search_conversations`` call (bot.brain.recall_search)."""
        return await ConversationSearch(self.config, self.services).run(args, current, only)

    async def fetch_context(self, args: dict[str, Any], max_tokens: int | None = None) -> str:
        """The turns ``args`` asks for, wrapped; at most ``max_tokens`` tokens, estimated
        (bot.brain.recall_fetch.fetch_turns)."""
        return await fetch_turns(self.services, self.config.owner.timezone, args, max_tokens)
