"""The Search panel in a real browser, on a keyword-only index (the test stack has no
embedding model): the conversation filter, a search that finds nothing, and query
syntax typed by the owner (paging to the end: test_web_browser_pages.py). Playwright
driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import browser, log_in, page, shot

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


async def search(page: Page, query: str) -> None:
    await page.click('#panel-nav button[data-panel="search"]')
    await page.fill("#search-input", query)
    await page.press("#search-input", "Enter")
    await expect(page.locator("#search-status")).not_to_have_text("Searching…")


async def found(page: Page) -> list[str]:
    ids: list[str] = await page.eval_on_selector_all(
        "#search-results .result", "(nodes) => nodes.map((n) => n.dataset.id)"
    )
    assert len(set(ids)) == len(ids), ids  # each conversation listed once
    return ids


async def test_search_within_the_conversation_in_view(page: Page, stack: Stack) -> None:
    # Regression: the panel had no conversation filter; the API's was out of reach.
    manager = stack.services.conversations
    other = await manager.create("web")
    await manager.append_turn(other.id, "user", "the quokka enclosure in the other one")
    mine = await manager.create("web")
    await manager.append_turn(mine.id, "user", "a quokka photo for the album")
    await manager.rename(mine.id, "Album")
    await log_in(page, stack)
    await page.goto(f"{stack.url}/#c={mine.id}")
    await expect(page.locator("body")).to_have_attribute("data-conversation", mine.id)
    await search(page, "quokka")
    assert set(await found(page)) >= {mine.id, other.id}
    await page.select_option("#search-conversation", label="In “Album”")
    await page.press("#search-input", "Enter")
    await expect(page.locator("#search-results .result")).to_have_count(1)
    assert await found(page) == [mine.id]
    # the chat moves on: the conversation chosen stays offered and chosen
    await page.click('#panel-nav button[data-panel="chat"]')
    await page.goto(f"{stack.url}/#c={other.id}")
    await expect(page.locator("body")).to_have_attribute("data-conversation", other.id)
    await page.click('#panel-nav button[data-panel="search"]')
    await expect(page.locator("#search-conversation")).to_have_value(mine.id)
    options = page.locator("#search-conversation option")
    await expect(options).to_have_count(3)  # every, the one in view, the one chosen


KEYWORD_ONLY = " Keyword search only: conversations that say it in other words are missed."


async def test_a_search_that_finds_nothing_says_so(page: Page, stack: Stack) -> None:
    # Regression: it read "0 conversations found (keyword)", like a fault of the search;
    # then (until session 39) "Nothing found" dropped that the search was keyword-only
    # (this stack has no embedding model), which /search and my-agent search say.
    await log_in(page, stack)
    await search(page, "zyzzyva")
    await expect(page.locator("#search-status")).to_have_text(
        "Nothing found for “zyzzyva”." + KEYWORD_ONLY
    )
    await page.select_option("#search-channel", "telegram")
    await page.fill("#search-from", "2026-01-01")
    await page.press("#search-input", "Enter")
    await expect(page.locator("#search-status")).to_have_text(
        "Nothing found for “zyzzyva” (Telegram, from 2026-01-01)." + KEYWORD_ONLY
    )
    await expect(page.locator("#search-results .result")).to_have_count(0)
    await expect(page.locator("#search-more")).to_be_hidden()


QUERIES = [
    "numbat AND",
    "numbat OR",
    "NOT numbat",
    '"numbat',
    'numbat"',
    '""',
    "numbat*",
    "*",
    "NEAR(numbat",
    "NEAR(numbat, burrow",
    "numbat:",
    "col:numbat",
    "(numbat",
    "numbat)",
    "^numbat",
    "-numbat",
    "numbat +burrow",
    "'; DROP TABLE turns; --",
    "\\",
]


async def test_query_syntax_typed_by_the_owner_is_searched_for(page: Page, stack: Stack) -> None:
    conv = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(conv.id, "user", "the numbat burrow survey")
    await log_in(page, stack)
    status = page.locator("#search-status")
    for query in QUERIES:
        await search(page, query)
        text = await status.inner_text()
        assert "fail" not in text.lower() and "error" not in text.lower(), (query, text)
        assert text.startswith(("Nothing", "1 conversation", "2 conversation")), (query, text)
    for query in ("numbat AND", '"numbat', "NEAR(numbat", "numbat*", "(numbat"):
        await search(page, query)
        assert conv.id in await found(page), query
    await shot(page, "20-search-syntax")
