"""``search_conversations`` pages: the model continues a broad search with ``cursor``."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.tools import RecallTools, execute, tool_map
from bot.config import AppConfig
from tests.brain.conftest import seed_conversation
from tests.brain.test_tools import request, tool_results, unwrap

QUERY = {"query": "invoice reminder", "limit": 25}


async def _sixty(core: SimpleNamespace) -> set[str]:
    return {
        await seed_conversation(core, [("user", f"invoice reminder number {n} for client {n}")])
        for n in range(60)
    }


async def test_the_model_pages_through_sixty_results_without_repeats_or_gaps(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression (session 41): the tool had no cursor, so the model read at most the 25
    # best conversations of a broad query; the rest were out of its reach. The message
    # being answered matches the query too: it drops out of its page, which is topped up
    # from the next one (asking the search for one more, the cursor then skipped one).
    past = await _sixty(core)
    asking = "Which invoice reminder did I send?"
    conv = await seed_conversation(core, [("user", asking)])
    pages: list[dict] = []

    def next_page(body: dict) -> Scripted:
        (result,) = tool_results(body)
        assert result["is_error"] is False, result["content"]
        found = unwrap(result["content"])
        pages.append(found)
        if "nextCursor" not in found:
            return Scripted([Block("text", text=f"{sum(len(p['results']) for p in pages)}")])
        args = {**QUERY, "cursor": found["nextCursor"]}
        return Scripted([Block("tool_use", name="search_conversations", input=args)])

    fake_api.push_tool_use("search_conversations", QUERY)
    for _ in range(3):
        fake_api.push(next_page)
    reply = await brain.reply(dataclasses.replace(request(conv, asking), turn_number=1))

    assert reply.text == "60"
    assert [len(p["results"]) for p in pages] == [25, 25, 10]
    listed = [r["conversationId"] for p in pages for r in p["results"]]
    assert len(listed) == len(set(listed)) == 60  # no repeats
    assert set(listed) == past  # no gaps, and never the message being answered


async def test_a_cursor_of_another_search_or_no_string_is_an_error_result(
    config: AppConfig, core: SimpleNamespace
) -> None:
    await _sixty(core)
    await seed_conversation(core, [("user", "pumpkin soup recipe")])
    tools = tool_map(RecallTools(config, core).tools())
    content, err = await execute(tools, "search_conversations", QUERY)
    cursor = unwrap(content)["nextCursor"]
    content, err = await execute(
        tools, "search_conversations", {"query": "client", "limit": 25, "cursor": cursor}
    )
    assert err and "cursor: this cursor belongs to another search" in content
    content, err = await execute(tools, "search_conversations", {**QUERY, "cursor": 3})
    assert err and "cursor must be" in content
    # a page with nothing after it names no next one
    content, err = await execute(
        tools, "search_conversations", {"query": "pumpkin", "cursor": None}
    )
    assert not err and "nextCursor" not in unwrap(content)
