"""A kill -9 during the daemon's daily check of every page of the index
(tests/ops/crashpoint.py ``page-check``), with the real daemon: nothing acknowledged is
lost or answered twice after the restart, and the check interrupted is not put off for a
day: the next start runs it again, and ``my-agent status`` reports its result."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from bot.index_page_checks import CURSOR
from tests.ops.daemon import DaemonProcess
from tests.ops.loopback import (
    Loopback,
    base_config,
    replies_by_message,
    stored_owner_ids,
    wait_replies,
    wait_until,
)
from tests.sqlite_driver import sqlite3

pytestmark = pytest.mark.slow


def _status(daemon: DaemonProcess) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(daemon.config_path), "status", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    report: dict[str, object] = json.loads(done.stdout)
    return report


async def test_a_kill_during_the_page_check_loses_nothing_and_checks_again(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    daemon = DaemonProcess(tmp_path, base_config(tmp_path))
    daemons.append(daemon)
    await daemon.start(timeout=90)
    loop = Loopback(daemon, session)
    for n in (1, 2):
        assert await loop.post("owner", f"message {n}", f"m{n}") == 200
    await wait_replies(daemon, {"m1", "m2"}, 30)
    assert await daemon.terminate() == 0, daemon.log()
    first = (await asyncio.to_thread(_status, daemon))["index"]
    assert isinstance(first, dict) and first["pages"] == "ok" and first["pages_checked"]
    # the first start checked every page: a day has passed since (the time forgotten)
    conn = sqlite3.connect(daemon.data_dir / "state.db")
    with conn:
        conn.execute("DELETE FROM channel_cursors WHERE channel = ? AND key = ?", CURSOR)
    conn.close()

    daemon.crash_at = "page-check"
    (daemon.data_dir / "loopback.port").unlink(missing_ok=True)
    await daemon.start(timeout=90, wait_ready=False)
    assert daemon.proc is not None
    assert await daemon.proc.wait() == -9, daemon.log()
    assert "crashpoint: killed before keeping the page check's result (ok)" in daemon.log()

    daemon.crash_at = None
    (daemon.data_dir / "loopback.port").unlink(missing_ok=True)
    await daemon.start(timeout=90)
    assert await Loopback(daemon, session).post("owner", "message 3", "m3") == 200
    await wait_replies(daemon, {"m3"}, 30)

    async def checked_again() -> bool:
        report = await asyncio.to_thread(_status, daemon)
        index = report.get("index")
        if not isinstance(index, dict) or index.get("pages") != "ok":
            return False
        return str(index["pages_checked"]) > str(first["pages_checked"])

    await wait_until(checked_again, 60, "the page check the kill interrupted", daemon)
    assert await daemon.terminate() == 0, daemon.log()
    assert replies_by_message(daemon.data_dir) == {"m1": 1, "m2": 1, "m3": 1}
    assert stored_owner_ids(daemon.data_dir) == {"m1": 1, "m2": 1, "m3": 1}
    report = await asyncio.to_thread(_status, daemon)
    index = report["index"]
    assert isinstance(index, dict) and index["ok"], index
