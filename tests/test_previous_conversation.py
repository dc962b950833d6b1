"""After /new, the fresh conversation's first replies name the one just left (session
41: "what were we just talking about?" could not be answered; nothing in the request
pointed at it, and search flagged it "probably unrelated")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

import bot.previous_conversation as previous_conversation
from bot.events import utcnow
from bot.previous_conversation import NOTE_MESSAGES, STARTED_AFTER, left_behind
from bot.services import open_services
from tests.conftest import attach_channel, shutdown_services, telegram_config
from tests.support import ScriptedBrain
from tests.test_commands import OWNER, Core


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    services = await open_services(telegram_config(tmp_path), brain=ScriptedBrain())
    brain = services.brain
    assert isinstance(brain, ScriptedBrain)
    core = Core(services, brain)
    for channel in core.channels.values():
        await attach_channel(services, channel)
    try:
        yield core
    finally:
        await shutdown_services(services)


def _left_note(core: Core) -> str | None:
    notes = [n for n in core.brain.requests[-1].notes if "/new" in n]
    return notes[0] if notes else None


async def test_the_first_replies_after_new_name_the_conversation_left(core: Core) -> None:
    await core.say("I need a dentist appointment for my broken molar, maybe Tuesday")
    old = (await core.s.conversations.list())[0]
    await core.s.conversations.rename(old.id, "Dentist for the molar")
    assert _left_note(core) is None  # no /new led here
    await core.say("/new")
    fresh = await core.s.conversations.pinned_for(f"telegram:{OWNER}")
    assert fresh is not None and fresh.id != old.id
    assert left_behind(core.s.conversations.read_lines(fresh.id)) is not None
    for n in range(1, NOTE_MESSAGES + 1):
        await core.say("what were we just talking about?" if n == 1 else f"and {n}?")
        note = _left_note(core)
        assert note is not None, n
        assert f"fetch_context (conversationId {old.id})" in note
        assert "Dentist for the molar" in note
        assert core.brain.requests[-1].conversation_id == fresh.id
    await core.say("one more")  # past the first messages: the context is the fresh one's
    assert _left_note(core) is None
    # (computed for each reply, never left queued among the naming's one-shot notes)
    assert core.s.conversations.take_notes(fresh.id) == []


async def test_the_note_ends_half_an_hour_after_new(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    await core.say("the boiler")
    await core.say("/new")
    monkeypatch.setattr(previous_conversation, "utcnow", lambda: utcnow() + timedelta(minutes=31))
    await core.say("what were we just talking about?")
    assert _left_note(core) is None


async def test_a_new_that_started_nothing_names_nothing(core: Core) -> None:
    await core.say("/new")  # nothing said yet: no conversation is left
    await core.say("hello")
    assert _left_note(core) is None
    fresh = await core.s.conversations.pinned_for(f"telegram:{OWNER}")
    assert fresh is not None
    lines = core.s.conversations.read_lines(fresh.id)
    assert not [line for line in lines if line.get("event") == STARTED_AFTER]
