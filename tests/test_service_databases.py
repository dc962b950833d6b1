"""state.db damaged in a page its open does not read (bot/service_databases.py): the
daemon refuses it at the start (exit 74, naming the file and the remedy), and damage met
after the open is the same exit for the daemon and a command, never an internal error."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bot import exitcodes
from bot.cli_store import _open_and_run
from bot.config import AppConfig
from bot.index_rescue import quick_check_text
from bot.services import DatabaseOpenError, Services, open_services
from tests.conftest import make_config, settle, shutdown_services
from tests.sqlite_driver import sqlite3
from tests.support import ScriptedBrain, garble_page, inbound

REMEDY = "restore it from a backup, or move it aside"


async def _store(config: AppConfig) -> None:
    services = await open_services(config, brain=ScriptedBrain())
    try:
        for i in range(3):
            await services.router.deliver(
                inbound(f"note {i}", channel="web", sender="owner", chat="d", message_id=f"m{i}")
            )
        await settle(services)
    finally:
        await shutdown_services(services)


def _malformed(conn: Any) -> None:
    """A read that meets a damaged page of state.db (SQLITE_CORRUPT)."""
    exc = sqlite3.DatabaseError("database disk image is malformed")
    exc.sqlite_errorcode = 11  # type: ignore[attr-defined]
    raise exc


async def test_a_damaged_outbox_page_stops_the_daemons_start_naming_state_db(
    tmp_path: Path,
) -> None:
    """Regression (session 40): a state.db damaged in a page the open does not read (a
    hot copy whose WAL did not match, a bad sector) opened; the first query to reach the
    outbox ended the daemon as an internal error (exit 70) and systemd restarted it into
    the same error. The quick check at the open refuses it, as a state.db the open
    itself refuses."""
    config = make_config(tmp_path)
    await _store(config)
    garble_page(config.state_path, "outbox")
    with pytest.raises(DatabaseOpenError) as refused:
        services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
        await shutdown_services(services)
    said = str(refused.value)
    assert f"cannot open {config.state_path}: quick check" in said, said
    assert REMEDY in said, said
    # a one-shot command does not pay for the check (it rarely reads state.db)
    services = await open_services(config, brain=ScriptedBrain())
    await shutdown_services(services)


async def test_state_damage_met_after_the_daemons_open_exits_74(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (session 40): damage the quick check could not have seen (the page
    went bad since) reached the daemon's error path as an internal error (exit 70)."""
    from bot import daemon

    async def start_serving(services: Services, channels: Any, stop: Any) -> int:
        await services.state.run(_malformed, write=False)
        return 0

    monkeypatch.setattr(daemon, "start_serving", start_serving)
    config = make_config(tmp_path)
    with pytest.raises(DatabaseOpenError) as refused:
        await asyncio.wait_for(daemon.run_daemon(config, asyncio.Event()), 60)
    said = str(refused.value)
    assert f"{config.state_path} is damaged (database disk image is malformed)" in said, said
    assert REMEDY in said, said


async def test_state_damage_a_command_meets_exits_74(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command's query that meets a damaged page of state.db: exit 74 naming the file
    and the remedy (it was an internal error, exit 70, before session 40)."""
    config = make_config(tmp_path)
    await _store(config)

    async def command(services: Services) -> int:
        await services.state.run(_malformed, write=False)
        return 0

    status = await _open_and_run(config, command, recover_now=True, download_models=False)
    err = capsys.readouterr().err
    assert status == exitcodes.EX_DATABASE, err
    assert f"{config.state_path} is damaged" in err and REMEDY in err, err


def test_the_quick_checks_problems_are_counted_not_its_rows() -> None:
    """SQLite's quick check may list several problems in one row, a line each: a hot
    copy's state.db was "quick check, 1 problem: Tree 2 page 39 ...; Tree 2 page 38 ..."
    (session 40)."""
    found = ["*** in database main ***\nPage 3: bad\nPage 4: worse"]
    assert quick_check_text(found) == "quick check, 2 problems: Page 3: bad; Page 4: worse"
    assert quick_check_text(["row 1 missing from index x"]).startswith("quick check, 1 problem:")
