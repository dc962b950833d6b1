"""Where the chat stays as things arrive, in a real browser: a streamed reply, a turn from
elsewhere or a note follow the bottom only while the view is at the bottom; the owner
scrolled up to read is left there, and the owner's own message is shown where it goes.
Playwright driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from bot.brain.base import BrainReply, BrainRequest
from tests.channels.web.conftest import Stack, start_stack, stop_stack
from tests.channels.web.test_web_browser import TIMEOUT, browser, log_in, page, send

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

TALL = "".join(f"Paragraph {n} of the story.\n\n" for n in range(120))  # far taller than the view


class SteppedBrain:
    """Streams each delta the test puts in ``deltas``; ``None`` ends the reply."""

    name = "stepped"

    def __init__(self) -> None:
        self.deltas: asyncio.Queue[str | None] = asyncio.Queue()

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        text = ""
        while (delta := await self.deltas.get()) is not None:
            text += delta
            if on_delta is not None:
                await on_delta(delta)
        return BrainReply(text=text, model="stepped")

    async def close(self) -> None:
        return None


@pytest_asyncio.fixture(loop_scope="module")
async def stepped(tmp_path: Path) -> AsyncIterator[tuple[Stack, SteppedBrain]]:
    brain = SteppedBrain()
    s = await start_stack(tmp_path / "stepped", brain=brain)
    try:
        yield s, brain
    finally:
        brain.deltas.put_nowait(None)
        await stop_stack(s)


async def scroll_top(page: Page) -> float:
    return float(await page.locator("#messages").evaluate("(box) => box.scrollTop"))


async def scroll_to(page: Page, top: int) -> None:
    await page.locator("#messages").evaluate(f"(box) => {{ box.scrollTop = {top}; }}")


async def at_bottom(page: Page) -> bool:
    return bool(
        await page.locator("#messages").evaluate(
            "(box) => box.scrollHeight - box.scrollTop - box.clientHeight < 2"
        )
    )


async def test_scrolling_up_while_a_reply_streams_stays_put(
    browser: Browser, stepped: tuple[Stack, SteppedBrain]
) -> None:
    # Regression (session 39): every streamed word pulled the view back to the bottom,
    # and the owner could not read the beginning of a long reply while it was written.
    stack, brain = stepped
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT)
    try:
        page = await context.new_page()
        await log_in(page, stack)
        await send(page, "Tell me a long story")
        await brain.deltas.put(TALL)
        streaming = page.locator(".msg.streaming .msg-body")
        await expect(streaming).to_contain_text("Paragraph 119")
        assert await at_bottom(page)  # followed while the owner stayed at the bottom
        await scroll_to(page, 300)
        await brain.deltas.put("The middle of the story.\n\n")
        await expect(streaming).to_contain_text("The middle of the story.")
        assert abs(await scroll_top(page) - 300) < 2
        # back at the bottom (or near it), the view follows the reply again
        await page.locator("#messages").evaluate(
            "(box) => { box.scrollTop = box.scrollHeight - box.clientHeight - 40; }"
        )
        await brain.deltas.put("Chapter two.\n\n" + TALL)
        await expect(streaming).to_contain_text("Chapter two.")
        assert await at_bottom(page)
    finally:
        await brain.deltas.put(None)
        await context.close()


async def conversation_of(stack: Stack, channel: str, turns: int) -> str:
    manager = stack.services.conversations
    rec = await manager.create(channel=channel)
    for n in range(1, turns + 1):
        for role in ("user", "assistant"):
            await manager.append_turn(rec.id, role, f"{role} says {n}: " + "words " * 40)
    return rec.id


async def test_a_turn_from_elsewhere_leaves_the_owner_reading_higher_up(
    page: Page, stack: Stack
) -> None:
    # Regression (session 39): a turn from another tab, or from Telegram in a read-only
    # conversation, pulled a view scrolled up back to the bottom.
    cid = await conversation_of(stack, "telegram", 20)  # one page: no older page loads
    await log_in(page, stack)
    await page.goto(f"{stack.url}/#c={cid}")
    await page.reload()
    await expect(page.locator(".msg-assistant")).to_have_count(20)
    assert await at_bottom(page)  # opened at its end
    await scroll_to(page, 400)
    await stack.services.conversations.append_turn(cid, "user", "a question from Telegram")
    await expect(page.locator(".msg-user").last).to_contain_text("a question from Telegram")
    assert abs(await scroll_top(page) - 400) < 2
    await scroll_to(page, 10**6)
    await stack.services.conversations.append_turn(cid, "assistant", "its answer")
    await expect(page.locator(".msg-assistant").last).to_contain_text("its answer")
    assert await at_bottom(page)


async def test_the_owners_own_message_is_shown_from_higher_up(page: Page, stack: Stack) -> None:
    cid = await conversation_of(stack, "web", 20)
    await log_in(page, stack)
    await page.goto(f"{stack.url}/#c={cid}")
    await page.reload()
    await expect(page.locator(".msg-assistant")).to_have_count(20)
    await scroll_to(page, 400)
    await send(page, "My own question")
    mine = page.locator(".msg-user").last
    await expect(mine).to_contain_text("My own question")
    await expect(mine).to_be_in_viewport()
