"""The order of a conversation's turns in a real browser: two tabs on one conversation
and a reload show the same turns, each once, in the transcript's order, also when a
message is sent while a reply is being written. Playwright driving Debian's Chromium
against the real core (see test_web_browser.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.channels.web.conftest import GatedBrain, start_stack, stop_stack
from tests.channels.web.test_web_browser import TIMEOUT, browser, log_in, send

__all__ = ["browser"]  # fixture shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

SHOWN = """() => Array.from(document.querySelectorAll('#message-items .msg'),
    (m) => m.dataset.role + ': ' + m.querySelector('.msg-body').textContent)"""


async def shown(page: Page) -> list[str]:
    return list(await page.evaluate(SHOWN))


async def test_a_message_sent_during_a_reply_keeps_its_place_in_every_tab(
    browser: Browser, tmp_path: Path
) -> None:
    # Regression: a message sent while a reply streamed was shown under that reply, but
    # the reply is written to the transcript when complete, after it: the tabs showed
    # question 1, answer 1, question 2 and a reload question 1, question 2, answer 1.
    brain = GatedBrain()
    stack = await start_stack(tmp_path / "order", brain=brain)
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT)
    try:
        first, second = await context.new_page(), await context.new_page()
        await log_in(first, stack)
        await send(first, "question one")
        await expect(first.locator(".msg-assistant.streaming")).to_contain_text("Thinking")
        await second.goto(first.url)
        await expect(second.locator(".msg-assistant.streaming")).to_contain_text("Thinking")
        await send(second, "question two")
        for page in (first, second):
            await expect(page.locator(".msg-user")).to_have_count(2)
        brain.release.set()
        for page in (first, second):
            await expect(page.locator(".msg-assistant:not(.streaming)")).to_have_count(2)
        live = [await shown(first), await shown(second)]
        await first.reload()
        await expect(first.locator(".msg-assistant")).to_have_count(2)
        stored = await shown(first)
        assert stored[:3] == [
            "user: question one",
            "user: question two",
            "assistant: Thinking about it — done.",
        ]
        assert live == [stored, stored]
    finally:
        brain.release.set()
        await context.close()
        await stop_stack(stack)
