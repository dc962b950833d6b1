"""A group's join and leave notices, end to end (fake Bot API -> aiogram -> the real
core -> the real Anthropic SDK against a fake Messages API): kept in the transcript and
shown to a member's reply, but not counted among the turns it reads, and never a search
hit (bot/brain/restricted_window.py, bot.transcript_lines.recallable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.fakes.telegram_api import FakeTelegramServer
from bot.brain.restricted_window import WINDOW_TURNS

from .conftest import GROUP_ID, OWNER_ID, STRANGER_ID
from .stack import Stack, stack_with_model

pytestmark = pytest.mark.slow

ADDED = 5  # people the owner adds at once
PEOPLE = [{"id": 5000 + n, "is_bot": False, "first_name": f"Guest {n}"} for n in range(ADDED)]


GROUP = f"telegram:group:{GROUP_ID}"


async def talk_then_joins(stack: Stack, server: FakeTelegramServer, first: int, who: int) -> None:
    """Turns ``first`` to :data:`WINDOW_TURNS` said in the group by ``who`` (not
    addressed: recorded, never answered), then the owner adding :data:`PEOPLE`."""
    for n in range(first, WINDOW_TURNS + 1):
        server.inject_message(GROUP_ID, f"talk {n:02d}", from_id=who, first_name=f"#{who}")
    await stack.wait_user_turns(GROUP, WINDOW_TURNS)
    server.inject_message(GROUP_ID, from_id=OWNER_ID, first_name="Robin", new_chat_members=PEOPLE)
    await stack.wait_user_turns(GROUP, WINDOW_TURNS + ADDED)


async def test_join_notices_take_no_room_in_a_members_window_and_are_never_found(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    # Regression: each notice was a turn like any other: five people added at once
    # pushed five turns of talk out of the member's 20-turn window, and "joined" found
    # the group in search through "[joined the group]" alone.
    async with stack_with_model(tmp_path / "data", tg_server) as (stack, model):
        tg_server.inject_message(GROUP_ID, "@my_agent_bot hello", from_id=STRANGER_ID,
                                 first_name="Ann")  # fmt: skip
        await tg_server.wait_sent(GROUP_ID, 1)
        await talk_then_joins(stack, tg_server, 2, OWNER_ID)
        tg_server.inject_message(GROUP_ID, "@my_agent_bot what was said?",
                                 from_id=STRANGER_ID, first_name="Ann")  # fmt: skip
        await tg_server.wait_sent(GROUP_ID, 2)
        turns = await stack.turns(GROUP)
        found = await stack.services.search.search("joined")
        talk = await stack.services.search.search("talk")
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
    async with stack_with_model(tmp_path / "data", tg_server) as (stack, model):
        await talk_then_joins(stack, tg_server, 1, STRANGER_ID)
        tg_server.inject_message(GROUP_ID, "@my_agent_bot what did Ann say?",
                                 from_id=OWNER_ID, first_name="Robin")  # fmt: skip
        await tg_server.wait_sent(GROUP_ID, 1)
    [owner] = model.requests
    assert owner.body.get("tools")  # the owner's own context
    # every turn said before the question (they fit the compression budget: a restart
    # keeps them all since session 40), the notices among them shown; the window that
    # counts turns said, not notices, when they do not fit: tests/brain/test_context.py
    assert "talk 01" in owner.text and "talk 02" in owner.text
    assert owner.text.count("[joined the group]") == ADDED
