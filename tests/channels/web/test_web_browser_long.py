"""A conversation of 5,000 turns in a real browser: it opens on its latest page, older
pages come in as the owner scrolls up (what was in view stays in view), and a search
result opens it around an old turn, from where newer pages come in as the owner scrolls
down. Playwright driving Debian's Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Page, Route, expect

from bot.transcript_lines import turn_line
from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import browser, log_in, page

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

TURNS = 5_000


async def long_conversation(stack: Stack) -> str:
    rec = await stack.services.conversations.create(channel="web")
    lines = [
        turn_line(role, f"{role} says {n}: " + "words " * 12, n)
        for n in range(1, TURNS + 1)
        for role in ("user", "assistant")
    ]
    await stack.services.store.append(rec.id, lines)
    return rec.id


async def turns_shown(page: Page) -> list[int]:
    """The turn numbers shown, in order; each turn (question and answer) shown once."""
    shown: list[list[Any]] = await page.eval_on_selector_all(
        "#message-items .msg[data-turn]",
        "(nodes) => nodes.map((n) => [Number(n.dataset.turn), n.dataset.role])",
    )
    assert len({tuple(s) for s in shown}) == len(shown), shown
    return [n for n, _ in shown]


async def test_scrolling_up_a_5000_turn_conversation_loads_older_pages_in_place(
    page: Page, stack: Stack
) -> None:
    # Regression: each older page of 50 took a click on "Load older messages".
    cid = await long_conversation(stack)
    await log_in(page, stack)
    await page.goto(f"{stack.url}/#c={cid}")
    await page.reload()
    await expect(page.locator("#message-items .msg")).to_have_count(50)  # the latest page only
    assert (await turns_shown(page))[-1] == TURNS
    for _ in range(3):  # three scrolls to the top, three older pages
        shown = await page.locator("#message-items .msg").count()
        top = page.locator("#message-items .msg").first
        anchor = f'#message-items .msg[data-turn="{await top.get_attribute("data-turn")}"]'
        await page.locator("#messages").evaluate("(box) => { box.scrollTop = 0; }")
        await expect(page.locator("#message-items .msg")).to_have_count(shown + 50)
        # what was at the top is still in view, not pushed away by the page above it
        await expect(page.locator(anchor + '[data-role="user"]')).to_be_in_viewport()
    numbers = await turns_shown(page)
    assert numbers == sorted(numbers) and numbers[0] == TURNS - 99


async def open_search_result(page: Page, stack: Stack, cid: str, turn: int) -> None:
    """Log in and open ``cid`` around ``turn`` as a search result does (the search
    itself is answered by a stand-in: the index holds nothing of a transcript appended
    directly)."""
    result: dict[str, Any] = {
        "conversation_id": cid,
        "title": "The long one",
        "channel": "web",
        "snippet": f"user says {turn}",
        "focus_turn": turn,
        "matched_turns": [turn],
        "turn_range": str(turn),
        "topics": [],
    }

    async def answer(route: Route) -> None:
        await route.fulfill(
            json={"results": [result], "next_cursor": None, "total": 1, "total_exact": True}
        )

    await page.route("**/api/search?q=*", answer)
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="search"]')
    await page.fill("#search-input", f"says {turn}")
    await page.press("#search-input", "Enter")
    await page.click(".result-title")
    matched = page.locator(f'#message-items .msg.matched[data-turn="{turn}"]')
    await expect(matched.first).to_be_visible()


async def scroll_to_bottom_keeps_the_view(page: Page) -> None:
    """Scroll to the bottom; the newer page that brings goes in under what is in view
    without moving it."""
    shown = await page.locator("#message-items .msg").count()
    last = page.locator("#message-items .msg").last
    anchor = page.locator(
        f'#message-items .msg[data-turn="{await last.get_attribute("data-turn")}"]'
        f'[data-role="{await last.get_attribute("data-role")}"]'
    )
    # measured in the same task as the scroll: its event, and so the page it asks for,
    # comes after
    before = await anchor.evaluate("""(n) => {
        const box = document.getElementById("messages");
        box.scrollTop = box.scrollHeight;
        return n.getBoundingClientRect().top;
    }""")
    await expect(page.locator("#message-items .msg")).not_to_have_count(shown)
    after = await anchor.evaluate("(n) => n.getBoundingClientRect().top")
    assert abs(after - before) < 1, (before, after)


async def test_scrolling_down_from_an_old_turn_loads_newer_pages_in_place(
    page: Page, stack: Stack
) -> None:
    # Regression: opened at an old turn (a search result's "open at turn N"), newer turns
    # came only through "Jump to the latest messages", not by scrolling down.
    cid = await long_conversation(stack)
    await open_search_result(page, stack, cid, 1234)
    for _ in range(3):
        await scroll_to_bottom_keeps_the_view(page)
    numbers = await turns_shown(page)
    # the page around 1234 and three newer pages, of 25 turns each
    assert numbers == sorted(numbers) and numbers[-1] > 1234 + 3 * 24, numbers[-5:]
    assert set(numbers) == set(range(numbers[0], numbers[-1] + 1))  # no turn skipped
    await expect(page.locator("#load-newer")).to_be_visible()


async def test_scrolling_down_to_the_end_shows_new_turns_again(page: Page, stack: Stack) -> None:
    cid = await long_conversation(stack)
    await open_search_result(page, stack, cid, TURNS - 50)
    while await page.locator("#load-newer").is_visible():
        await scroll_to_bottom_keeps_the_view(page)
    numbers = await turns_shown(page)
    assert numbers == sorted(numbers) and numbers[-1] == TURNS
    assert set(numbers) == set(range(numbers[0], TURNS + 1))
    # up to date: a new turn is shown under the last one, as in a conversation opened
    # at its end (behind, new turns were set aside)
    await stack.services.conversations.append_turn(cid, "user", "one more question")
    await expect(page.locator("#message-items .msg").last).to_contain_text("one more question")


async def test_a_search_result_opens_an_old_turn_of_a_long_conversation(
    page: Page, stack: Stack
) -> None:
    cid = await long_conversation(stack)
    await open_search_result(page, stack, cid, 1234)
    matched = page.locator('#message-items .msg.matched[data-turn="1234"]')
    await expect(matched.first).to_be_in_viewport()
    await expect(page.locator("#load-newer")).to_be_visible()
    assert (await turns_shown(page))[0] > 1200  # the page around 1234 begins after 1200
    await page.locator("#messages").evaluate("(box) => { box.scrollTop = 0; }")
    await expect(page.locator('#message-items .msg[data-turn="1200"]').first).to_be_attached()
    await expect(matched.first).to_be_attached()
    numbers = await turns_shown(page)
    assert numbers == sorted(numbers), numbers
    await page.click("#load-newer")
    await expect(page.locator(f'#message-items .msg[data-turn="{TURNS}"]').first).to_be_attached()
