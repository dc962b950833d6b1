"""Slash commands typed in the dashboard's chat box, in a real browser (Playwright driving
Debian's Chromium against the real core, see test_web_browser.py): how their answers
look and what they link to."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from playwright.async_api import Page, expect

from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import browser, log_in, page, send, shot

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


async def test_search_typed_in_the_chat_links_the_conversations_it_finds(
    page: Page, stack: Stack
) -> None:
    # Regression: "/search" in the chat box listed "Untitled" and each conversation's id
    # as plain text; nothing could be opened from it.
    manager = stack.services.conversations
    titled = await manager.create("web")
    for n in range(1, 4):
        await manager.append_turn(titled.id, "user", f"note {n} about the garden")
    await manager.append_turn(titled.id, "user", "the walnut harvest is late this year")
    await manager.rename(titled.id, "Orchard plans")
    await stack.deliver_telegram("walnut tree pruning advice")
    await log_in(page, stack)
    await send(page, "/search walnut")
    notice = page.locator(".msg-notice").last
    links = notice.locator("a.found-title")
    await expect(links).to_have_count(2)
    await expect(notice).to_contain_text("Results for 'walnut'")
    await expect(links.filter(has_text="Orchard plans")).to_have_count(1)
    await expect(links.filter(has_text="Hanan · New conversation")).to_have_count(1)
    assert "Untitled" not in await notice.inner_text()
    assert "conv-" not in await notice.inner_text()
    await shot(page, "20-search-in-chat")
    await links.filter(has_text="Orchard plans").click()
    await expect(page.locator("body")).to_have_attribute("data-conversation", titled.id)
    await expect(page.locator("#chat-title")).to_have_text("Orchard plans")
    await expect(page.locator(".msg.matched")).to_contain_text("walnut harvest")


async def test_search_in_the_chat_marks_the_unrelated_and_says_how_many_are_shown(
    page: Page, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the chat listed five linked results and nothing else, where the other
    # channels mark those listed after the matches "(probably unrelated)" and end with
    # "5 shown: 2 of 2 matches, 3 of 32 probably unrelated": the owner took unrelated
    # conversations for hits, and five for all there were.
    manager = stack.services.conversations
    for n in range(7):
        rec = await manager.create("web")
        await manager.append_turn(rec.id, "user", f"hazelnut hedge number {n}")
    search = stack.services.search.search

    async def nearest(*args: Any, **kwargs: Any) -> Any:
        page = await search(*args, **kwargs)
        first, *rest = page.results
        marked = [first, *(replace(r, match="loose") for r in rest)]
        return replace(page, method="hybrid", results=marked, loose=page.total - 1)

    monkeypatch.setattr(stack.services.search, "search", nearest)
    await log_in(page, stack)
    await send(page, "/search hazelnut")
    notice = page.locator(".msg-notice").last
    await expect(notice.locator("a.found-title")).to_have_count(5)
    await expect(notice.locator(".found-unrelated")).to_have_count(4)
    await expect(notice.locator(".found-count")).to_have_text(
        "5 shown: 1 of 1 match, 4 of 6 probably unrelated."
    )


async def test_the_status_box_has_no_blank_lines(page: Page, stack: Stack) -> None:
    # Regression: the paragraph's default 1em margins left an empty line above and below
    # /status's text inside its box.
    await log_in(page, stack)
    await send(page, "/status")
    notice = page.locator(".msg-notice").last
    await expect(notice).to_contain_text("Brain:")
    gaps = await notice.evaluate("""(box) => {
        const outer = box.getBoundingClientRect();
        const style = getComputedStyle(box);
        const inset = (side) =>
            parseFloat(style["padding" + side]) + parseFloat(style["border" + side + "Width"]);
        const range = document.createRange();
        range.selectNodeContents(box);
        const text = range.getBoundingClientRect();
        return {
            top: text.top - outer.top - inset("Top"),
            bottom: outer.bottom - text.bottom - inset("Bottom"),
        };
    }""")
    assert gaps["top"] <= 1 and gaps["bottom"] <= 1, gaps
    await shot(page, "21-status-in-chat")


async def test_status_typed_in_a_conversation_links_it_by_its_title(
    page: Page, stack: Stack
) -> None:
    # Regression: /status on the web named the conversation by its internal id
    # ("Conversation: Boiler service (conv-01…)"), which the page cannot open.
    manager = stack.services.conversations
    boiler = await manager.create("web")
    await manager.append_turn(boiler.id, "user", "the boiler needs its yearly service")
    await manager.rename(boiler.id, "Boiler service")
    await log_in(page, stack)
    await page.goto(f"{stack.url}/#c={boiler.id}")
    await expect(page.locator("body")).to_have_attribute("data-conversation", boiler.id)
    await send(page, "/status")
    notice = page.locator(".msg-notice").last
    await expect(notice).to_contain_text("Brain:")
    link = notice.locator("a.status-conversation")
    await expect(link).to_have_text("Boiler service")
    await expect(link).to_have_attribute("href", f"#c={boiler.id}")
    assert "conv-" not in await notice.inner_text()
    await shot(page, "22-status-links-the-conversation")
    await link.click()  # opens it (here: the one in view, loaded again)
    await expect(page.locator("#chat-title")).to_have_text("Boiler service")


async def test_model_and_rename_typed_in_a_new_chat_set_the_conversation_it_starts(
    page: Page, stack: Stack
) -> None:
    # Regression: "/model opus" or "/rename X" typed in the empty chat created a
    # conversation for its answer (left empty in the list); the selector still read the
    # default, the header "New conversation".
    await log_in(page, stack)
    await expect(page.locator("#empty-state")).to_be_visible()
    await send(page, "/model opus")
    await expect(page.locator(".msg-notice").last).to_contain_text("Model switched to opus")
    await send(page, "/rename Garden plans")
    await expect(page.locator(".msg-notice").last).to_contain_text("Garden plans")
    await expect(page.locator("#model-select")).to_have_value("opus")
    await expect(page.locator("#chat-title")).to_have_text("Garden plans")
    await expect(page.locator(".conv")).to_have_count(0)
    await send(page, "tomatoes by the fence, with opus")
    await expect(page.locator(".conv")).to_have_count(1)
    await expect(page.locator(".conv")).to_contain_text("Garden plans")
    await expect(page.locator("#model-select")).to_have_value("opus")
    await expect(page.locator("#chat-title")).to_have_text("Garden plans")
    records = await stack.services.conversations.list()
    assert [(r.model, r.title, r.manually_named) for r in records] == [
        ("opus", "Garden plans", True)
    ]


async def test_new_typed_in_a_conversation_says_what_it_did(page: Page, stack: Stack) -> None:
    # Regression: the answer to "/new" went to the tab before the new conversation was
    # shown there, and showing it wiped the answer: "Started a new conversation" and
    # "This conversation is new already" were never seen in the dashboard.
    await log_in(page, stack)
    await page.click("#new-conversation")
    await send(page, "Plan the garden")
    await expect(page.locator(".msg-assistant:not(.streaming)")).to_have_count(1)
    first = await page.get_attribute("body", "data-conversation")
    await send(page, "/new")
    notice = page.locator(".msg-notice")
    await expect(notice).to_have_count(1)
    await expect(notice).to_contain_text("Started a new conversation")
    assert await page.get_attribute("body", "data-conversation") != first
    await expect(page.locator(".msg-user")).to_have_count(0)
    await send(page, "/new")
    await expect(notice).to_have_count(1)
    await expect(notice).to_contain_text("This conversation is new already")
