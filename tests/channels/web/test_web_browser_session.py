"""The dashboard's session and connection as the owner lives them in a real browser:
logging out, the socket dropping and coming back, a tab joining a reply mid-stream.
Playwright driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import pytest
from playwright.async_api import Page

from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import browser, log_in, page

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


async def test_log_out_ends_the_session(page: Page, stack: Stack) -> None:
    # Regression: the Log out form was refused with 403 "bad origin": under the page's
    # no-referrer policy Chromium sends a form POST with "Origin: null".
    await log_in(page, stack)
    await page.click(".logout button")
    await page.wait_for_url(f"{stack.url}/login")
    await page.goto(f"{stack.url}/")
    await page.wait_for_url(f"{stack.url}/login")
    assert len(stack.channel.sessions) == 0
