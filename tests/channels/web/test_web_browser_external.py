"""The External panel in a real browser: every party reachable, a page at a time.
Playwright driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, Route, expect

from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import browser, log_in, page

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


async def test_older_parties_adds_the_next_page(page: Page, stack: Stack) -> None:
    # Regression (session 41): the panel showed the 200 most recently active parties and
    # no more: the longest-waiting escalations could not be reached from it. Pages of two
    # here (the page's 200 asked for as 2, rather than 201 parties written).
    for n in range(3):
        await stack.deliver_telegram(f"hello {n}", sender_id=f"60{n}", name=f"Party {n}")
    parties = {p.party_key: p for p in await stack.services.external.list_parties()}
    for key in ("601", "602"):  # all answered but the oldest
        await stack.services.external.resolve_escalations(parties[key].id, "replied")
    asked: list[str] = []

    async def small_pages(route: Route) -> None:
        asked.append(route.request.url)
        await route.continue_(url=re.sub(r"limit=\d+", "limit=2", route.request.url))

    await page.route("**/api/external?*", small_pages)
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="external"]')
    cards = page.locator("#external-list article.party")
    await expect(cards).to_have_count(2)
    # the one waiting for the owner first, though the least recently active
    await expect(cards.first).to_contain_text("Party 0")
    await expect(cards.first.locator(".escalation")).to_have_count(1)
    await expect(page.locator("#external-list .list-more")).to_contain_text("2 of 3 shown")
    await page.get_by_role("button", name="Older parties").click()
    await expect(cards).to_have_count(3)
    await expect(page.get_by_role("button", name="Older parties")).to_have_count(0)
    assert "offset=2" in asked[-1]
    texts = await cards.all_inner_texts()
    assert sorted(next(f"Party {n}" for n in range(3) if f"Party {n}" in t) for t in texts) == [
        "Party 0",
        "Party 1",
        "Party 2",
    ]  # each once
