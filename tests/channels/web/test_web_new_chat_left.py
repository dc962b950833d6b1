"""The dashboard's new chat is a /new: the conversation its first message starts names
the one the tab showed before (bot/previous_conversation.py, session 41)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.previous_conversation import left_behind
from tests.channels.web.conftest import Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _started(tab: Any, text: str, ref: str) -> str:
    """The conversation ``text``, sent in a new chat, starts (once it is stored)."""
    start = len(tab.frames)
    await tab.send(type="send_message", text=text, ref=ref)
    created = await tab.wait_for(lambda f: f["type"] == "conversation_created", start=start)
    await tab.wait_for(lambda f: f == {"type": "accepted", "ref": ref}, start=start)
    return str(created["conversation"]["id"])


async def test_a_new_chat_names_the_conversation_the_tab_left(
    ws_factory: Any, stack: Stack
) -> None:
    tab = await ws_factory()
    first = await _started(tab, "the broken molar", "a")
    await tab.send(type="new_conversation")
    second = await _started(tab, "what were we just talking about?", "b")
    found = left_behind(stack.services.conversations.read_lines(second))
    assert found is not None and found[0] == first
    # a chat opened from the list, not a new one: nothing left behind to name
    await tab.send(type="switch_conversation", conversationId=first)
    await tab.wait_for(
        lambda f: (
            f["type"] == "conversation_loaded" and (f["conversation"] or {}).get("id") == first
        )
    )
    assert left_behind(stack.services.conversations.read_lines(first)) is None
