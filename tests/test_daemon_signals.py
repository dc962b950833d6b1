"""Signals in the daemon's own loop (bot.daemon.run_daemon in this process), in the
orders that lost them: a SIGHUP read as the daemon got ready, a second Ctrl-C read
before the daemon had begun to stop."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest
import yaml

from bot.config import load_config
from bot.daemon import run_daemon
from bot.index import ConversationIndex
from bot.notify import Notifier
from tests.ops.notify_listener import NotifyListener


def _write_config(path: Path, data_dir: Path, owner: str) -> None:
    raw = {
        "data_dir": str(data_dir),
        "brain": {"provider": "offline"},
        "embedding": {"enabled": False},
        "owner": {"identities": {"telegram": [owner]}},
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True, "port": 0}},
    }
    path.write_text(yaml.safe_dump(raw))


async def test_a_sighup_read_by_the_loop_as_the_daemon_gets_ready_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: one handler until ready (it remembered the SIGHUP), another after, and
    # a look at the first's flag in between. A SIGHUP the loop had read but whose callback
    # it had not yet run when the daemon looked ran the first handler after the look: no
    # reload (the Telegram SIGHUP test, twice in CI under load). Here the signal comes in
    # the daemon's last await before ready, in the order that loses it.
    path = tmp_path / "config.yaml"
    _write_config(path, tmp_path / "data", "1001")
    count = ConversationIndex.count
    hangups = 0

    async def count_and_hang_up(self: ConversationIndex) -> int:
        nonlocal hangups
        found = await count(self)
        if hangups == 0:  # the count just before "ready" (the first call)
            hangups += 1
            _write_config(path, tmp_path / "data", "3003")
            # As when the count's thread is done: its result is queued before the loop
            # reads the signal, so the daemon is resumed before the signal's callback
            # runs (and after the loop looked up which handler to call).
            done = asyncio.get_running_loop().create_future()
            os.kill(os.getpid(), signal.SIGHUP)
            asyncio.get_running_loop().call_soon(done.set_result, None)
            await done
        return found

    monkeypatch.setattr(ConversationIndex, "count", count_and_hang_up)
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="my_agent.daemon"):
        daemon = asyncio.create_task(run_daemon(load_config(path), stop, config_path=path))
        try:
            for _ in range(600):
                if "configuration reloaded" in caplog.text or daemon.done():
                    break
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            assert await asyncio.wait_for(daemon, 30) == 0
    assert hangups == 1
    assert "configuration reloaded (trust list, owner identities)" in caplog.text, caplog.text


async def test_two_ctrl_c_at_once_hurry_the_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: the second Ctrl-C's handler replaced the first only once the daemon had
    # logged "stopping". Two SIGINTs the loop read together both ran the first (stop) and
    # the stop waited out the whole drain.
    path = tmp_path / "config.yaml"
    _write_config(path, tmp_path / "data", "1001")
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="my_agent.daemon"):
        daemon = asyncio.create_task(run_daemon(load_config(path), stop, config_path=path))
        try:
            for _ in range(600):
                if "my-agent ready" in caplog.text or daemon.done():
                    break
                await asyncio.sleep(0.05)
            assert "my-agent ready" in caplog.text, caplog.text
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            assert await asyncio.wait_for(asyncio.shield(daemon), 30) == 0
        finally:
            stop.set()
            await asyncio.wait_for(daemon, 30)
    assert "interrupted again: stopping now" in caplog.text, caplog.text


async def test_a_sighup_while_the_daemon_stops_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression (session 40): the SIGHUP handler stayed on after the stop began. A
    # SIGHUP during the drain reloaded against services shutting down and told systemd
    # RELOADING=1 then READY=1 after STOPPING=1. The signal is sent here as the stop
    # begins, and read by the loop at the shutdown's next await.
    path = tmp_path / "config.yaml"
    _write_config(path, tmp_path / "data", "1001")
    listener = NotifyListener()
    monkeypatch.setenv("NOTIFY_SOCKET", listener.env_value)
    stopping = Notifier.stopping

    def stopping_then_hang_up(self: Notifier, status: str = "stopping: draining replies") -> None:
        stopping(self, status)
        os.kill(os.getpid(), signal.SIGHUP)

    monkeypatch.setattr(Notifier, "stopping", stopping_then_hang_up)
    stop = asyncio.Event()
    try:
        with caplog.at_level(logging.INFO, logger="my_agent.daemon"):
            daemon = asyncio.create_task(run_daemon(load_config(path), stop, config_path=path))
            try:
                for _ in range(600):
                    if "my-agent ready" in caplog.text or daemon.done():
                        break
                    await asyncio.sleep(0.05)
                assert "my-agent ready" in caplog.text, caplog.text
                _write_config(path, tmp_path / "data", "3003")
            finally:
                stop.set()
                assert await asyncio.wait_for(daemon, 30) == 0
        listener.drain()
    finally:
        listener.close()
    assert "SIGHUP ignored: the daemon is stopping" in caplog.text, caplog.text
    assert "configuration reloaded" not in caplog.text, caplog.text
    keys = [k for k in listener.keys() if k in ("READY", "RELOADING", "STOPPING")]
    assert keys == ["READY", "STOPPING"], keys
