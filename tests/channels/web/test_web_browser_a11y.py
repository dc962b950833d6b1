"""The dashboard without a mouse, with a screen reader, in dark mode: keyboard focus in
the conversation list and search results, replies announced, readable contrast.
Playwright driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.channels.web.conftest import Stack
from tests.channels.web.test_web_browser import (
    TIMEOUT,
    browser,
    log_in,
    page,
    send,
    shot,
    streaming_tab,
)

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

# Every visible element with text of its own whose colour against the background it is
# drawn on (the first opaque one up its ancestors) is under WCAG AA: 4.5:1, 3:1 for large
# text. Disabled controls are exempt, as WCAG has them.
LOW_CONTRAST = """() => {
    const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => {
        const f = (c) => {
            c /= 255;
            return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
        };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const background = (node) => {
        for (let n = node; n; n = n.parentElement) {
            const c = rgb(getComputedStyle(n).backgroundColor);
            if (c.length === 3 || (c.length === 4 && c[3] > 0.9)) return c.slice(0, 3);
        }
        return [255, 255, 255];
    };
    const bad = [];
    for (const node of document.querySelectorAll("body *")) {
        const own = Array.from(node.childNodes).some((c) => c.nodeType === 3 && c.data.trim());
        const skipped = node.closest("[hidden], .sr-only, :disabled, pre, svg");
        if (!own || skipped || !node.getClientRects().length) continue;
        const style = getComputedStyle(node);
        if (style.visibility === "hidden" || Number(style.opacity) < 1) continue;
        const a = lum(rgb(style.color).slice(0, 3)), b = lum(background(node));
        const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
        const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
        const large = size >= 24 || (bold && size >= 18.66);
        const text = node.textContent.trim().slice(0, 30);
        if (ratio < (large ? 3 : 4.5))
            bad.push(`${node.tagName}.${node.className} "${text}" ${ratio.toFixed(2)}`);
    }
    return bad;
}"""


async def test_keyboard_focus_stays_in_the_list_as_turns_arrive(page: Page, stack: Stack) -> None:
    # Regression: the list is rebuilt on every turn that arrives (and every 30 s); the
    # button the keyboard was on went away, and focus fell back to the page.
    manager = stack.services.conversations
    convs = []
    for n in range(3):
        conv = await manager.create("web")
        await manager.append_turn(conv.id, "user", f"conversation {n}")
        convs.append(conv)
    await log_in(page, stack)
    first = page.locator(f'.conv[data-id="{convs[0].id}"] button')
    await first.focus()
    await manager.append_turn(convs[2].id, "user", "a turn arriving elsewhere")
    await expect(page.locator(f'.conv[data-id="{convs[2].id}"] .conv-time')).to_contain_text(
        "2 turns"
    )
    focused = await page.evaluate("document.activeElement.closest('.conv')?.dataset.id")
    assert focused == convs[0].id


async def notes_listed(page: Page, stack: Stack, subject: str, count: int) -> Locator:
    """``count`` conversations about ``subject``, the dashboard open on them: the list's
    buttons, the first one focused."""
    manager = stack.services.conversations
    for n in range(count):
        conv = await manager.create("web")
        await manager.append_turn(conv.id, "user", f"{subject}, note {n}")
    await log_in(page, stack)
    buttons = page.locator(".conv button")
    await expect(buttons).to_have_count(count)
    await buttons.first.focus()
    return buttons


async def results_found(page: Page, query: str, count: int) -> Locator:
    """The search panel's ``count`` results for ``query``, the first one focused."""
    await page.click('#panel-nav button[data-panel="search"]')
    await page.fill("#search-input", query)
    await page.press("#search-input", "Enter")
    results = page.locator(".result-title")
    await expect(results).to_have_count(count)
    await results.first.focus()
    return results


async def test_arrow_keys_move_through_the_list_and_the_results(page: Page, stack: Stack) -> None:
    buttons = await notes_listed(page, stack, "the walnut tree", 3)
    await page.keyboard.press("ArrowDown")
    await expect(buttons.nth(1)).to_be_focused()
    await page.keyboard.press("End")
    await expect(buttons.nth(2)).to_be_focused()
    await page.keyboard.press("ArrowUp")
    await expect(buttons.nth(1)).to_be_focused()
    # the current conversation is marked for a screen reader too, not by colour alone
    await expect(page.locator(".conv.current button")).to_have_attribute("aria-current", "true")

    results = await results_found(page, "walnut", 3)
    await page.keyboard.press("ArrowDown")
    await expect(results.nth(1)).to_be_focused()
    await page.keyboard.press("Enter")  # opens it, as a click does
    await expect(page.locator("#panel-chat")).to_be_visible()


async def test_tab_passes_the_list_and_the_results_in_one_step(page: Page, stack: Stack) -> None:
    # Regression: every conversation (and every search result) was a Tab stop, so the
    # message box lay 200 Tabs past the sidebar, 1,000 once older ones were paged in.
    buttons = await notes_listed(page, stack, "the hazel hedge", 4)
    await page.keyboard.press("ArrowDown")
    await page.keyboard.press("ArrowDown")
    await expect(buttons.nth(2)).to_be_focused()
    await page.keyboard.press("Tab")
    await expect(page.locator("form.logout button")).to_be_focused()
    # back into the list: to the entry it was left at
    await page.keyboard.press("Shift+Tab")
    await expect(buttons.nth(2)).to_be_focused()

    await results_found(page, "hazel", 4)
    await page.keyboard.press("Tab")
    focused = await page.evaluate("document.activeElement.className")
    assert focused != "result-title"


async def test_renaming_by_keyboard_keeps_focus_on_the_title(page: Page, stack: Stack) -> None:
    # Regression: Enter or Escape in the title box hid it with the focus in it: focus fell
    # back to the page, and the keyboard started again from its top.
    conv = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(conv.id, "user", "a chat to rename")
    await log_in(page, stack)
    title = page.locator("#chat-title")
    await title.focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#title-input")).to_be_focused()
    await page.keyboard.type("Never mind")
    await page.keyboard.press("Escape")
    await expect(title).to_be_focused()
    await expect(title).to_have_text("New conversation")
    await page.keyboard.press("Enter")
    await page.keyboard.type("Garden plans")
    await page.keyboard.press("Enter")
    await expect(title).to_have_text("Garden plans")
    await expect(title).to_be_focused()


async def test_a_reply_is_announced_and_a_loaded_conversation_is_not(
    page: Page, stack: Stack
) -> None:
    # Regression: the whole message list was aria-live, so a screen reader read out every
    # conversation opened (50 turns) and every streamed word of a reply.
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "an old question")
    await log_in(page, stack)
    live = await page.evaluate(
        "Array.from(document.querySelectorAll('[aria-live]')).map(n => n.id)"
    )
    assert live == ["announce"], live  # #toast is role=status, polite by nature
    await expect(page.locator("#announce")).to_have_text("")
    await send(page, "ping the announcer")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    await expect(page.locator("#announce")).to_contain_text("Reply:")
    reply = await page.locator(".msg-assistant .msg-body").inner_text()
    assert reply.strip()[:20] in await page.locator("#announce").inner_text()


async def contrast_problems(
    browser: Browser, stack: Stack, scheme: Literal["light", "dark"]
) -> dict[str, Any]:
    context = await browser.new_context(
        viewport={"width": 1280, "height": 800}, color_scheme=scheme
    )
    context.set_default_timeout(TIMEOUT)
    found: dict[str, Any] = {}
    try:
        page = await context.new_page()
        await log_in(page, stack)
        await page.click("#new-conversation")  # the light run's conversation is resumed
        await expect(page.locator("#empty-state")).to_be_visible()
        await send(page, "**bold**, `code`, [a link](https://example.org/) and > a quote")
        await expect(page.locator(".msg-assistant")).to_have_count(1)
        await send(page, "/status")
        await expect(page.locator(".msg-notice")).to_have_count(1)
        found["background"] = await page.evaluate(
            "getComputedStyle(document.querySelector('main')).backgroundColor"
            " + ' ' + getComputedStyle(document.body).backgroundColor"
        )
        found["chat"] = await page.evaluate(LOW_CONTRAST)
        await shot(page, f"14-{scheme}-chat")
        await page.click('#panel-nav button[data-panel="search"]')
        await page.fill("#search-input", "bold")
        await page.press("#search-input", "Enter")
        await expect(page.locator(".result").first).to_be_visible()
        found["search"] = await page.evaluate(LOW_CONTRAST)
        await shot(page, f"15-{scheme}-search")
    finally:
        await context.close()
    return found


async def test_text_is_readable_in_light_and_dark_mode(browser: Browser, stack: Stack) -> None:
    # Regression: no dark mode at all (a white page at night with the system dark), and
    # "Nothing in the last 60 min" in the sidebar at 3.9:1.
    light = await contrast_problems(browser, stack, "light")
    assert light["chat"] == [] and light["search"] == [], light
    dark = await contrast_problems(browser, stack, "dark")
    assert dark["chat"] == [] and dark["search"] == [], dark
    assert dark["background"] != light["background"], (dark, light)
    body = [int(x) for x in dark["background"].split(" rgb")[-1].strip("()").split(",")]
    assert sum(body) < 150, dark["background"]  # dark, not just different


async def test_sending_with_the_send_button_goes_back_to_the_box(page: Page, stack: Stack) -> None:
    # Regression: sent from the keyboard with the Send button, the focus stayed on the
    # button: the next message took a Shift+Tab first.
    await stack.services.conversations.create("web")
    await log_in(page, stack)
    await page.focus("#input")
    await page.keyboard.type("sent from the keyboard")
    await page.keyboard.press("Tab")
    await expect(page.locator("#send")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator(".msg-user .msg-body").last).to_have_text("sent from the keyboard")
    await expect(page.locator("#input")).to_be_focused()
    await expect(page.locator("#input")).to_have_value("")


async def test_stop_from_the_keyboard_leaves_the_focus_in_the_box(
    browser: Browser, tmp_path: Path
) -> None:
    # Regression: Stop vanished with the reply it stopped, with the focus on it: the
    # focus fell to the page.
    async with streaming_tab(browser, tmp_path / "gated") as page:
        await page.focus("#stop")
        await page.keyboard.press("Enter")
        await expect(page.locator("#stop")).to_be_hidden()
        await expect(page.locator("#input")).to_be_focused()


async def test_the_main_actions_have_names_a_screen_reader_reads(page: Page, stack: Stack) -> None:
    conv = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(conv.id, "user", "a named chat")
    await stack.services.conversations.rename(conv.id, "Named chat")
    await log_in(page, stack)
    for role, name in [
        ("button", "Send"),
        ("button", "+ New conversation"),
        ("combobox", "Model"),
        ("textbox", "Message"),
        ("button", "Search"),
    ]:
        await expect(page.get_by_role(role, name=name, exact=True)).to_have_count(1)
    # the title says it can be renamed (it is a heading, not a button)
    await expect(page.locator("#chat-title")).to_have_accessible_description(
        "Press Enter to rename"
    )
    await expect(
        page.locator("#conversation-list").get_by_role("button", name="Named chat")
    ).to_be_visible()
    await page.click('#panel-nav button[data-panel="search"]')
    for role, name in [
        ("searchbox", "Search query"),
        ("combobox", "Channel"),
        ("combobox", "Conversation"),
        ("button", "Search"),
    ]:
        await expect(page.get_by_role(role, name=name, exact=True).first).to_be_visible()
