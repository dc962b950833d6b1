"""The dashboard's session and connection as the owner lives them in a real browser:
logging out, the socket dropping and coming back, a tab joining a reply mid-stream.
Playwright driving Debian's Chromium against the real core (see test_web_browser.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from bot.brain.base import BrainReply, BrainRequest, BrainUnavailable
from tests.channels.web.conftest import GatedBrain, Stack, start_stack, stop_stack
from tests.channels.web.test_web_browser import TIMEOUT, browser, log_in, page, send

__all__ = ["browser", "page"]  # fixtures shared with test_web_browser.py

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


async def test_log_out_ends_the_session(page: Page, stack: Stack) -> None:
    # Regression: the Log out form was refused with 403 "bad origin": under the page's
    # no-referrer policy Chromium sends a form POST with "Origin: null".
    await log_in(page, stack)
    await page.click(".logout button")
    await expect(page).to_have_url(f"{stack.url}/login")
    assert len(stack.channel.sessions) == 0
    status = await page.evaluate("async () => (await fetch('/api/conversations')).status")
    assert status == 401


# Keeps every WebSocket the page opens, so a test can drop the connection.
SOCKET_HOOK = """(() => {
    const Native = window.WebSocket;
    window.__sockets = [];
    window.WebSocket = function (...args) {
        const socket = new Native(...args);
        window.__sockets.push(socket);
        return socket;
    };
    window.WebSocket.prototype = Native.prototype;
    Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();"""


async def drop_connection(page: Page) -> None:
    """Close the page's socket and wait until it is live again on a new one."""
    count = await page.evaluate("window.__sockets.at(-1).close(); window.__sockets.length")
    await page.wait_for_function(
        "(n) => window.__sockets.length > n && window.__sockets.at(-1).readyState === 1",
        arg=count,
    )
    await expect(page.locator("body")).to_have_attribute("data-connection", "live")


async def test_a_reconnect_keeps_the_conversation_in_view(page: Page, stack: Stack) -> None:
    # Regression: a dropped socket (network, daemon restart) reconnected to the most
    # recent web conversation: the tab jumped away from what it showed, and from an empty
    # new chat the next message went into that old conversation.
    manager = stack.services.conversations
    older = await manager.create("web")
    await manager.append_turn(older.id, "user", "the older conversation")
    newest = await manager.create("web")
    await manager.append_turn(newest.id, "user", "the newest conversation")
    await page.context.add_init_script(SOCKET_HOOK)
    await log_in(page, stack)
    await expect(page.locator("body")).to_have_attribute("data-conversation", newest.id)
    await page.locator(f'.conv[data-id="{older.id}"] button').click()
    await expect(page.locator("body")).to_have_attribute("data-conversation", older.id)
    await drop_connection(page)
    await expect(page.locator("body")).to_have_attribute("data-conversation", older.id)
    await expect(page.locator(".msg-user .msg-body")).to_have_text(["the older conversation"])

    await page.click("#new-conversation")
    await expect(page.locator("#empty-state")).to_be_visible()
    await drop_connection(page)
    await expect(page.locator("#empty-state")).to_be_visible()
    await send(page, "a message for a fresh conversation")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    fresh = await page.get_attribute("body", "data-conversation")
    assert fresh not in (None, "", older.id, newest.id)
    assert (await manager.get(newest.id)).turn_count == 1


async def test_a_tab_joining_mid_stream_shows_the_reply_so_far(
    browser: Browser, tmp_path: Path
) -> None:
    # Regression: a tab opened, reloaded or reconnected while a reply streamed showed
    # only the deltas after it joined ("word11 word12 ..."), the start was missing until
    # the reply was complete.
    brain = GatedBrain()
    gated = await start_stack(tmp_path / "gated", brain=brain)
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT)
    await context.add_init_script(SOCKET_HOOK)
    try:
        first = await context.new_page()
        await log_in(first, gated)
        await send(first, "Write me a long essay")
        await expect(first.locator(".msg.streaming")).to_contain_text("Thinking about it")
        second = await context.new_page()
        await second.goto(f"{gated.url}/")
        await expect(second.locator(".msg.streaming .msg-body")).to_have_text("Thinking about it")
        await drop_connection(first)
        await expect(first.locator(".msg.streaming .msg-body")).to_have_text("Thinking about it")
        brain.release.set()
        for tab in (first, second):
            reply = tab.locator(".msg-assistant .msg-body")
            await expect(reply).to_have_text(["Thinking about it — done."])
            await expect(tab.locator(".msg.streaming")).to_have_count(0)
    finally:
        brain.release.set()
        await context.close()
        await stop_stack(gated)


async def test_the_model_shown_for_a_new_chat_is_the_one_it_gets(page: Page, stack: Stack) -> None:
    # Regression: the selector kept showing the model chosen for the previous new chat
    # (the conversation got the default), and a reconnect forgot the model chosen for the
    # empty chat while the selector still showed it.
    manager = stack.services.conversations
    await page.context.add_init_script(SOCKET_HOOK)
    await log_in(page, stack)
    await page.select_option("#model-select", "opus")
    await drop_connection(page)
    await expect(page.locator("#model-select")).to_have_value("opus")
    await send(page, "plan the week")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    first = await page.get_attribute("body", "data-conversation")
    assert first and (await manager.get(first)).model == "opus"

    await page.click("#new-conversation")
    await expect(page.locator("#empty-state")).to_be_visible()
    shown = await page.input_value("#model-select")
    await send(page, "plan the month")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    second = await page.get_attribute("body", "data-conversation")
    assert second and second != first
    assert (await manager.get(second)).model == shown == stack.config.models.default


async def test_back_and_forward_move_between_conversations(page: Page, stack: Stack) -> None:
    # Regression: the address never changed: Back left the dashboard (through /login back
    # to the most recent conversation) instead of returning to the previous conversation,
    # and a refresh lost the conversation in view.
    manager = stack.services.conversations
    older = await manager.create("web")
    await manager.append_turn(older.id, "user", "the older conversation")
    newest = await manager.create("web")
    await manager.append_turn(newest.id, "user", "the newest conversation")
    body = page.locator("body")
    await log_in(page, stack)
    await expect(body).to_have_attribute("data-conversation", newest.id)
    await page.locator(f'.conv[data-id="{older.id}"] button').click()
    await expect(body).to_have_attribute("data-conversation", older.id)
    await page.click("#new-conversation")
    await expect(page.locator("#empty-state")).to_be_visible()
    await page.go_back()
    await expect(body).to_have_attribute("data-conversation", older.id)
    await page.go_back()
    await expect(body).to_have_attribute("data-conversation", newest.id)
    await page.go_forward()
    await expect(body).to_have_attribute("data-conversation", older.id)
    await page.reload()
    await expect(body).to_have_attribute("data-connection", "live")
    await expect(body).to_have_attribute("data-conversation", older.id)
    await page.go_forward()
    await expect(page.locator("#empty-state")).to_be_visible()
    await send(page, "a fresh start")  # the empty chat becomes its conversation
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    fresh = await page.get_attribute("body", "data-conversation")
    await page.go_back()
    await expect(body).to_have_attribute("data-conversation", older.id)
    await page.go_forward()
    await expect(body).to_have_attribute("data-conversation", fresh or "")


# Every text the streaming bubble showed, in order.
STREAM_LOG = """document.addEventListener("DOMContentLoaded", () => {
    window.__seen = [];
    new MutationObserver(() => {
        for (const b of document.querySelectorAll(".msg.streaming .msg-body")) {
            window.__seen.push(b.textContent);
        }
    }).observe(document.body, {childList: true, subtree: true, characterData: true});
});"""


class CutOffBrain:
    """Streams the start of an answer, then the model is gone (retry budget spent); the
    retry, once released, streams the whole answer."""

    name = "cut-off"

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        self.calls += 1
        if self.calls == 1:
            await on_delta("The first half of")
            raise BrainUnavailable("overloaded mid-stream")
        await self.release.wait()
        await on_delta("The whole")
        await on_delta(" answer.")
        return BrainReply(text="The whole answer.", model="cut-off")

    async def close(self) -> None:
        return None


async def test_a_reply_retried_after_an_outage_streams_once(
    browser: Browser, tmp_path: Path
) -> None:
    # Regression: when the model went away mid-answer and the reply was retried, the
    # retry's text was appended to the cut-off start in the streaming bubble ("The first
    # half ofThe whole answer.") until the reply was complete.
    brain = CutOffBrain()
    stack = await start_stack(tmp_path / "cut", brain=brain)
    stack.services.replies.retry_interval = 0.01
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT)
    await context.add_init_script(STREAM_LOG)
    try:
        page = await context.new_page()
        await log_in(page, stack)
        await send(page, "Explain the boiler settings")
        await expect(page.locator(".msg-notice")).to_be_visible()  # the outage notice
        await expect(page.locator(".msg.streaming .msg-body")).to_have_text("The first half of")
        brain.release.set()
        await expect(page.locator(".msg-assistant:not(.streaming) .msg-body")).to_have_text(
            "The whole answer."
        )
        # the retry's stream, as it arrived, never carried the cut-off start
        seen = await page.evaluate("window.__seen")
        assert "The whole" in seen and not [t for t in seen if "half ofThe" in t], seen
    finally:
        brain.release.set()
        await context.close()
        await stop_stack(stack)


class TwoGatesBrain:
    """Each reply waits for its own gate before it writes anything."""

    name = "two-gates"

    def __init__(self) -> None:
        self.gates = [asyncio.Event(), asyncio.Event()]
        self.calls = 0

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        gate = self.gates[min(self.calls, 1)]
        self.calls += 1
        await gate.wait()
        if on_delta is not None:
            await on_delta(f"answer {self.calls}")
        return BrainReply(text=f"answer {self.calls}", model="two-gates")

    async def close(self) -> None:
        return None


async def test_stop_stays_while_a_queued_reply_waits(browser: Browser, tmp_path: Path) -> None:
    # Regression: with a second message sent while the first was answered, Stop vanished
    # when the first answer was complete, though the second was still being prepared
    # (until its first word; seconds with a model that thinks first).
    brain = TwoGatesBrain()
    stack = await start_stack(tmp_path / "queued", brain=brain)
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT)
    try:
        page = await context.new_page()
        await log_in(page, stack)
        await send(page, "first question")
        await expect(page.locator(".msg-user")).to_have_count(1)
        await send(page, "second question")
        await expect(page.locator(".msg-user")).to_have_count(2)
        brain.gates[0].set()
        await expect(page.locator(".msg-assistant .msg-body")).to_have_text(["answer 1"])
        await expect(page.locator("#stop")).to_be_visible()
        brain.gates[1].set()
        await expect(page.locator(".msg-assistant")).to_have_count(2)
        await expect(page.locator("#stop")).to_be_hidden()
    finally:
        for gate in brain.gates:
            gate.set()
        await context.close()
        await stop_stack(stack)


async def test_a_reloaded_page_keeps_stop_for_a_reply_still_owed(
    browser: Browser, tmp_path: Path
) -> None:
    # Regression: a page loaded (a reload, a reconnect after a daemon restart) while a
    # reply was still owed and had written nothing yet (the model thinking, or an outage
    # being waited out) hid Stop, so that wait could not be ended from the dashboard.
    brain = TwoGatesBrain()
    stack = await start_stack(tmp_path / "owed", brain=brain)
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT)
    try:
        page = await context.new_page()
        await log_in(page, stack)
        await send(page, "a question the model is slow to answer")
        await expect(page.locator(".msg-user")).to_have_count(1)
        await expect(page.locator("#stop")).to_be_visible()
        await page.reload()
        await expect(page.locator("body")).to_have_attribute("data-connection", "live")
        await expect(page.locator(".msg-user")).to_have_count(1)
        await expect(page.locator("#stop")).to_be_visible()
        brain.gates[0].set()
        await expect(page.locator(".msg-assistant .msg-body")).to_have_text(["answer 1"])
        await expect(page.locator("#stop")).to_be_hidden()
        await page.reload()  # nothing owed now: no Stop
        await expect(page.locator(".msg-assistant")).to_have_count(1)
        await expect(page.locator("#stop")).to_be_hidden()
    finally:
        for gate in brain.gates:
            gate.set()
        await context.close()
        await stop_stack(stack)


async def test_a_message_not_stored_comes_back_to_the_box(page: Page, stack: Stack) -> None:
    # Regression: the box was cleared as the message left the page, so a message the
    # daemon refused (draining after SIGTERM: a restart while typing) or one lost with the
    # connection before it was stored was gone: not in the conversation, not in the box.
    await page.context.add_init_script(SOCKET_HOOK)
    await log_in(page, stack)
    stack.services.router.accepting = False  # what a draining daemon does on SIGTERM
    try:
        await send(page, "the list for Saturday: bread, olives, figs")
        await expect(page.locator("#toast")).to_contain_text("back in the box")
        await expect(page.locator("#input")).to_have_value(
            "the list for Saturday: bread, olives, figs"
        )
        await expect(page.locator("#stop")).to_be_hidden()
    finally:
        stack.services.router.accepting = True
    await page.fill("#input", "")
    # The connection drops with the message (never reaches the daemon): sent again under
    # its ref once the tab has reconnected (session 38: it was put back in the box after
    # a guess from the reloaded view, which a repeated "Yes" fooled into dropping it).
    count = await page.evaluate("""() => {
        const socket = window.__sockets.at(-1);
        socket.send = () => socket.close();
        return window.__sockets.length;
    }""")
    await send(page, "call the plumber about the boiler")
    await page.wait_for_function(
        "(n) => window.__sockets.length > n && window.__sockets.at(-1).readyState === 1",
        arg=count,
    )
    await expect(page.locator(".msg-user .msg-body")).to_have_text(
        ["call the plumber about the boiler"]
    )
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    await expect(page.locator("#input")).to_have_value("")
    # Stored, then the connection drops: sent again, it is not stored a second time.
    await drop_connection(page)
    await expect(page.locator(".msg-user")).to_have_count(1)
    await expect(page.locator("#input")).to_have_value("")


class DownUntilReleased:
    """The model is unreachable, writing nothing, until ``release`` is set."""

    name = "down"

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        self.calls += 1
        if not self.release.is_set():
            raise BrainUnavailable("connection refused")
        return BrainReply(text="Back with the answer.", model="down")

    async def close(self) -> None:
        return None


async def test_an_outage_shows_no_empty_reply_bubble(browser: Browser, tmp_path: Path) -> None:
    # Regression: every attempt that failed before writing a word ended its (empty)
    # stream, and the page made an empty "Assistant" bubble of that end: through an
    # outage the chat showed a reply with no text under the notice.
    brain = DownUntilReleased()
    stack = await start_stack(tmp_path / "down", brain=brain)
    stack.services.replies.retry_interval = 0.01
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT)
    try:
        page = await context.new_page()
        await log_in(page, stack)
        await send(page, "Is the heating on?")
        await expect(page.locator(".msg-notice")).to_be_visible()
        while brain.calls < 4:
            await asyncio.sleep(0.01)
        await expect(page.locator(".msg-assistant")).to_have_count(0)
        await expect(page.locator("#stop")).to_be_visible()  # the reply is still owed
        brain.release.set()
        await expect(page.locator(".msg-assistant .msg-body")).to_have_text(
            ["Back with the answer."]
        )
        await expect(page.locator("#stop")).to_be_hidden()
    finally:
        brain.release.set()
        await context.close()
        await stop_stack(stack)


async def end_the_session(page: Page, stack: Stack) -> None:
    """The tab's login session ends on the server (expired, or logged out elsewhere)."""
    cookies = await page.context.cookies()
    sid = next(c["value"] for c in cookies if c["name"] == stack.channel.cookie_name)
    stack.channel.sessions.revoke(sid)


async def test_show_all_after_the_session_ended_goes_to_the_login_page(
    page: Page, stack: Stack
) -> None:
    # Regression: it said "Could not load the whole message: HTTP 401" and stayed.
    conv = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(conv.id, "user", "long " * 20_000)
    await log_in(page, stack)
    await expect(page.locator(".msg-cut button")).to_be_visible()
    await end_the_session(page, stack)
    await page.click(".msg-cut button")
    await page.wait_for_url(f"{stack.url}/login")


async def test_analytics_after_the_session_ended_goes_to_the_login_page(
    page: Page, stack: Stack
) -> None:
    # Regression: the panel stayed empty, with no word.
    await log_in(page, stack)
    await end_the_session(page, stack)
    await page.click('#panel-nav button[data-panel="analytics"]')
    await page.wait_for_url(f"{stack.url}/login")
