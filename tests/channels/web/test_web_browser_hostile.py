"""Messages built to hurt the dashboard, in a real browser: whatever a stranger (or a
pasted log) puts in a message, the tab shows it promptly and keeps working. Playwright
driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import Page, expect

from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import browser, log_in, page

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

# Each about 1 MB, or small but deeply nested: shapes the renderer once spent seconds to
# minutes on (an opening mark searched for its closing one to the end of the line, from
# every mark) or overflowed the stack with (one recursive call per level of nesting).
HOSTILE = {
    "unclosed italics": "'*a '.repeat(350000)",
    "unclosed bold, many lines": "('**a '.repeat(333) + '\\n').repeat(780)",
    "unclosed strike": "'~~a '.repeat(250000)",
    "unclosed links": "'[a](b'.repeat(200000)",
    "open brackets": "'[a'.repeat(500000)",
    "backtick run": "'`'.repeat(20000) + 'a'",
    "nested emphasis": "'*_'.repeat(250000) + 'x' + '_*'.repeat(250000)",
    "nested quotes": "'>'.repeat(1000000)",
}


async def test_a_deeply_nested_message_does_not_break_its_conversation(
    page: Page, stack: Stack
) -> None:
    # Regression: 5,000 ">" made the renderer recurse 5,000 times and overflow the stack;
    # the conversation holding that message could not be opened at all.
    await stack.deliver_telegram(">" * 5000 + " deep\n\nand the line after it", name="Hanan")
    await log_in(page, stack)
    item = page.locator('#conversation-list .conv[data-channel="telegram"]')
    await item.locator("button").click()
    await expect(page.locator(".msg-user").first).to_contain_text("and the line after it")
    await expect(page.locator(".msg-user").first).to_contain_text(">>> deep")


async def test_hostile_markdown_renders_in_well_under_a_second(page: Page, stack: Stack) -> None:
    await log_in(page, stack)
    for name, source in HOSTILE.items():
        timed = await asyncio.wait_for(
            page.evaluate(
                f"""() => {{
                    const text = {source};
                    const start = performance.now();
                    const shown = document.createElement('div');
                    shown.appendChild(renderMarkdown(text));
                    return [performance.now() - start, shown.textContent.length, text.length];
                }}"""
            ),
            30,
        )
        elapsed, shown_chars, length = timed
        # A second or more froze the tab (the limit leaves room for a slow machine).
        assert elapsed < 1500, (name, elapsed)
        assert shown_chars >= length // 2, name  # the text is shown, not dropped
