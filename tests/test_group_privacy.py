"""What the owner's replies in a group may show: the group's members read them, so
recall (the model's tools, the offline brain's list, /search) reaches no conversation
but the group's own (SPEC.md "Routing and trust": the owner's data stays the owner's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    RecordingChannel,
    settle,
    shutdown_services,
    start_telegram_core,
    telegram_config,
)
from tests.support import inbound

OWNER = "424242"
GROUP = {"group_id": "-100", "chat": "-100"}


@pytest.fixture
async def offline_core(tmp_path: Path) -> AsyncIterator[tuple[Any, RecordingChannel]]:
    # no brain given: the offline one, which recalls
    services, telegram = await start_telegram_core(telegram_config(tmp_path))
    try:
        yield services, telegram
    finally:
        await shutdown_services(services)


async def _say(services: Any, text: str, **fields: Any) -> None:
    fields.setdefault("sender", OWNER)
    await services.router.deliver(inbound(text, **fields))
    await settle(services)


async def test_the_owners_reply_in_a_group_recalls_no_private_conversation(
    offline_core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: the owner's message in a group got the owner profile with recall over
    # every conversation, and the reply (read by every member) quoted the owner's
    # private chat: "what did we say about my salary?" posted the salary to the group.
    services, telegram = offline_core
    await _say(services, "my salary is 95000 a year, keep it between us")
    await _say(services, "the picnic is on Sunday at the lake", **GROUP)
    telegram.sent.clear()
    await _say(services, "what did we say about my salary and the picnic?", **GROUP)
    group_replies = [m.text for m in telegram.sent if m.chat_id == "-100"]
    assert group_replies, telegram.sent
    assert not any("95000" in text for text in group_replies), group_replies


async def test_search_typed_by_the_owner_in_a_group_lists_only_the_group(
    offline_core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: /search in a group listed the owner's private conversations (titles,
    # snippets, ids) to every member of the group.
    services, telegram = offline_core
    await _say(services, "my salary is 95000 a year, keep it between us")
    await _say(services, "the salary of the babysitter is due on Friday", **GROUP)
    telegram.sent.clear()
    await _say(services, "/search salary", **GROUP)
    (answer,) = [m.text for m in telegram.sent if m.chat_id == "-100"]
    assert "95000" not in answer and "babysitter" in answer, answer
    telegram.sent.clear()
    await _say(services, "/search salary")
    assert "95000" in telegram.sent[-1].text


async def test_status_typed_by_the_owner_in_a_group_shows_the_group_only(
    offline_core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: /status in a group told every member how many conversations the owner
    # has and how many strangers' escalations wait for them.
    services, telegram = offline_core
    await _say(services, "hello, just me")
    await _say(services, "hi from a stranger", sender="31337", chat="31337")
    await _say(services, "picnic on Sunday", **GROUP)
    telegram.sent.clear()
    await _say(services, "/status", **GROUP)
    (answer,) = [m.text for m in telegram.sent if m.chat_id == "-100"]
    assert "Conversation: " in answer
    assert "escalations pending" not in answer and "Conversations: " not in answer, answer
    telegram.sent.clear()
    await _say(services, "/status")
    assert "escalations pending: 1" in telegram.sent[-1].text
