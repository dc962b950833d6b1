"""A message sent again under its ref (a tab that reconnected before it heard whether
the message was stored) is stored once, over the real WebSocket and the real core."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.channels.web.conftest import Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def user_texts(stack: Stack, conversation_id: str) -> list[str]:
    page = await stack.channel.read_page(conversation_id, limit=50)
    return [
        str(t["content"]) for t in page.items if t.get("type") == "turn" and t.get("role") == "user"
    ]


class GatedHost:
    """The channel host with its first delivery held until ``release`` (a message still
    being stored when the socket that sent it dropped)."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def deliver(self, message: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            await self.release.wait()
        return await self.host.deliver(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.host, name)


async def test_a_resend_while_the_first_is_being_stored_is_stored_once(
    ws_factory, stack: Stack
) -> None:
    # Regression: the page re-sends a held message whose socket dropped before
    # "accepted" and whose reloaded view did not show it yet; it was stored twice.
    conv = await stack.services.conversations.create("web")
    gated = GatedHost(stack.channel.host)
    stack.channel.host = gated
    try:
        dropped = await ws_factory()
        await dropped.send(
            type="send_message", text="Call the plumber", ref="held-1", conversationId=conv.id
        )
        await asyncio.wait_for(gated.entered.wait(), 10)
        again = await ws_factory()  # the reconnected tab, same session
        await again.send(
            type="send_message", text="Call the plumber", ref="held-1", conversationId=conv.id
        )
        gated.release.set()
        await again.wait_for(lambda f: f == {"type": "accepted", "ref": "held-1"})
        await dropped.wait_for(lambda f: f == {"type": "accepted", "ref": "held-1"})
    finally:
        stack.channel.host = gated.host
    assert gated.calls == 1
    assert await user_texts(stack, conv.id) == ["Call the plumber"]


async def test_a_resend_of_a_stored_message_is_accepted_and_not_stored_again(
    ws_factory, stack: Stack
) -> None:
    conv = await stack.services.conversations.create("web")
    tab = await ws_factory()
    for _ in range(2):
        start = len(tab.frames)
        await tab.send(type="send_message", text="Buy milk", ref="once-1", conversationId=conv.id)
        await tab.wait_for(lambda f: f == {"type": "accepted", "ref": "once-1"}, start=start)
    assert await user_texts(stack, conv.id) == ["Buy milk"]


async def test_a_refused_message_sent_again_is_tried_again(ws_factory, stack: Stack) -> None:
    conv = await stack.services.conversations.create("web")
    tab = await ws_factory()
    stack.services.router.accepting = False  # draining: refused, nothing stored
    try:
        await tab.send(
            type="send_message", text="Water the plants", ref="r-1", conversationId=conv.id
        )
        err = await tab.wait_for(lambda f: f["type"] == "error" and f.get("ref") == "r-1")
        assert err["kept"] is False
    finally:
        stack.services.router.accepting = True
    await tab.send(type="send_message", text="Water the plants", ref="r-1", conversationId=conv.id)
    await tab.wait_for(lambda f: f == {"type": "accepted", "ref": "r-1"})
    assert await user_texts(stack, conv.id) == ["Water the plants"]


@pytest.mark.parametrize("into_new_chat", [False, True])
async def test_a_resend_after_a_restart_is_found_stored(
    ws_factory, stack: Stack, into_new_chat: bool
) -> None:
    # Regression: the refs a tab sent were remembered in memory only; after a daemon
    # restart the page had to guess from the reloaded view, by the text alone, and a
    # held "Yes" that an earlier turn had said too was dropped unsent. The message's id
    # is now its ref: found stored after a restart, whichever conversation it went to
    # (sent from the empty chat, it does not start a second one either).
    conv = await stack.services.conversations.create("web")
    target = None if into_new_chat else conv.id
    tab = await ws_factory()
    start = len(tab.frames)
    ref = f"restart-{into_new_chat}"
    await tab.send(type="send_message", text="Yes", ref=ref, conversationId=target)
    await tab.wait_for(lambda f: f == {"type": "accepted", "ref": ref}, start=start)
    before = len(await stack.services.conversations.list())
    yes = await _said(stack, "Yes")
    stack.channel.hub.sent_refs = type(stack.channel.hub.sent_refs)()  # the restart's loss
    again = await ws_factory()
    start = len(again.frames)
    await again.send(type="send_message", text="Yes", ref=ref, conversationId=target)
    await again.wait_for(lambda f: f == {"type": "accepted", "ref": ref}, start=start)
    assert len(await stack.services.conversations.list()) == before
    assert await _said(stack, "Yes") == yes >= 1


async def _said(stack: Stack, text: str) -> int:
    """How many times the owner's turns say ``text``, in every conversation."""
    said = 0
    for conv in await stack.services.conversations.list():
        said += (await user_texts(stack, conv.id)).count(text)
    return said


async def test_a_command_held_because_sqlite_is_full_is_told_kept_and_run_once(
    ws_factory, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 39): a command's claim in state.db refused by SQLite ("database
    # or disk is full", not an OSError) was held by the router's spool, but the page was
    # told kept=false ("not sent; your message is back in the box"): the spool ran it
    # later and the owner's second send ran it again (/new made two conversations).
    from tests.sqlite_driver import sqlite3

    monkeypatch.setattr("bot.router.STORAGE_RETRIES", ())
    runs = stack.services.router.runs
    real_claim = runs.claim
    refusals = [1]

    async def claim(*args: Any, **kwargs: Any) -> Any:
        if refusals:
            refusals.pop()
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode = 13  # type: ignore[attr-defined]  # SQLITE_FULL
            raise exc
        return await real_claim(*args, **kwargs)

    monkeypatch.setattr(runs, "claim", claim)
    conv = await stack.services.conversations.create("web")
    tab = await ws_factory()
    await tab.send(type="send_message", text="Plan the trip", ref="full-0", conversationId=conv.id)
    await tab.wait_for(lambda f: f == {"type": "accepted", "ref": "full-0"})
    before = len(await stack.services.conversations.list())
    await tab.send(type="send_message", text="/new", ref="full-1", conversationId=conv.id)
    err = await tab.wait_for(lambda f: f["type"] == "error" and f.get("ref") == "full-1")
    assert err["kept"] is True
    async with asyncio.timeout(10):  # the spool runs it once the claim succeeds
        while stack.services.health()["spooled"]:
            await asyncio.sleep(0.02)
    assert len(await stack.services.conversations.list()) == before + 1
