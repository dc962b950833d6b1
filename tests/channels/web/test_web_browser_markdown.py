"""Replies as the model writes them, in a real browser: tables, nested lists, code inside
a list item, each rendered as such and never from HTML. Playwright driving Debian's
Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, expect

from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import TIMEOUT, browser, log_in, page, shot

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

REPLY = """Here is the comparison:
| Plan | Price | Notes |
|:-----|------:|:-----:|
| **Basic** | 5 | <img src=x onerror="window.__pwned=1"> |
| Pro | 12 |
| Team | 30 | one | two \\| three |

Steps:
1. Install it
   - with pip
   - or with apt
2. Run it:
   ```sh
   my-agent run
   ```
3. Done
"""


async def test_tables_and_nested_lists_render_as_such(page: Page, stack: Stack) -> None:
    # Regression: a table showed as its rows of pipes and dashes, and a nested list as
    # "- with pip" lines under its item (or as flat siblings of it, under a bullet).
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "compare the plans")
    await manager.append_turn(conv.id, "assistant", REPLY, turn_number=1)
    await log_in(page, stack)
    body = page.locator(".msg-assistant .msg-body")
    table = body.locator(".table-wrap > table")
    await expect(table.locator("thead th")).to_have_text(["Plan", "Price", "Notes"])
    await expect(table.locator("tbody tr")).to_have_count(3)
    first = table.locator("tbody tr").nth(0).locator("td")
    await expect(first.nth(0).locator("strong")).to_have_text("Basic")
    await expect(first.nth(1)).to_have_class("align-right")
    await expect(table.locator("thead th").nth(2)).to_have_class("align-center")
    # HTML in a cell is its text; a short row is padded, a long one keeps its extra text
    await expect(first.nth(2)).to_have_text('<img src=x onerror="window.__pwned=1">')
    assert await page.evaluate("window.__pwned") is None
    await expect(table.locator("tbody tr").nth(1).locator("td")).to_have_text(["Pro", "12", ""])
    await expect(table.locator("tbody tr").nth(2).locator("td").nth(2)).to_have_text(
        "one | two | three"
    )
    steps = body.locator("ol").first
    await expect(steps.locator(":scope > li")).to_have_count(3)
    nested = steps.locator(":scope > li").nth(0).locator("ul > li")
    await expect(nested).to_have_text(["with pip", "or with apt"])
    code = steps.locator(":scope > li").nth(1).locator("pre code")
    await expect(code).to_have_text("my-agent run")
    await shot(page, "15-table-and-nested-list")


async def test_a_wide_table_scrolls_inside_its_message_on_a_phone(
    browser: Browser, stack: Stack
) -> None:
    manager = stack.services.conversations
    conv = await manager.create("web")
    header = "| " + " | ".join(f"column{n}" for n in range(30)) + " |"
    rule = "|" + "---|" * 30
    row = "| " + " | ".join("value" for _ in range(30)) + " |"
    await manager.append_turn(conv.id, "assistant", f"{header}\n{rule}\n{row}", turn_number=1)
    context = await browser.new_context(viewport={"width": 390, "height": 800})
    context.set_default_timeout(TIMEOUT)
    phone = await context.new_page()
    try:
        await log_in(phone, stack)
        await expect(phone.locator(".msg-body table th")).to_have_count(30)
        width = await phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
    finally:
        await context.close()
