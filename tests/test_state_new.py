"""A state.db made anew next to stored transcripts (a restore of the transcripts only):
the owner is told, once, which conversations' last reply may not have gone out, and
``my-agent status`` says it (bot/state_new.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot import state_new
from bot.config import AppConfig
from bot.daemon import start_serving
from bot.health_store import connect_ro
from bot.healthcheck import collect, format_text
from bot.services import open_services
from tests.conftest import make_config, settle, shutdown_services
from tests.sqlite_driver import sqlite3
from tests.support import ScriptedBrain, inbound


async def _say(config: AppConfig, messages: list[tuple[str, str, str]]) -> None:
    """Deliver (chat, message id, text) as the owner's on the dashboard, each answered."""
    services = await open_services(config, brain=ScriptedBrain())
    try:
        for chat, mid, text in messages:
            await services.router.deliver(
                inbound(text, channel="web", sender="owner", chat=chat, message_id=mid)
            )
            await settle(services)
    finally:
        await shutdown_services(services)


async def _alerts_at_start(config: AppConfig) -> list[str]:
    """The owner's alerts of one daemon start (no channel: they go to the dashboard's
    ``notice`` event)."""
    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    notices: list[str] = []

    async def notice(text: str) -> None:
        notices.append(text)

    services.bus.subscribe("notice", notice)
    try:
        await start_serving(services, [])
        return [text for text in notices if "may not have reached you" in text]
    finally:
        await shutdown_services(services)


def _restore_transcripts_only(config: AppConfig) -> None:
    for path in list(config.data_dir.glob("state.db*")) + list(
        config.conversations_dir.glob("conversations.db*")
    ):
        path.unlink()


async def test_a_new_state_db_next_to_transcripts_names_the_replies_maybe_unsent(
    tmp_path: Path,
) -> None:
    """Regression (session 40): restoring the transcripts without state.db lost a reply
    that waited in the outbox (its channel failing at the backup), and the only word was
    an ERROR line in the log; `my-agent status` said "outbox: 0 pending"."""
    config = make_config(tmp_path)
    await _say(config, [("garden", "m1", "when to water the basil")])
    conn = connect_ro(config.state_path)
    try:  # an ordinary first start: nothing was lost, nothing recorded
        assert state_new.made_new_report(conn) is None
    finally:
        conn.close()
    _restore_transcripts_only(config)

    (alert,) = await _alerts_at_start(config)
    assert alert.startswith("Replies that may not have reached you: the reply to “when to water")
    assert "state.db was missing" in alert
    report = collect(config, deep=False)
    assert report["state_new"]["count"] == 1
    text = format_text(report)
    assert "made new" in text and "the last reply of 1 conversation(s) may not" in text, text
    assert "the owner was told" in text
    assert await _alerts_at_start(config) == []  # told once


async def test_only_the_recent_last_replies_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation whose last reply is well before the newest stored one went out (or
    the owner asked again): it is not named. (The window is shrunk to nothing here: only
    the newest conversation's reply is within it.)"""
    monkeypatch.setattr(state_new, "WINDOW_SECONDS", 0.0)
    config = make_config(tmp_path)
    await _say(config, [("old", "m1", "an old question"), ("new", "m2", "a new question")])
    _restore_transcripts_only(config)
    (alert,) = await _alerts_at_start(config)
    assert "“a new question”" in alert and "an old question" not in alert, alert


async def test_a_restore_with_state_db_tells_nothing(tmp_path: Path) -> None:
    """Only a state.db made anew is told of: a restart, or a restore with state.db, not."""
    config = make_config(tmp_path)
    await _say(config, [("garden", "m1", "when to water the basil")])
    for path in config.conversations_dir.glob("conversations.db*"):
        path.unlink()
    assert await _alerts_at_start(config) == []
    assert collect(config, deep=False).get("state_new") is None


def test_a_made_new_time_without_an_offset_is_read_as_utc() -> None:
    # Regression (session 42): the row's ``at`` without an offset came back naive, and
    # ``my-agent status`` failed on "aware now minus naive" (TypeError); every stored
    # time without one is UTC (bot/moments.py). A malformed one still shows nothing.
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE channel_cursors (channel TEXT, key TEXT, value TEXT)")
    row = {"at": "2026-03-01T12:00:00", "told": "2026-03-01T12:05:00.000Z", "count": 0}
    conn.execute(
        "INSERT INTO channel_cursors VALUES (?, ?, ?)", (*state_new.CURSOR, json.dumps(row))
    )
    now = datetime(2026, 3, 3, tzinfo=UTC)
    assert state_new.made_new_report(conn, now) == row
    assert state_new.made_new_report(conn, now + timedelta(days=state_new.SHOWN_DAYS)) is None
    conn.execute("UPDATE channel_cursors SET value = ?", (json.dumps({**row, "at": "garbage"}),))
    assert state_new.made_new_report(conn, now) is None
