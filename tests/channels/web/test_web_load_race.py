"""A turn written while a tab's page of its conversation is being read (a tab opened or
reconnecting just as a reply is written, or reaching the end of a conversation opened
around an old turn) reaches the tab after that page, over the real WebSocket and the
real core; so does a reply being written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.channels.web.conftest import GatedBrain, Stack, WsClient, login, start_stack, stop_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_a_turn_written_while_the_page_is_read_follows_the_page(
    ws_factory, stack: Stack
) -> None:
    # Regression: the turn was broadcast to the tab before its page, which had been
    # read without it; the page replaced what the tab showed, and the turn was not seen
    # until the next reload.
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "What is on the list?")
    channel = stack.channel
    read_page = channel.read_page

    async def read_then_answer(conversation_id: str, *args: Any, **kwargs: Any) -> Any:
        page = await read_page(conversation_id, *args, **kwargs)
        if conversation_id == conv.id:  # the reply lands just after the read
            channel.read_page = read_page  # type: ignore[method-assign]
            await manager.append_turn(conv.id, "assistant", "Milk and eggs.", turn_number=1)
            await tab.wait_for(is_answer)  # broadcast while the page is still on its way
        return page

    def is_answer(frame: dict[str, Any]) -> bool:
        turn = frame.get("turn") or {}
        return frame["type"] == "conversation_updated" and turn.get("content") == "Milk and eggs."

    tab = await ws_factory()
    channel.read_page = read_then_answer  # type: ignore[method-assign]
    try:
        start = len(tab.frames)
        await tab.send(type="switch_conversation", conversationId=conv.id)
        loaded = await tab.wait_for(
            lambda f: (
                f["type"] == "conversation_loaded"
                and (f.get("conversation") or {}).get("id") == conv.id
            ),
            start=start,
        )
        assert [t["content"] for t in loaded["turns"]] == ["What is on the list?"]
        after = start + tab.frames[start:].index(loaded) + 1
        await tab.wait_for(is_answer, start=after)
    finally:
        channel.read_page = read_page  # type: ignore[method-assign]


async def test_a_turn_written_while_the_last_newer_page_is_read_follows_it(
    ws_factory, stack: Stack
) -> None:
    # A tab opened around an old turn sets new turns aside until its newer pages reach
    # the end. The turn broadcast while the last of them was read (and set aside) is not
    # in it: it is sent again after the page.
    manager = stack.services.conversations
    conv = await manager.create("web")
    for n in range(1, 61):
        await manager.append_turn(conv.id, "user", f"question {n}")
    channel = stack.channel
    read_page = channel.read_page

    async def read_then_write(conversation_id: str, *args: Any, **kwargs: Any) -> Any:
        page = await read_page(conversation_id, *args, **kwargs)
        if kwargs.get("newer_than") is not None:
            channel.read_page = read_page  # type: ignore[method-assign]
            await manager.append_turn(conv.id, "user", "written meanwhile")
            await tab.wait_for(is_new_turn)
        return page

    def is_new_turn(frame: dict[str, Any]) -> bool:
        turn = frame.get("turn") or {}
        updated = frame["type"] == "conversation_updated"
        return updated and turn.get("content") == "written meanwhile"

    tab = await ws_factory()
    start = len(tab.frames)
    await tab.send(type="switch_conversation", conversationId=conv.id, aroundTurn=20)
    loaded = await tab.wait_for(
        lambda f: f["type"] == "conversation_loaded" and f.get("focusTurn") == 20, start=start
    )
    assert loaded["hasNewer"]
    channel.read_page = read_then_write  # type: ignore[method-assign]
    try:
        start = len(tab.frames)
        await tab.send(type="load_newer", conversationId=conv.id, newerThan=loaded["newerThan"])
        newer = await tab.wait_for(lambda f: f["type"] == "newer", start=start)
        assert not newer["hasNewer"]
        assert newer["turns"][-1]["content"] == "question 60"
        after = start + tab.frames[start:].index(newer) + 1
        await tab.wait_for(is_new_turn, start=after)
    finally:
        channel.read_page = read_page  # type: ignore[method-assign]


async def test_the_last_newer_page_brings_the_reply_being_written(tmp_path: Path) -> None:
    # A tab opened around an old turn sets streamed words aside (they would seem to
    # follow its page directly); reaching the end, it is sent the reply so far, as a tab
    # that opens the conversation is, or it would show the rest of it from mid-sentence.
    brain = GatedBrain()
    stack = await start_stack(tmp_path / "d", brain=brain)
    try:
        manager = stack.services.conversations
        conv = await manager.create("web")
        for n in range(1, 61):
            await manager.append_turn(conv.id, "user", f"question {n}")
            await manager.append_turn(conv.id, "assistant", f"answer {n}", turn_number=n)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            await login(http, stack)
            ws = await http.ws_connect(f"{stack.url}/ws", headers={"Origin": stack.origin})
            tab = WsClient(ws)
            await tab.wait_for(lambda f: f["type"] == "conversation_list")
            await tab.send(type="send_message", text="take your time", conversationId=conv.id)
            await tab.wait_for(lambda f: f["type"] == "stream" and not f["done"])
            start = len(tab.frames)
            await tab.send(type="switch_conversation", conversationId=conv.id, aroundTurn=10)
            page = await tab.wait_for(lambda f: f["type"] == "conversation_loaded", start=start)
            while page["hasNewer"]:
                start = len(tab.frames)
                await tab.send(
                    type="load_newer", conversationId=conv.id, newerThan=page["newerThan"]
                )
                page = await tab.wait_for(lambda f: f["type"] == "newer", start=start)
            after = start + tab.frames[start:].index(page) + 1
            caught = await tab.wait_for(lambda f: f["type"] == "stream", start=after)
            assert caught["delta"] == "Thinking about it" and not caught["done"]
            await tab.close()
    finally:
        brain.release.set()
        await stop_stack(stack)
