"""An error from the brain in a real browser: shown once, marked as an error (also after a
reload), and the question can be asked again; a reply of the offline brain is labelled.
Playwright driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from bot.brain.base import BrainReply, BrainRequest
from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import browser, log_in, page, send, shot
from tests.channels.web.test_web_browser_phone import phone_on

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


class FailsOnce:
    """A brain that fails on its first question, after a first word, then answers."""

    name = "fails-once"

    def __init__(self) -> None:
        self.calls = 0

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        self.calls += 1
        if self.calls == 1:
            if on_delta is not None:
                await on_delta("Let me look")
            raise RuntimeError("400 invalid_request_error: the prompt is too long")
        return BrainReply(text="Milk, eggs and bread.", model="claude-test")

    async def close(self) -> None:
        return None


async def test_a_failed_answer_is_marked_once_and_can_be_asked_again(
    browser: Browser, tmp_path: Path
) -> None:
    # Regression: the apology written when the model failed looked like any answer,
    # with nothing to do about it but to type the question again.
    async with phone_on(browser, tmp_path / "d", FailsOnce()) as (_stack, page):
        await expect(page.locator("#offline-badge")).to_be_hidden()  # a model answers
        await send(page, "What is on the list?")
        failed = page.locator(".msg-assistant.msg-error")
        await expect(failed).to_have_count(1)
        await expect(failed).to_contain_text("not answered: an error")
        await expect(failed).to_contain_text("something went wrong")
        await expect(page.locator(".msg-assistant")).to_have_count(1)  # the cut-off start gone
        await shot(page, "17-phone-brain-error")
        await page.reload()
        await expect(failed).to_have_count(1)
        await failed.get_by_role("button", name="Ask again").click()
        await expect(page.locator(".msg-user .msg-body")).to_have_text(
            ["What is on the list?", "What is on the list?"]
        )
        await expect(page.locator(".msg-assistant:not(.msg-error) .msg-body")).to_have_text(
            "Milk, eggs and bread."
        )
        await expect(failed).to_have_count(1)


async def test_a_reply_of_the_offline_brain_is_labelled_beside_its_name(
    page: Page, stack: Stack
) -> None:
    # Regression: only its first line said so; "Assistant" above it read as a model's.
    await log_in(page, stack)
    await send(page, "what did we say about the garden?")
    reply = page.locator(".msg-assistant:not(.streaming)").last
    await expect(reply.locator(".msg-meta .tag")).to_have_text("offline · no model")
    await expect(reply.locator(".msg-body")).to_contain_text("offline mode")
    await expect(page.locator(".msg-user .msg-meta .tag")).to_have_count(0)
    # The header says so too, beside the model selector (it read "sonnet" alone).
    badge = page.locator("#offline-badge")
    await expect(badge).to_be_visible()
    await expect(badge).to_have_text("offline · no model")
    await expect(badge).to_have_attribute("title", re.compile("No API key"))
