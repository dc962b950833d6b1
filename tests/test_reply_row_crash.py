"""A kill -9 between a reply's transcript turn and its outbox row (tests/ops/crashpoint.py
``reply-row``), with the real daemon: the next start queues the reply from the
transcript (bot/resume.py) and it is sent once, also when the wall clock was set back
meanwhile (the rows written before the kill look newer than the reply)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from bot.events import iso, utcnow
from tests.ops.daemon import DaemonProcess
from tests.ops.loopback import Loopback, base_config, replies_by_message, wait_replies
from tests.sqlite_driver import sqlite3

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("clock_set_back", [False, True])
async def test_a_reply_killed_before_its_outbox_row_is_sent_once_after_the_restart(
    tmp_path: Path,
    session: aiohttp.ClientSession,
    daemons: list[DaemonProcess],
    clock_set_back: bool,
) -> None:
    config = base_config(tmp_path)
    daemon = DaemonProcess(tmp_path, config, crash_at="reply-row:2")
    daemons.append(daemon)
    await daemon.start(timeout=90)
    loop = Loopback(daemon, session)
    assert await loop.post("owner", "first", "m1") == 200
    await wait_replies(daemon, {"m1"}, 30)
    assert await loop.post("owner", "second", "m2") == 200
    assert daemon.proc is not None
    assert await daemon.proc.wait() == -9, daemon.log()
    assert "crashpoint: killed before the outbox row" in daemon.log()
    if clock_set_back:
        # the clock ran two hours ahead while the rows were written, and was set right
        conn = sqlite3.connect(daemon.data_dir / "state.db")
        with conn:
            conn.execute("UPDATE outbox SET created = ?", (iso(utcnow() + timedelta(hours=2)),))
        conn.close()

    daemon.crash_at = None
    (daemon.data_dir / "loopback.port").unlink(missing_ok=True)
    await daemon.start(timeout=90)
    await wait_replies(daemon, {"m1", "m2"}, 30, "the reply the kill kept from the outbox")
    assert await daemon.terminate() == 0, daemon.log()
    assert replies_by_message(daemon.data_dir) == {"m1": 1, "m2": 1}
