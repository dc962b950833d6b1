"""A group's join and leave notices, end to end (fake Bot API -> aiogram -> the real
core -> the real Anthropic SDK against a fake Messages API): kept in the transcript and
shown to a member's reply, but not counted among the turns it reads, and never a search
hit (bot/brain/restricted_window.py, bot.transcript_lines.recallable)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.bench.fakes.telegram_api import FakeTelegramServer
from bot.brain.restricted_window import WINDOW_TURNS

from .conftest import GROUP_ID, OWNER_ID, STRANGER_ID
from .stack import start_stack

pytestmark = pytest.mark.slow

ADDED = 5  # people the owner adds at once


def _brain(model: FakeAnthropicAPI) -> dict[str, Any]:
    return {"provider": "anthropic", "base_url": model.base_url, "api_key": "test-key"}


async def test_join_notices_take_no_room_in_a_members_window_and_are_never_found(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    # Regression: each notice was a turn like any other: five people added at once
    # pushed five turns of talk out of the member's 20-turn window, and "joined" found
    # the group in search through "[joined the group]" alone.
    people = [{"id": 5000 + n, "is_bot": False, "first_name": f"Guest {n}"} for n in range(ADDED)]
    async with FakeAnthropicAPI(fallback="echo") as model:
        stack = await start_stack(tmp_path / "data", tg_server, brain_config=_brain(model))
        group = f"telegram:group:{GROUP_ID}"

        async def recorded(count: int) -> None:
            async def reached() -> bool:
                return len([t for t in await stack.turns(group) if t["role"] == "user"]) >= count

            await stack.wait(reached, timeout=60)

        try:
            tg_server.inject_message(GROUP_ID, "@my_agent_bot hello", from_id=STRANGER_ID,
                                     first_name="Ann")  # fmt: skip
            await tg_server.wait_sent(GROUP_ID, 1)
            for n in range(2, WINDOW_TURNS + 1):  # unaddressed: recorded, not answered
                tg_server.inject_message(GROUP_ID, f"talk {n:02d}", from_id=OWNER_ID,
                                         first_name="Robin")  # fmt: skip
            await recorded(WINDOW_TURNS)
            tg_server.inject_message(GROUP_ID, from_id=OWNER_ID, first_name="Robin",
                                     new_chat_members=people)  # fmt: skip
            await recorded(WINDOW_TURNS + ADDED)
            tg_server.inject_message(GROUP_ID, "@my_agent_bot what was said?",
                                     from_id=STRANGER_ID, first_name="Ann")  # fmt: skip
            await tg_server.wait_sent(GROUP_ID, 2)
            turns = await stack.turns(group)
            found = await stack.services.search.search("joined")
            talk = await stack.services.search.search("talk")
        finally:
            await stack.stop()
    _, later = model.requests
    notices = [t for t in turns if t.get("metadata", {}).get("membership") == "joined"]
    assert len(notices) == ADDED  # kept in the transcript
    # the 20 turns said before Ann's question, the oldest ones too, and the notices
    assert "@my_agent_bot hello" in later.text and "talk 02" in later.text
    assert later.text.count("[joined the group]") == ADDED
    assert found.results == []  # a notice alone is no hit
    assert [r.conversation_id for r in talk.results] != []  # (the group is searchable)


async def test_join_notices_take_no_room_in_the_owners_hydrated_context(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    # Regression: the owner's context, hydrated at the first reply since the start
    # (brain.working_context_turns, 20), counted each notice as a turn: five people
    # added at once pushed five turns of what was said out of it.
    people = [{"id": 6000 + n, "is_bot": False, "first_name": f"Guest {n}"} for n in range(ADDED)]
    async with FakeAnthropicAPI(fallback="echo") as model:
        stack = await start_stack(tmp_path / "data", tg_server, brain_config=_brain(model))
        group = f"telegram:group:{GROUP_ID}"

        async def recorded(count: int) -> None:
            async def reached() -> bool:
                return len([t for t in await stack.turns(group) if t["role"] == "user"]) >= count

            await stack.wait(reached, timeout=60)

        try:
            for n in range(1, WINDOW_TURNS + 1):  # unaddressed: recorded, not answered
                tg_server.inject_message(GROUP_ID, f"talk {n:02d}", from_id=STRANGER_ID,
                                         first_name="Ann")  # fmt: skip
            await recorded(WINDOW_TURNS)
            tg_server.inject_message(GROUP_ID, from_id=OWNER_ID, first_name="Robin",
                                     new_chat_members=people)  # fmt: skip
            await recorded(WINDOW_TURNS + ADDED)
            tg_server.inject_message(GROUP_ID, "@my_agent_bot what did Ann say?",
                                     from_id=OWNER_ID, first_name="Robin")  # fmt: skip
            await tg_server.wait_sent(GROUP_ID, 1)
        finally:
            await stack.stop()
    [owner] = model.requests
    assert owner.body.get("tools")  # the owner's own context
    # the question and the 19 turns said before it, the notices among them shown
    assert "talk 02" in owner.text and "talk 01" not in owner.text
    assert owner.text.count("[joined the group]") == ADDED
