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


@pytest.mark.parametrize("told", ["garbage", "2026-02-30T10:00:00.000Z", ""])
async def test_a_notice_time_that_is_none_is_given_and_replaced(tmp_path: Path, told: str) -> None:
    # Regression (session 42): a ``told`` that is no time (the row edited by hand)
    # raised ValueError at every claim: the notice of a budget spent never reached the
    # owner, and what claimed it failed too. It is given, and its time replaced.
    state = await _open(tmp_path)
    try:
        await state.execute("INSERT INTO owner_notices (key, told) VALUES ('a', ?)", (told,))
        assert await notice_due(state, "a")
        assert not await notice_due(state, "a")
    finally:
        await state.close()


async def test_a_notice_time_without_an_offset_is_utc(tmp_path: Path) -> None:
    # Regression (session 42): one without an offset raised TypeError (aware now minus
    # naive); it is UTC, like every stored time (bot/moments.py).
    state = await _open(tmp_path)
    try:
        told = iso(utcnow() - timedelta(minutes=1)).removesuffix("Z")
        await state.execute("INSERT INTO owner_notices (key, told) VALUES ('a', ?)", (told,))
        assert not await notice_due(state, "a")
    finally:
        await state.close()
