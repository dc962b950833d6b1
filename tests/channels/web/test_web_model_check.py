"""The dashboard's model selector, and ``/model`` typed in a new chat, ask the model
service as ``/model`` does (regression: they switched to a model id the service does not
know, and every reply of the chat was a notice)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from bot.brain.base import BrainReply, BrainRequest
from tests.channels.web.conftest import Stack, start_stack, stop_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

UNKNOWN = "model: claude-opus-retired"


class CheckingBrain:
    """Answers every message; its service knows every model but opus's."""

    name = "checking"

    def __init__(self) -> None:
        self.checked: list[str] = []

    async def check_model(self, alias: str) -> str | None:
        self.checked.append(alias)
        return UNKNOWN if alias == "opus" else None

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        return BrainReply(text="Noted.", model="checking")

    async def close(self) -> None:
        return None


@pytest_asyncio.fixture(loop_scope="module")
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = await start_stack(tmp_path / "data", brain=CheckingBrain())
    try:
        yield s
    finally:
        await stop_stack(s)


def brain(stack: Stack) -> CheckingBrain:
    checking: CheckingBrain = stack.services.brain
    return checking


async def test_the_selector_keeps_the_model_when_the_service_does_not_offer_the_new_one(
    ws_factory, stack: Stack
) -> None:
    tab = await ws_factory()
    await tab.send(type="new_conversation")
    await tab.send(type="send_message", text="hello there")
    created = await tab.wait_for(lambda f: f["type"] == "conversation_created")
    cid = created["conversation"]["id"]
    start = len(tab.frames)
    await tab.send(type="set_model", model="opus")
    err = await tab.wait_for(lambda f: f["type"] == "error", start=start)
    assert err["message"].startswith("Model opus (") and UNKNOWN in err["message"]
    assert "Still using sonnet (" in err["message"]
    # the tab's selector is told the model kept
    kept = await tab.wait_for(lambda f: f["type"] == "conversation_updated", start=start)
    assert kept["conversationId"] == cid and kept["conversation"]["model"] in (None, "sonnet")
    rec = await stack.services.conversations.get(cid)
    assert rec is not None and rec.model != "opus"
    assert brain(stack).checked[-1] == "opus"

    start = len(tab.frames)
    await tab.send(type="set_model", model="haiku")  # offered: switched
    await tab.wait_for(
        lambda f: (
            f["type"] == "conversation_updated"
            and f.get("conversation", {}).get("model") == "haiku"
        ),
        start=start,
    )
    rec = await stack.services.conversations.get(cid)
    assert rec is not None and rec.model == "haiku"


async def test_a_new_chat_keeps_its_model_when_the_service_does_not_offer_the_chosen_one(
    ws_factory, stack: Stack
) -> None:
    tab = await ws_factory()
    await tab.send(type="new_conversation")
    await tab.wait_for(lambda f: f["type"] == "conversation_loaded" and not f["conversation"])
    start = len(tab.frames)
    await tab.send(type="set_model", model="opus")  # the selector, before any message
    notice = await tab.wait_for(lambda f: f["type"] == "notice", start=start)
    assert UNKNOWN in notice["text"] and notice["pendingModel"] == "sonnet"

    start = len(tab.frames)
    await tab.send(type="send_message", text="/model opus", ref="m1")  # typed
    typed = await tab.wait_for(lambda f: f["type"] == "notice", start=start)
    assert UNKNOWN in typed["text"] and "pendingModel" not in typed

    await tab.send(type="send_message", text="hello, which model?")
    created = await tab.wait_for(lambda f: f["type"] == "conversation_created")
    assert created["conversation"]["model"] != "opus"
    assert brain(stack).checked[-2:] == ["opus", "opus"]
