"""bot.notify against a real unix datagram NOTIFY_SOCKET (path and abstract namespace)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.notify import Notifier, read_status_file
from tests.ops.notify_listener import NotifyListener


@pytest.fixture
def listener() -> Iterator[NotifyListener]:
    lst = NotifyListener()
    yield lst
    lst.close()


def _env(listener: NotifyListener, **extra: str) -> dict[str, str]:
    return {"NOTIFY_SOCKET": listener.env_value, **extra}


def test_without_notify_socket_everything_is_a_no_op(tmp_path: Path) -> None:
    n = Notifier(env={})
    assert not n.enabled
    assert n.watchdog_interval is None
    assert n.ping_interval is None
    assert n.notify("READY=1") is False
    n.ready("up")
    n.status("x")
    n.stopping()
    n.close()


async def test_without_socket_or_file_no_heartbeat_task() -> None:
    n = Notifier(env={"WATCHDOG_USEC": "1000000"})
    # WATCHDOG_USEC means nothing without somewhere to send the pings.
    assert n.watchdog_interval is None
    n.start_watchdog()
    assert n._task is None
    await n.stop_watchdog()


def test_ready_status_stopping_reach_the_socket(listener: NotifyListener) -> None:
    n = Notifier(env=_env(listener))
    assert n.enabled
    n.ready("channels up: loopback")
    n.status("2 conversations, outbox 0")
    n.status("2 conversations, outbox 0")  # unchanged: not re-sent
    n.status("line one\nline two")
    n.stopping()
    n.close()
    msgs = listener.drain()
    assert msgs[0]["READY"] == "1"
    assert msgs[0]["MAINPID"] == str(os.getpid())
    assert msgs[0]["STATUS"] == "channels up: loopback"
    assert msgs[1] == {"STATUS": "2 conversations, outbox 0"}
    # A newline inside a status would have started a bogus field.
    assert msgs[2] == {"STATUS": "line one line two"}
    assert msgs[3]["STOPPING"] == "1"
    assert len(msgs) == 4


def test_abstract_namespace_socket() -> None:
    lst = NotifyListener(abstract=True)
    try:
        assert lst.env_value.startswith("@")
        n = Notifier(env=_env(lst))
        n.ready()
        n.close()
        assert lst.drain()[0]["READY"] == "1"
    finally:
        lst.close()


def test_unreachable_socket_never_raises(tmp_path: Path) -> None:
    n = Notifier(env={"NOTIFY_SOCKET": str(tmp_path / "absent.sock")})
    assert n.enabled
    assert n.notify("READY=1") is False
    n.ready("still fine")
    n.close()


def test_a_socket_gone_for_an_hour_is_logged_once_not_at_every_beat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: each failed datagram logged a warning; with $NOTIFY_SOCKET gone (a
    stale variable, a supervisor that went away) that was every heartbeat, 360 identical
    lines an hour. Now one line when it starts failing, one when it works again."""
    path = tmp_path / "n.sock"
    n = Notifier(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "30000000"})
    caplog.set_level(logging.DEBUG, logger="my_agent.notify")
    for _ in range(360):  # an hour of beats every 10 s
        n.beat()
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.WARNING
    assert "WATCHDOG failed" in failures[0].getMessage()
    caplog.clear()
    back = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    back.bind(str(path))
    try:
        n.beat()
        assert back.recv(4096) == b"WATCHDOG=1"
        assert [r.getMessage() for r in caplog.records] == [
            "sd_notify works again (360 message(s) were lost)"
        ]
        n.beat()  # and nothing more is said while it works
        assert len(caplog.records) == 1
    finally:
        back.close()
        n.close()


def test_relative_or_foreign_socket_values_are_ignored() -> None:
    assert not Notifier(env={"NOTIFY_SOCKET": "vsock:2:1234"}).enabled
    assert not Notifier(env={"NOTIFY_SOCKET": "relative/path"}).enabled


def test_watchdog_pid_is_respected(listener: NotifyListener) -> None:
    usec = {"WATCHDOG_USEC": "30000000"}
    assert Notifier(env=_env(listener, **usec)).watchdog_interval == 30.0
    mine = _env(listener, WATCHDOG_PID=str(os.getpid()), **usec)
    assert Notifier(env=mine).watchdog_interval == 30.0
    other = _env(listener, WATCHDOG_PID=str(os.getpid() + 1), **usec)
    assert Notifier(env=other).watchdog_interval is None
    assert Notifier(env=_env(listener, WATCHDOG_USEC="junk")).watchdog_interval is None
    assert Notifier(env=_env(listener, WATCHDOG_USEC="0")).watchdog_interval is None
    # Half the timeout, as sd_watchdog_enabled(3) recommends.
    assert Notifier(env=_env(listener, **usec)).ping_interval == 15.0


async def test_heartbeat_sends_watchdog_and_stops(listener: NotifyListener) -> None:
    n = Notifier(env=_env(listener, WATCHDOG_USEC="100000"))
    assert n.ping_interval == pytest.approx(0.05)
    n.start_watchdog()
    n.start_watchdog()  # idempotent: still one task
    await listener.wait_for(lambda m: "WATCHDOG" in m)
    await listener.wait_for(lambda m: "WATCHDOG" in m)
    await n.stop_watchdog()
    await n.stop_watchdog()
    listener.drain()
    # After stop_watchdog nothing more is sent, however long the loop runs.
    before = n.heartbeats
    await asyncio.sleep(0.2)
    assert listener.drain() == []
    assert n.heartbeats == before
    n.close()


async def test_no_watchdog_while_the_event_loop_is_stuck(listener: NotifyListener) -> None:
    n = Notifier(env=_env(listener, WATCHDOG_USEC="100000"))
    n.start_watchdog()
    await listener.wait_for(lambda m: "WATCHDOG" in m)
    listener.drain()
    beats = n.heartbeats
    # Block the loop for ten ping intervals: the heartbeat lives on this loop, so it
    # cannot fire. Read the socket before yielding to the loop again.
    time.sleep(0.5)
    assert listener.drain() == []
    assert n.heartbeats == beats
    # Once the loop runs again the pings resume.
    await listener.wait_for(lambda m: "WATCHDOG" in m)
    await n.stop_watchdog()
    n.close()


async def test_status_file_mirrors_state(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    n = Notifier(env={}, status_path=path, file_heartbeat=0.05)
    assert read_status_file(path) is None
    n.start_watchdog()  # no systemd, but the file still gets its heartbeat
    await asyncio.sleep(0)
    first = read_status_file(path)
    assert first is not None and first["state"] == "starting"
    assert first["pid"] == os.getpid() and first["systemd"] is False
    n.ready("channels up")
    data = read_status_file(path)
    assert data is not None and data["state"] == "ready" and data["status"] == "channels up"
    stamp = data["updated_at"]
    for _ in range(100):
        await asyncio.sleep(0.02)
        data = read_status_file(path)
        if data is not None and data["updated_at"] > stamp:
            break
    assert data is not None and data["updated_at"] > stamp
    n.stopping()
    await n.stop_watchdog()
    n.stopped()
    data = read_status_file(path)
    assert data is not None and data["state"] == "stopped"
    assert not (tmp_path / "daemon.json.tmp").exists()


def test_unreadable_status_file(tmp_path: Path) -> None:
    bad = tmp_path / "daemon.json"
    bad.write_text("{not json")
    assert read_status_file(bad) is None
    bad.write_text("[1, 2]")
    assert read_status_file(bad) is None


def test_reloading_message(listener: NotifyListener) -> None:
    n = Notifier(env=_env(listener))
    n.reloading()
    n.ready("reloaded")
    n.close()
    msgs = listener.drain()
    assert msgs[0]["RELOADING"] == "1" and int(msgs[0]["MONOTONIC_USEC"]) > 0
    assert msgs[1]["READY"] == "1"


def test_extend_timeout(listener: NotifyListener) -> None:
    n = Notifier(env=_env(listener))
    n.extend_timeout(2.5)
    n.close()
    assert listener.drain() == [{"EXTEND_TIMEOUT_USEC": "2500000"}]


async def test_real_daemon_ready_watchdog_stopping(tmp_path: Path) -> None:
    """The daemon (``python -m bot.cli run``) under a real NOTIFY_SOCKET and watchdog."""
    from tests.ops.daemon import DaemonProcess

    config = {
        "data_dir": str(tmp_path / "data"),
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True}},
        "embedding": {"enabled": False},
        "owner": {"identities": {"loopback": ["owner"]}},
    }
    daemon = DaemonProcess(tmp_path, config, watchdog_usec=200_000)
    try:
        await daemon.start()
        assert daemon.notify is not None
        ready = await daemon.notify.wait_for(lambda m: m.get("READY") == "1")
        assert ready["MAINPID"] == str(daemon.pid)
        assert "loopback" in ready["STATUS"]
        after_ready = next(i for i, m in enumerate(daemon.notify.messages) if m.get("READY") == "1")
        await daemon.notify.wait_for(lambda m: "WATCHDOG" in m, since=after_ready + 1)
        assert await daemon.terminate() == 0, daemon.log()
        daemon.notify.drain()
        keys = [k for k in daemon.notify.keys() if k in ("READY", "WATCHDOG", "STOPPING")]
        # Pings start with the process (recovery may be long), so some may precede READY;
        # what matters is READY, then pings while running, then STOPPING.
        ready_at, stopping_at = keys.index("READY"), keys.index("STOPPING")
        assert ready_at < stopping_at, keys
        assert "WATCHDOG" in keys[ready_at + 1 : stopping_at], keys
        assert keys.count("READY") == 1 and keys.count("STOPPING") == 1
        status = json.loads((tmp_path / "data" / "daemon.json").read_text())
        assert status["state"] == "stopped" and status["systemd"] is True
        assert status["watchdog_seconds"] == 0.2
    finally:
        await daemon.close()


async def test_status_updates_follow_the_producer(listener: NotifyListener) -> None:
    n = Notifier(env=_env(listener))
    lines = iter(["ready: 1 conversations", "ready: 1 conversations", "ready: 2 conversations"])
    calls = 0

    async def producer() -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("index busy")  # logged, the loop goes on
        return next(lines, "ready: 2 conversations")

    n.start_status_updates(producer, interval=0.01)
    await asyncio.sleep(0.1)
    assert calls == 0 and listener.drain() == []  # nothing before READY
    n.ready("up")
    await listener.wait_for(lambda m: m.get("STATUS") == "ready: 2 conversations")
    await n.stop_watchdog()
    statuses = [m["STATUS"] for m in listener.messages if "STATUS" in m]
    # Each distinct line once, in order (repeats are not re-sent).
    assert statuses == ["up", "ready: 1 conversations", "ready: 2 conversations"]
    n.close()


async def test_a_status_line_failing_for_an_hour_is_logged_once(
    listener: NotifyListener, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a status producer that kept failing (the index locked, a disk
    failing) logged a warning every 30 s, 120 identical lines an hour."""
    n = Notifier(env=_env(listener))
    calls = 0

    async def producer() -> str:
        nonlocal calls
        calls += 1
        if calls <= 120:
            raise RuntimeError("index busy")
        return "ready: again"

    caplog.set_level(logging.INFO, logger="my_agent.notify")
    n.ready("up")
    n.start_status_updates(producer, interval=0.001)
    await listener.wait_for(lambda m: m.get("STATUS") == "ready: again")
    await n.stop_watchdog()
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "status line failed: index busy (not logged again until it works)",
        "status line works again after 120 failure(s)",
    ]
    n.close()


async def test_stop_watchdog_does_not_swallow_its_own_cancellation(
    listener: NotifyListener,
) -> None:
    """Regression: stop_watchdog awaited its tasks under suppress(CancelledError), which
    also swallowed a cancellation of its caller: the caller went on as if not cancelled."""
    n = Notifier(env=_env(listener, WATCHDOG_USEC="100000"))
    n.start_watchdog()
    await listener.wait_for(lambda m: "WATCHDOG" in m)
    stopper = asyncio.create_task(n.stop_watchdog())
    await asyncio.sleep(0)  # stopper cancelled the heartbeat and waits for it to end
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    n.close()


def test_once_stopping_a_reload_never_says_ready_again(
    listener: NotifyListener, tmp_path: Path
) -> None:
    # Regression (session 40): a SIGHUP during the drain sent RELOADING=1 and READY=1
    # after STOPPING=1, and daemon.json said "ready" while the daemon stopped.
    path = tmp_path / "daemon.json"
    n = Notifier(env=_env(listener), status_path=path)
    n.ready("up")
    n.stopping()
    n.reloading()
    n.ready("ready: configuration reloaded")
    n.close()
    keys = [k for m in listener.drain() for k in m if k in ("READY", "RELOADING", "STOPPING")]
    assert keys == ["READY", "STOPPING"]
    status = read_status_file(path)
    assert status is not None and status["state"] == "stopping"
    n.stopped()
    status = read_status_file(path)
    assert status is not None and status["state"] == "stopped"


def test_an_error_exit_is_recorded_in_this_process_status_file_only(tmp_path: Path) -> None:
    """Session 42: the exit and its reason go into daemon.json as the process's last
    word (a refused start before ready, an end after it); a file another process wrote
    is left as it is."""
    from bot.health_daemon import daemon_from_status_file
    from bot.health_text import ended_text
    from bot.status_file import record_exit

    path = tmp_path / "daemon.json"
    n = Notifier(env={}, status_path=path)
    n.status("opening the store and index")
    assert record_exit(path, 74, "cannot open state.db: damaged\nrestore it from a backup")
    daemon = daemon_from_status_file(tmp_path)
    assert daemon["state"] == "stopped" and "unclean" not in daemon
    assert ended_text(daemon) == "its start was refused (exit 74): cannot open state.db: damaged"

    n.ready("ready")  # served, then ended by a bug
    assert record_exit(path, 70, "internal error: RuntimeError: boom")
    daemon = daemon_from_status_file(tmp_path)
    assert ended_text(daemon) == "it ended with exit 70: internal error: RuntimeError: boom"

    other = {"pid": os.getppid(), "state": "ready", "updated_at": time.time()}
    path.write_text(json.dumps(other))
    assert not record_exit(path, 74, "not ours")
    assert read_status_file(path) == other
