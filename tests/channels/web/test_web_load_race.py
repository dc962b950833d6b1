"""A turn written while a tab's page of its conversation is being read (a tab opened or
reconnecting just as a reply is written) reaches the tab after that page, over the real
WebSocket and the real core."""

from __future__ import annotations

from typing import Any

import pytest

from tests.channels.web.conftest import Stack

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
