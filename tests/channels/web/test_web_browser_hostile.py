"""Messages built to hurt the dashboard, in a real browser: whatever a stranger (or a
pasted log) puts in a message, the tab shows it promptly and keeps working. Playwright
driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from bot.brain.base import BrainReply, BrainRequest
from bot.events import InboundMessage
from tests.channels.web.conftest import Stack, start_stack, stop_stack
from tests.channels.web.test_web_browser import TIMEOUT, browser, log_in, page, shot

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
    "a row of pipes over a rule": "'|a'.repeat(250000) + '\\n' + '|-'.repeat(250000)",
    "a table of many rows": "'|a|b|\\n|-|-|\\n' + '|*x|`y|\\n'.repeat(80000)",
    # (a heading's pattern backtracked in cubic time over its spaces: 26 s at 4,000)
    "a heading's spaces": "'# a' + ' '.repeat(200000) + 'x'",
    "headings' spaces, many lines": "('## a' + ' '.repeat(2000) + '#b\\n').repeat(200)",
    "deeply nested lists": (
        "Array.from({length: 1000}, (_, i) => ' '.repeat(i) + '- ' + 'a'.repeat(1000)).join('\\n')"
    ),
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


async def test_headings_lose_their_closing_marks_but_not_a_words(page: Page, stack: Stack) -> None:
    # The heading's pattern was replaced (above); what it shows is as in e-mail and
    # Telegram (channels/markdown_blocks.py): "# Learning C#" lost its "#" before.
    await log_in(page, stack)
    shown = await page.evaluate(
        """() => ['# Learning C#', '## Plan ##', '### a  #  ', '# x #y'].map((line) => {
            const d = document.createElement('div'); d.appendChild(renderMarkdown(line));
            const h = d.querySelector('h3, h4, h5, h6');
            return h ? h.tagName.toLowerCase() + ':' + h.textContent : null;
        })"""
    )
    assert shown == ["h3:Learning C#", "h4:Plan", "h5:a", "h3:x #y"]


class ChattyBrain:
    """Streams a long reply in many small deltas, then waits for release."""

    name = "chatty"

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas
        self.release = asyncio.Event()

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        words = [f"word{i} " for i in range(self.deltas)]
        if on_delta is not None:
            for word in words:
                await on_delta(word)
                await asyncio.sleep(0)
        await self.release.wait()
        return BrainReply(text="".join(words), model="chatty")

    async def close(self) -> None:
        return None


async def test_a_long_streamed_reply_is_not_rerendered_per_word(
    browser: Browser, tmp_path: Path
) -> None:
    # Regression: every delta rendered the whole reply so far again, so a long reply
    # cost time quadratic in its length and the tab lagged further behind each word.
    brain = ChattyBrain(2000)
    chatty = await start_stack(tmp_path / "chatty", brain=brain)
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT)
    try:
        page = await context.new_page()
        await log_in(page, chatty)
        await page.evaluate("""() => {
            window.__renders = 0;
            const render = window.renderMarkdown;
            window.renderMarkdown = (text) => { window.__renders++; return render(text); };
        }""")
        await page.fill("#input", "Write me a long essay")
        await page.press("#input", "Enter")
        await expect(page.locator(".msg.streaming")).to_contain_text("word1999")
        renders = await page.evaluate("window.__renders")
        # Per delta while short (about 2,000 characters), then per animation frame.
        assert renders < 600, renders  # not one per delta, 2,000
        brain.release.set()
        final = page.locator(".msg-assistant:not(.streaming)")
        await expect(final).to_contain_text("word0 word1")
        await expect(final).to_contain_text("word1999")
    finally:
        brain.release.set()
        await context.close()
        await stop_stack(chatty)


ODD_LINKS = "\n".join(
    [
        "[a](javascript:alert(1)) [b](JaVaScRiPt:alert(2)) [c](java\tscript:alert(3))",
        "[d](\u0000javascript:alert(4)) [e]( javascript:alert(5)) [f](&#106;avascript:alert(6))",
        "[g](data:text/html,<script>alert(7)</script>) [h](vbscript:msgbox(8)) [i](file:///etc/passwd)",
        "[j](blob:https://x.org/1) [k](/api/conversations) [l](#c=x) [m](ftp://x.org/)",
        "[n](intent://x#Intent;end) [o](chrome://settings) [p](about:blank)",
        "<javascript:alert(9)> javascript:alert(10) data:text/html,x",
        "[fine](https://example.org/a?b=c) [mail](mailto:a@example.org) http://example.com/x",
        "[//host](//evil.example/x) [sp](https://exa mple.org)",
    ]
)


async def test_only_http_https_and_mailto_links_are_made(page: Page, stack: Stack) -> None:
    # Whatever scheme a stranger's message names, a link goes to an http(s) or mailto
    # address, opens in a new tab without a handle on this one, and the rest is text.
    await stack.deliver_telegram(ODD_LINKS, name="Hanan")
    await log_in(page, stack)
    await page.locator('#conversation-list .conv[data-channel="telegram"] button').first.click()
    body = page.locator(".msg-user .msg-body").filter(has_text="[h](vbscript")
    await expect(body).to_have_count(1)
    links: list[list[str]] = await body.locator("a").evaluate_all(
        "(nodes) => nodes.map((a) => [a.protocol, a.rel, a.target, a.href])"
    )
    assert links, "the safe links are links"
    for protocol, rel, target, href in links:
        assert protocol in ("http:", "https:", "mailto:"), href
        assert "noopener" in rel.split() and "noreferrer" in rel.split(), href
        assert target == "_blank", href
    hrefs = {href for *_, href in links}
    assert {"https://example.org/a?b=c", "mailto:a@example.org"} <= hrefs
    assert not any(h.startswith(f"{stack.url}") for h in hrefs)  # no link into the dashboard
    await expect(body).to_contain_text("[g](data:text/html,<script>alert(7)</script>)")
    assert await page.evaluate("() => window.__pwned") is None


async def test_zero_width_characters_in_a_name_are_shown(page: Page, stack: Stack) -> None:
    # Regression: a stranger named "Ha\u200bnan" read exactly as the owner's contact
    # Hanan, and one named only invisible characters showed as no name at all.
    joined = "\U0001f469\u200d\U0001f4bb \u0645\u06cc\u200c\u062e"  # emoji ZWJ, Persian ZWNJ
    for sender, name in (
        ("5151", "Ha\u200bnan"),
        ("5252", "\u200b\u2060\ufeff\u3164"),
        ("5353", joined),
    ):
        await stack.services.router.deliver(
            InboundMessage(
                channel="telegram",
                sender_id=sender,
                sender_name=name,
                text=f"hello from {sender}",
                message_id=f"tg-zw-{sender}",
                chat_id=sender,
            )
        )
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="external"]')
    names = page.locator("article.party strong")
    await expect(names.filter(has_text="Ha[U+200B]nan")).to_have_count(1)
    await expect(names.filter(has_text="[U+200B][U+2060][U+FEFF][U+3164]")).to_have_count(1)
    # the joiners of an emoji sequence or a Persian name (ZWJ, ZWNJ) do their work
    await expect(names.filter(has_text=joined)).to_have_count(1)


async def test_a_huge_unbroken_name_does_not_widen_the_page(page: Page, stack: Stack) -> None:
    # A stranger's name of thousands of characters with no space in the External panel
    # (regression: it filled the screen), and such words in the owner's own chat.
    name = "N" * 3000
    await stack.services.router.deliver(
        InboundMessage(
            channel="telegram",
            sender_id="6161",
            sender_name=name,
            text="W" * 5000,
            message_id="tg-huge-6161",
            chat_id="6161",
        )
    )
    await stack.deliver_telegram("Z" * 5000 + " and https://example.org/" + "p" * 3000)
    await log_in(page, stack)
    width = await page.evaluate("() => window.innerWidth")
    for panel in ("external", "chat"):
        await page.click(f'#panel-nav button[data-panel="{panel}"]')
        if panel == "external":
            # cut, whole in its tooltip (it filled the screen)
            shown = page.locator("article.party strong").filter(has_text="NNNN")
            await expect(shown).to_have_text("N" * 120 + "…")
            await expect(shown).to_have_attribute("title", name)
        else:
            await page.locator(
                '#conversation-list .conv[data-channel="telegram"] button'
            ).first.click()
            await expect(page.locator(".msg-user").last).to_contain_text("ZZZZ")
        assert await page.evaluate("() => document.documentElement.scrollWidth") <= width, panel
        assert await page.evaluate("() => document.querySelector('main').scrollWidth") <= width
        await shot(page, f"21-huge-name-{panel}")


async def test_a_huge_stored_subject_is_shown_cut_and_whole_on_hover(
    page: Page, stack: Stack
) -> None:
    # Regression (session 42): an incoming mail's subject is stored as it came (only
    # the subjects we write are cut), and the chat header showed one of kilobytes whole.
    subject = "Budget " + "S" * 3000
    rec = await stack.services.conversations.create(
        "email",
        identity_key="email-thread:<huge@x.example>",
        pinned=True,
        participants=["sarah@example.com"],
        channel_meta={"contact": "Sarah", "subject": subject},
    )
    await log_in(page, stack)
    await page.goto(f"{stack.url}/#c={rec.id}")
    label = page.locator("#chat-label")
    await expect(label).to_have_text(re.compile(r"^Sarah — Budget S+…$"))
    assert len(await label.text_content() or "") <= 120
    await expect(label).to_have_attribute("title", f"Sarah — {subject}")
    line = page.locator(f'.conv[data-id="{rec.id}"] .conv-title')
    await expect(line).to_have_attribute("title", re.compile(f"^Sarah — {subject} · "))
    width = await page.evaluate("() => window.innerWidth")
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= width
