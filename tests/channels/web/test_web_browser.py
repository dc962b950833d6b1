"""The dashboard in a real browser: Playwright driving Debian's Chromium against the real
core (offline brain). One browser per module; each test gets its own daemon and context.
Screenshots of the main screens go to test-artifacts/screenshots/."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from bot.events import InboundMessage
from tests.channels.web.conftest import (
    CHROMIUM_ARGS,
    SCREENSHOTS,
    GatedBrain,
    Stack,
    chromium_path,
    start_stack,
    stop_stack,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

try:
    from playwright.async_api import Browser, Page, async_playwright, expect
except ImportError:  # pragma: no cover - playwright is a test dependency
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)

TIMEOUT = 30_000  # ms; only a bound (a page at a load of 20 took over 10 s)
# expect()'s own bound (5 s by default) too: a 2,000-word reply streamed at a load of 20
# had reached word 710 after 5 s. Every browser test module imports this one.
expect.set_options(timeout=TIMEOUT)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    path = chromium_path()
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser, stack: Stack) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT)
    p = await context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    yield p
    await context.close()
    assert not errors, f"JavaScript errors: {errors}"


def dashboard(stack: Stack) -> re.Pattern[str]:
    """The dashboard's address, whatever conversation its fragment names (#c=ID, #new)."""
    return re.compile(re.escape(f"{stack.url}/") + "(#.*)?$")


async def log_in(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.url}/login")
    await page.fill("#token", stack.channel.token)
    await page.click("#login-submit")
    await expect(page).to_have_url(dashboard(stack))
    await view_shown(page)


async def view_shown(page: Page) -> None:
    """Wait for the dashboard's first view: the socket is open (``live``) before it is
    drawn, and a check run then saw a page still empty."""
    await expect(page.locator("body")).to_have_attribute("data-connection", "live")
    await expect(page.locator("body")).to_have_attribute("data-view", "shown")


async def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


async def send(page: Page, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


async def test_login_required(page: Page, stack: Stack) -> None:
    await stack.deliver_telegram("private: the surprise party is on Friday")
    await page.goto(f"{stack.url}/")
    await page.wait_for_url(f"{stack.url}/login")
    # Without a session: no data from the API, and the WebSocket is refused.
    probe: dict[str, Any] = await page.evaluate("""async () => {
        const api = await fetch('/api/conversations');
        const ws = await new Promise((resolve) => {
            const s = new WebSocket('ws://' + location.host + '/ws');
            const got = [];
            s.onmessage = (e) => got.push(e.data);
            s.onclose = () => resolve({opened: false, got});
            s.onopen = () => setTimeout(() => resolve({opened: true, got}), 300);
        });
        return {status: api.status, body: await api.text(), ws};
    }""")
    assert probe["status"] == 401 and "surprise" not in probe["body"]
    assert probe["ws"] == {"opened": False, "got": []}
    await page.fill("#token", "not-the-token")
    await page.click("#login-submit")
    await expect(page.locator("#login-error")).to_have_text("That token is not valid.")
    await shot(page, "01-login")
    # The printed link (#token=...) logs in and drops the token from the address bar.
    await page.goto(f"{stack.url}/login#token={stack.channel.token}")
    await expect(page).to_have_url(dashboard(stack))
    await expect(page.locator("#list-active .conv")).to_have_count(1)


async def test_chat_streams_resumes_and_syncs_tabs(page: Page, stack: Stack) -> None:
    await log_in(page, stack)
    await expect(page.locator("#empty-state")).to_be_visible()
    # Record every state of the streaming bubble to prove the reply arrived in pieces.
    await page.evaluate("""() => {
        window.__streamLengths = [];
        new MutationObserver(() => {
            const s = document.querySelector('.msg.streaming .msg-body');
            if (s) window.__streamLengths.push(s.textContent.length);
        }).observe(document.getElementById('message-items'),
                   {childList: true, subtree: true, characterData: true});
    }""")
    await send(page, "What did we decide about the **garden** shed?")
    assistant = page.locator(".msg-assistant").last
    await expect(assistant).to_contain_text("ANTHROPIC_API_KEY")
    await expect(page.locator(".msg-user .msg-body strong")).to_have_text("garden")
    lengths = await page.evaluate("window.__streamLengths")
    assert len(set(lengths)) >= 3 and lengths == sorted(lengths), lengths
    conv_id = await page.get_attribute("body", "data-conversation")
    assert conv_id and conv_id.startswith("conv-")
    await expect(page.locator(f'#list-active .conv[data-id="{conv_id}"]')).to_have_count(1)
    await shot(page, "02-chat")

    await page.reload()
    await expect(page.locator("body")).to_have_attribute("data-conversation", conv_id)
    await expect(page.locator(".msg-user")).to_have_count(1)
    await expect(page.locator(".msg-assistant")).to_have_count(1)

    second = await page.context.new_page()
    await second.goto(f"{stack.url}/")
    await expect(second.locator("body")).to_have_attribute("data-conversation", conv_id)
    await send(page, "And the bicycle rack?")
    await expect(second.locator(".msg-user").last).to_contain_text("And the bicycle rack?")
    await expect(second.locator(".msg-assistant")).to_have_count(2)
    await second.close()


async def test_telegram_conversation_read_only_and_live(page: Page, stack: Stack) -> None:
    await stack.deliver_telegram("Remind me to water the ferns", name="Hanan")
    await log_in(page, stack)
    item = page.locator('#conversation-list .conv[data-channel="telegram"]')
    await expect(item).to_contain_text("Hanan")
    await expect(item.locator("svg.icon-telegram")).to_have_count(1)
    await item.locator("button").click()
    await expect(page.locator("#readonly-badge")).to_be_visible()
    await expect(page.locator("#composer")).to_be_hidden()
    await expect(page.locator("#readonly-note")).to_be_visible()
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    await stack.deliver_telegram("and the orchids on Sunday", name="Hanan")
    await expect(page.locator(".msg-user").last).to_contain_text("and the orchids on Sunday")
    await expect(page.locator(".msg-user").last).to_contain_text("via Telegram")
    await expect(page.locator(".msg-assistant")).to_have_count(2)
    await shot(page, "03-telegram-read-only")


async def test_search_finds_and_opens_result(page: Page, stack: Stack) -> None:
    manager = stack.services.conversations
    conv = await manager.create("web")
    for n in range(1, 9):
        text = "we compared xylophone tuning forks" if n == 3 else f"small talk number {n}"
        await manager.append_turn(conv.id, "user", text)
        await manager.append_turn(conv.id, "assistant", f"noted {n}", turn_number=n)
    await manager.rename(conv.id, "Music workshop")
    await manager.append_event(
        conv.id,
        "compression",
        compressedThrough=4,
        summary="Compared instruments; **xylophone** chosen.",
    )
    await manager.set_abbreviation(conv.id, "Meeting notes: tuning forks, xylophone.")
    await manager.create("web")  # the most recent web conversation is another one
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="search"]')
    await page.fill("#search-input", "xylophone")
    await page.press("#search-input", "Enter")
    result = page.locator(f'#search-results .result[data-id="{conv.id}"]')
    await expect(result.locator(".result-title")).to_have_text("Music workshop")
    await expect(result.locator(".snippet")).to_contain_text("xylophone")
    await shot(page, "04-search")
    await result.locator(".result-title").click()
    await expect(page.locator("body")).to_have_attribute("data-conversation", conv.id)
    matched = page.locator(".msg.matched")
    await expect(matched.first).to_contain_text("xylophone")
    await expect(matched.first).to_be_in_viewport()
    # Compression and abbreviation are folded system notes, opened on demand.
    note = page.locator("details.note-compression")
    await expect(note.locator("summary")).to_have_text("Earlier turns compressed (through turn 4)")
    await expect(note.locator(".note-body")).to_be_hidden()
    await note.locator("summary").click()
    await expect(note.locator(".note-body strong")).to_have_text("xylophone")
    await expect(page.locator("details.note-abbreviation summary")).to_contain_text(
        "Abbreviated for search"
    )
    await shot(page, "08-notes")


async def test_a_huge_query_still_searches(page: Page, stack: Stack) -> None:
    # Regression: a query of ~10,000 characters passed aiohttp's request-line limit; the
    # plain-text 400 broke the page's JSON parsing and it showed "Searching…" for good.
    conv = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(conv.id, "user", "the marimba recital plan")
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="search"]')
    await page.fill("#search-input", "marimba " * 1500)
    await page.press("#search-input", "Enter")
    await expect(page.locator(f'#search-results .result[data-id="{conv.id}"]')).to_be_visible()
    await expect(page.locator("#search-status")).to_contain_text("found")


async def test_a_message_too_long_to_send_is_kept_and_explained(page: Page, stack: Stack) -> None:
    # Regression: a message over the WebSocket's 1 MiB limit closed the connection
    # (code 1009) with no word, and the text was gone from the input.
    await log_in(page, stack)
    huge = "x" * (1 << 20)
    # Pasted in one piece: fill() types it through the editor's insertText, which took
    # over 10 s on a loaded machine (the test timed out, the page did nothing wrong).
    await page.eval_on_selector("#input", "(box, text) => { box.value = text; }", huge)
    await page.press("#input", "Enter")
    await expect(page.locator("#toast")).to_contain_text("Too long to send")
    assert await page.input_value("#input") == huge
    # not copied into sessionStorage as a draft: writing it on each keystroke made the
    # box slow (drafts are kept up to 100,000 characters)
    assert await page.evaluate("sessionStorage.getItem('my-agent-draft')") is None
    await send(page, "a normal message after it")  # still connected
    await expect(page.locator(".msg-user").last).to_contain_text("a normal message after it")


async def test_rename_persists_across_refresh(page: Page, stack: Stack) -> None:
    await log_in(page, stack)
    await send(page, "hello there")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    await expect(page.locator("#chat-title")).to_have_text("New conversation")
    await page.click("#chat-title")
    await page.fill("#title-input", "Garden planning")
    await page.press("#title-input", "Enter")
    await expect(page.locator("#chat-title")).to_have_text("Garden planning")
    await expect(page.locator("#conversation-list .conv.current")).to_contain_text(
        "Garden planning"
    )
    await page.reload()
    await expect(page.locator("#chat-title")).to_have_text("Garden planning")


async def test_hostile_html_renders_inert(page: Page, stack: Stack) -> None:
    await log_in(page, stack)
    hostile = (
        '<script>window.__pwned = 1</script> and <img src=x onerror="window.__pwned=2">'
        " and [click](javascript:window.__pwned=3)"
    )
    await send(page, hostile)
    user = page.locator(".msg-user .msg-body")
    await expect(user).to_contain_text("<script>window.__pwned = 1</script>")
    await expect(user).to_contain_text('<img src=x onerror="window.__pwned=2">')
    await expect(page.locator(".msg-assistant")).to_have_count(1)  # the reply echoes it too
    assert await page.evaluate("window.__pwned === undefined")
    assert await page.locator("#message-items script, #message-items img").count() == 0
    assert await page.locator("#message-items a[href^='javascript']").count() == 0
    # The same through the renderer directly, with a title as hostile as the text.
    tags = await page.evaluate("""() => {
        const f = renderMarkdown('# <svg onload=alert(1)>\\n**<b>x</b>** `<i>` [a](https://ok.example/)');
        const d = document.createElement('div'); d.appendChild(f);
        return Array.from(d.querySelectorAll('*')).map(n => n.tagName.toLowerCase());
    }""")
    assert set(tags) <= {"h3", "p", "strong", "code", "a"}, tags
    await shot(page, "05-hostile-html")


async def test_bidirectional_controls_cannot_disguise_text(page: Page, stack: Stack) -> None:
    """A right-to-left override makes "\u202eexe.fdp" display as "pdf.exe"; the
    dashboard shows such controls as [U+202E] in messages and titles, so no text can be
    made to read as something else. The stored text keeps them."""
    disguised = "invoice_\u202egnp.exe and \u2067isolated\u2069"
    await stack.deliver_telegram(disguised, name="Ha\u202enan")
    await log_in(page, stack)
    item = page.locator('#conversation-list .conv[data-channel="telegram"]')
    await expect(item).to_contain_text("Ha[U+202E]nan")
    await item.locator("button").click()
    body = page.locator(".msg-user .msg-body").first
    await expect(body).to_contain_text("invoice_[U+202E]gnp.exe and [U+2067]isolated[U+2069]")
    shown = await page.evaluate(
        "() => document.querySelector('#message-items').textContent"
        " + document.querySelector('#conversation-list').textContent"
    )
    assert not any(c in shown for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    rec = (await stack.services.conversations.list())[0]
    lines = stack.services.conversations.read_lines(rec.id)
    assert any(line.get("content") == disguised for line in lines)


async def test_external_panel_lists_stranger_and_trust_works(page: Page, stack: Stack) -> None:
    await stack.services.router.deliver(
        InboundMessage(
            channel="telegram",
            sender_id="4242",
            sender_name="Mallory <b>Stranger</b>",
            text="Hi! Can your owner call me back?",
            message_id="tg-ext-1",
            chat_id="4242",
        )
    )
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="external"]')
    card = page.locator("article.party").filter(has_text="Mallory <b>Stranger</b>")
    await expect(card.locator(".tier")).to_have_text("untrusted")
    await expect(card.locator(".escalation")).to_contain_text("not a known contact")
    await expect(card.locator(".party-messages")).to_contain_text("call me back")
    # Both directions counted and named (the count was of incoming messages only).
    sent = await card.locator(".party-messages li.dir-out").count()
    await expect(card.locator(".party-count")).to_contain_text(
        f"{1 + sent} message{'' if sent == 0 else 's'} (1 in, {sent} out)"
    )
    await shot(page, "06-external")
    await card.get_by_role("button", name="Trust", exact=True).click()
    await expect(card.locator(".tier")).to_have_text("known")
    await expect(card.locator(".escalation")).to_have_count(0)
    party = (await stack.services.external.list_parties())[0]
    assert party.tier == "known" and party.tier_source == "owner"


async def test_a_reply_from_the_external_panel_goes_once_and_says_where(
    page: Page, stack: Stack
) -> None:
    # Regression (session 40): the panel's Reply had no key (sent again, it went twice)
    # and said nothing of where it went; it now names it as /reply's confirmation does.
    await stack.deliver_telegram("Can your owner call me?", sender_id="4343", name="Eve")
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="external"]')
    card = page.locator("article.party").filter(has_text="Eve")
    await card.locator("form.reply input").fill("Who is asking?")
    await card.locator("form.reply input").press("Enter")
    await card.locator("form.reply input").press("Enter")  # a second submit at once
    await expect(page.locator("#toast")).to_contain_text("Sent to Eve")
    rows = await stack.services.state.fetchall("SELECT dedup_key FROM outbox")
    assert len([key for (key,) in rows if str(key).endswith(":to-party")]) == 1


async def test_an_escalation_from_before_the_tab_opened_is_signalled(
    page: Page, stack: Stack
) -> None:
    # Regression (session 39): External's "new" badge came only with a live frame: an
    # escalation that arrived while no tab was open showed nothing in a tab opened later.
    await stack.deliver_telegram("Please ask the owner to call me", sender_id="4545", name="Eve")
    assert await stack.services.external.pending_escalation_count() == 1
    await log_in(page, stack)
    await expect(page.locator("#external-badge")).to_be_visible()
    await page.click('#panel-nav button[data-panel="external"]')
    await expect(page.locator("#external-badge")).to_be_hidden()
    await expect(page.locator("article.party .escalation")).to_contain_text("call me")


async def test_analytics_charts_render(page: Page, stack: Stack) -> None:
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "budget review")
    await manager.set_title_topics(conv.id, "Budget review", ["finance", "planning"], 1)
    # a sub-cent cost and a count past a thousand (session 40: "$0.0000", "1234567")
    await manager.append_turn(
        conv.id, "assistant", "ok", usage={"input": 1_234_567, "output": 10}, cost=0.000004
    )
    await stack.deliver_telegram("groceries")
    # what the model's answers to a contact cost, beside the conversations' (session 40)
    await stack.deliver_telegram("hello", sender_id="4646", name="Kim")
    kim = await stack.services.external.find("4646")
    assert kim is not None
    spent = {"model": "m", "usage": {"input": 2_500, "output": 40}, "cost": 0.0125}
    await stack.services.external.record_outbound(kim.id, "hi", spent=spent)
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="analytics"]')
    for name in ("conversations", "channels", "topics"):
        await page.wait_for_function(
            "(id) => { const i = document.getElementById(id); "
            "return i.complete && i.naturalWidth > 0; }",
            arg=f"chart-{name}",
        )
    await expect(page.locator("#analytics-totals")).to_contain_text("conversations")
    await expect(page.locator("#analytics-totals")).to_contain_text("1,234,567 / ")
    await expect(page.locator("#analytics-totals")).to_contain_text("< $0.0001")
    await expect(page.locator("#analytics-totals")).to_contain_text("known contacts' answers")
    await expect(page.locator("#analytics-totals")).to_contain_text("$0.0125")
    await expect(page.locator("#analytics-totals")).to_contain_text("2,500 / 40")
    await shot(page, "07-analytics")


@contextlib.asynccontextmanager
async def streaming_tab(browser: Browser, data_dir: Path) -> AsyncIterator[Page]:
    """A daemon of its own on a :class:`GatedBrain`, and a tab logged in to it that has
    asked a question whose reply is streaming (its first words shown, Stop visible)."""
    brain = GatedBrain()
    gated = await start_stack(data_dir, brain=brain)
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT)
    try:
        page = await context.new_page()
        await log_in(page, gated)
        await send(page, "Write me a long essay")
        await expect(page.locator(".msg.streaming")).to_contain_text("Thinking about it")
        await expect(page.locator("#stop")).to_be_visible()
        yield page
    finally:
        brain.release.set()
        await context.close()
        await stop_stack(gated)


async def test_stop_button_stops_generation(browser: Browser, tmp_path) -> None:
    async with streaming_tab(browser, tmp_path / "gated") as page:
        await shot(page, "09-streaming")
        await page.click("#stop")
        final = page.locator(".msg-assistant:not(.streaming)")
        await expect(final).to_contain_text("Thinking about it")
        await expect(page.locator("#stop")).to_be_hidden()
        assert "done." not in await final.inner_text()


async def test_load_older_new_conversation_and_model(page: Page, stack: Stack) -> None:
    manager = stack.services.conversations
    conv = await manager.create("web")
    for n in range(1, 41):
        await manager.append_turn(conv.id, "user", f"question {n}")
        await manager.append_turn(conv.id, "assistant", f"answer {n}", turn_number=n)
    await log_in(page, stack)
    await expect(page.locator("#message-items .msg")).to_have_count(50)
    await expect(page.locator("#load-more")).to_be_visible()
    # a click without scrolling to the button: scrolled near the top, the older page
    # comes by itself (test_web_browser_long.py), and the button moves away under a click
    await page.dispatch_event("#load-more", "click")
    await expect(page.locator("#message-items .msg")).to_have_count(80)
    await expect(page.locator("#message-items .msg").first).to_contain_text("question 1")
    await expect(page.locator("#load-more")).to_be_hidden()

    await page.click("#new-conversation")
    await expect(page.locator("#empty-state")).to_be_visible()
    await expect(page.locator("#chat-title")).to_have_text("New conversation")
    await page.select_option("#model-select", "opus")
    await send(page, "a fresh start")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    new_id = await page.get_attribute("body", "data-conversation")
    assert new_id != conv.id
    assert (await manager.get(new_id)).model == "opus"
    await expect(page.locator("#model-select")).to_have_value("opus")
    await page.select_option("#model-select", "haiku")
    await expect(page.locator("details.note-meta_update summary")).to_have_text(
        "Model set to haiku"
    )
    assert (await manager.get(new_id)).model == "haiku"


async def test_the_conversation_list_pages_past_its_first_200(page: Page, stack: Stack) -> None:
    # Regression: the sidebar stopped at 200 conversations, with nothing to page on:
    # after months of use the older ones were reachable through search only.
    from channels.web.ws import LIST_SIZE

    manager = stack.services.conversations
    for n in range(LIST_SIZE + 5):
        conv = await manager.create("web")
        await manager.append_turn(conv.id, "user", f"note number {n}")
    await log_in(page, stack)
    items = page.locator("#list-active li.conv, #list-recent li.conv")
    await expect(items).to_have_count(LIST_SIZE)
    await page.click("#list-more")
    await expect(items).to_have_count(LIST_SIZE + 5)
    await expect(page.locator("#list-more")).to_have_count(0)
    # an older one opens like any other
    await items.last.locator("button").click()
    await expect(page.locator("#message-items .msg").first).to_contain_text("note number 0")


async def test_updates_of_conversations_past_the_list_neither_grow_nor_skip_it(
    page: Page, stack: Stack
) -> None:
    # Regression: an update of a conversation the tab did not list (a start writing
    # notes for thousands) added it, and the list was rebuilt each time (the tab froze);
    # "Older conversations", asking from the count held, then skipped a page's worth.
    from channels.web.ws import LIST_SIZE

    manager = stack.services.conversations
    ids = []
    for n in range(LIST_SIZE + 10):
        conv = await manager.create("web")
        await manager.append_turn(conv.id, "user", f"note number {n}")
        ids.append(conv.id)
    await log_in(page, stack)
    items = page.locator("#list-active li.conv, #list-recent li.conv")
    await expect(items).to_have_count(LIST_SIZE)
    for n, conv_id in enumerate(ids[:3]):  # the oldest: not listed
        await manager.set_title_topics(conv_id, f"Old Notes {n}", ["notes"], 1)
    # a listed one's update comes after them (frames keep their order)
    await manager.set_title_topics(ids[-1], "Fresh Notes", ["notes"], 1)
    await expect(page.locator("#conversation-list")).to_contain_text("Fresh Notes")
    await expect(page.locator("#conversation-list")).not_to_contain_text("Old Notes 2")
    assert await items.count() == LIST_SIZE
    await page.click("#list-more")
    await expect(items).to_have_count(LIST_SIZE + 10)
    await expect(page.locator("#conversation-list")).to_contain_text("Old Notes 0")


async def test_a_mail_not_verified_as_a_known_contacts_is_marked(page: Page, stack: Stack) -> None:
    # Regression: a forged mail in a known contact's name was drawn like their real
    # messages; once its escalation was resolved nothing marked it as possibly forged.
    stack.config.trust.contacts.setdefault("email", {})["fred@example.net"] = "known"
    for n, verified in ((1, True), (2, False)):
        await stack.services.router.deliver(
            InboundMessage(
                channel="email",
                sender_id="fred@example.net",
                sender_name="Fred",
                text=f"message {n} from fred",
                message_id=f"<m{n}@example.net>",
                chat_id="fred@example.net",
                identity_verified=verified,
            )
        )
    await log_in(page, stack)
    await page.click('#panel-nav button[data-panel="external"]')
    card = page.locator("article.party").filter(has_text="Fred")
    forged = card.locator(".party-messages li").filter(has_text="message 2 from fred")
    await expect(forged.locator(".tag.unverified")).to_have_text("not verified as theirs")
    real = card.locator(".party-messages li").filter(has_text="message 1 from fred")
    await expect(real.locator(".tag.unverified")).to_have_count(0)
