"""Once-an-hour notices to the owner, claimed in state.db (bot/owner_notices.py): once
per interval across restarts, per key, and not silenced by a clock set back."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.db import Database
from bot.events import iso, utcnow
from bot.owner_notices import notice_due
from bot.schema import STATE_MIGRATIONS


async def _open(tmp_path: Path) -> Database:
    return await Database.open(tmp_path / "state.db", STATE_MIGRATIONS, synchronous="FULL")


async def test_a_notice_is_due_once_an_hour_across_restarts(tmp_path: Path) -> None:
    state = await _open(tmp_path)
    try:
        assert await notice_due(state, "a")
        assert not await notice_due(state, "a")
        assert await notice_due(state, "b")  # each key its own
    finally:
        await state.close()
    state = await _open(tmp_path)  # a restart
    try:
        assert not await notice_due(state, "a")
    finally:
        await state.close()


async def test_a_notice_is_due_again_after_the_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = await _open(tmp_path)
    try:
        assert await notice_due(state, "a")
        later = utcnow() + timedelta(hours=1, seconds=1)
        monkeypatch.setattr("bot.owner_notices.utcnow", lambda: later)
        assert await notice_due(state, "a")
    finally:
        await state.close()


async def test_a_clock_set_back_does_not_silence_a_notice(tmp_path: Path) -> None:
    state = await _open(tmp_path)
    try:
        ahead = iso(utcnow() + timedelta(days=1))  # given when the clock was a day ahead
        await state.execute("INSERT INTO owner_notices (key, told) VALUES ('a', ?)", (ahead,))
        assert await notice_due(state, "a")
        assert not await notice_due(state, "a")
    finally:
        await state.close()
