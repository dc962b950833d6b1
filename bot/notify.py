"""systemd readiness and watchdog notifications (the ``sd_notify`` protocol), no libsystemd.

The daemon tells systemd (``Type=notify``) where it is: ``READY=1`` once its channels are
up, ``STATUS=...`` lines a human reads in ``systemctl status``, ``WATCHDOG=1`` heartbeats,
``STOPPING=1`` when it drains. Each is one datagram sent to the unix socket named by
``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace). Without
``$NOTIFY_SOCKET`` every call is a no-op, so the same code runs under a terminal.

The watchdog heartbeat is an asyncio task on the daemon's own event loop: when the loop
is stuck (a blocking call, a deadlock) no heartbeat is sent and systemd restarts the
service after ``WatchdogSec``. It pings at half of ``$WATCHDOG_USEC`` as sd_watchdog_enabled(3)
recommends, and only when ``$WATCHDOG_PID`` (if set) is our pid.

The notifier can also mirror its state into a small JSON file in the data directory
(``daemon.json``, :mod:`bot.status_file`) that ``my-agent status`` reads to tell whether
the daemon is alive, with or without systemd.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

# the status file's name and reader are re-exported: its readers import them from here
from bot.status_file import STATUS_FILE_NAME as STATUS_FILE_NAME
from bot.status_file import process_start_ticks, write_status_file
from bot.status_file import read_status_file as read_status_file

log = logging.getLogger("my_agent.notify")

# Heartbeat of the status file when systemd has no watchdog configured.
DEFAULT_FILE_HEARTBEAT = 10.0


def _socket_address(raw: str) -> str | None:
    """The address to ``sendto`` for a ``$NOTIFY_SOCKET`` value (``@`` = abstract)."""
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None  # vsock and other forms are not for us; treat as absent


def _watchdog_seconds(env: Mapping[str, str], pid: int) -> float | None:
    """``$WATCHDOG_USEC`` in seconds if it is meant for ``pid``, else None."""
    usec = env.get("WATCHDOG_USEC")
    if not usec:
        return None
    wpid = env.get("WATCHDOG_PID")
    if wpid:
        try:
            if int(wpid) != pid:
                return None
        except ValueError:
            return None
    try:
        value = int(usec)
    except ValueError:
        log.warning("ignoring malformed WATCHDOG_USEC=%r", usec)
        return None
    return value / 1_000_000 if value > 0 else None


class Notifier:
    """Send sd_notify messages and run the watchdog heartbeat.

    ``env`` defaults to ``os.environ`` (read once, at construction). ``status_path``, when
    given, receives the daemon's state as JSON on every change and heartbeat.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        status_path: Path | None = None,
        file_heartbeat: float = DEFAULT_FILE_HEARTBEAT,
    ) -> None:
        environ = os.environ if env is None else env
        self.pid = os.getpid()
        raw = environ.get("NOTIFY_SOCKET", "")
        self.address = _socket_address(raw) if raw else None
        self.watchdog_interval = (
            _watchdog_seconds(environ, self.pid) if self.address is not None else None
        )
        self.status_path = status_path
        self.file_heartbeat = file_heartbeat
        self.state = "starting"
        self._stopping = False  # once set, the state never goes back to ready
        self.status_at = time.time()  # when status_text was made (the status file says it)
        self.status_text = ""
        # The brain's name once the daemon built it ("offline": no model configured), in
        # the status file for `my-agent status` (its brain row, session 40).
        self.brain: str | None = None
        self.started_at = time.time()
        # When it first said ready (None: never): an exit with an error after it is an
        # end, before it a refused start (bot.status_file.record_exit)
        self.ready_at: float | None = None
        self.start_ticks = process_start_ticks(self.pid)
        self.heartbeats = 0
        self._sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._status_task: asyncio.Task[None] | None = None
        self._last_status: str | None = None
        # Messages lost since the last one that went through (logged once, not per beat).
        self._failed = 0

    @property
    def status_text(self) -> str:
        """The state line as last made: its figures are as of :attr:`status_at` (the
        live line is made every 30 s, the heartbeat writes it every 10 s)."""
        return self._status_text

    @status_text.setter
    def status_text(self, text: str) -> None:
        self._status_text = text
        self.status_at = time.time()

    # -- protocol -------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """True when systemd (or a test) listens on ``$NOTIFY_SOCKET``."""
        return self.address is not None

    @property
    def ping_interval(self) -> float | None:
        """Seconds between heartbeats: half the watchdog timeout (None without one)."""
        intervals = []
        if self.watchdog_interval is not None:
            intervals.append(self.watchdog_interval / 2)
        if self.status_path is not None:
            intervals.append(self.file_heartbeat)
        return min(intervals) if intervals else None

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` as one datagram (``KEY=value`` lines). Never raises."""
        if self.address is None:
            return False
        payload = "\n".join(fields).encode("utf-8", "replace")
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                # Never block the event loop: a full receiver queue drops the datagram.
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto(payload, self.address)
        except OSError as exc:
            # Once per outage: a socket gone for good (a stale $NOTIFY_SOCKET) logged a
            # warning at every heartbeat, 360 identical lines an hour.
            if not self._failed:
                log.warning(
                    "sd_notify %s failed: %s (further failures are not logged until it "
                    "works again)",
                    fields[0].split("=")[0] if fields else "",
                    exc,
                )
            self._failed += 1
            return False
        if self._failed:
            log.info("sd_notify works again (%d message(s) were lost)", self._failed)
            self._failed = 0
        return True

    def ready(self, status: str | None = None) -> None:
        """The daemon is up (channels started): ``READY=1`` plus an optional status.
        Nothing once :meth:`stopping` was called (a reload that ends during the stop)."""
        if self._stopping:
            return
        self.state = "ready"
        if self.ready_at is None:
            self.ready_at = time.time()
        fields = ["READY=1", f"MAINPID={self.pid}"]
        if status is not None:
            self.status_text = status
            self._last_status = status
            fields.append(f"STATUS={_one_line(status)}")
        self.notify(*fields)
        self._write_status_file()

    def status(self, text: str) -> None:
        """A human-readable state line (``systemctl status``); repeats are not re-sent."""
        self.status_text = text
        if text != self._last_status:
            self._last_status = text
            self.notify(f"STATUS={_one_line(text)}")
            self._write_status_file()

    def reloading(self, status: str = "reloading configuration") -> None:
        """``RELOADING=1`` on SIGHUP; call :meth:`ready` again when done. Nothing once
        :meth:`stopping` was called."""
        if self._stopping:
            # Before session 40, a SIGHUP during the drain sent RELOADING=1 then READY=1
            # after STOPPING=1, and daemon.json said "ready" while the daemon stopped.
            return
        self.state = "reloading"
        self.status_text = status
        self._last_status = status
        monotonic_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notify(
            "RELOADING=1", f"MONOTONIC_USEC={monotonic_usec}", f"STATUS={_one_line(status)}"
        )
        self._write_status_file()

    def stopping(self, status: str = "stopping: draining replies") -> None:
        """``STOPPING=1``: shutdown has begun. The watchdog keeps pinging while draining;
        :meth:`ready` and :meth:`reloading` do nothing from now on."""
        self._stopping = True
        self.state = "stopping"
        self.status_text = status
        self._last_status = status
        self.notify("STOPPING=1", f"STATUS={_one_line(status)}")
        self._write_status_file()

    def extend_timeout(self, seconds: float) -> None:
        """Ask systemd for ``seconds`` more before it gives up on a start or stop."""
        self.notify(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def stopped(self) -> None:
        """Final state for the status file (the process is about to exit)."""
        self.state = "stopped"
        self.status_text = "stopped"
        self._write_status_file()

    # -- heartbeat ------------------------------------------------------------------
    def start_watchdog(self) -> None:
        """Start the heartbeat task on the running loop (no-op without a watchdog/file)."""
        interval = self.ping_interval
        if interval is None or self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(
            self._heartbeat(interval), name="sd-watchdog"
        )

    def start_status_updates(
        self, producer: Callable[[], Awaitable[str]], interval: float = 30.0
    ) -> None:
        """Refresh ``STATUS=`` every ``interval`` seconds from ``producer()`` (e.g.
        :func:`bot.healthcheck.live_status`) while the daemon is ready."""
        if self._status_task is not None:
            return
        self._status_task = asyncio.get_running_loop().create_task(
            self._status_loop(producer, interval), name="sd-status"
        )

    async def _status_loop(self, producer: Callable[[], Awaitable[str]], interval: float) -> None:
        failed = 0  # the same error every 30 s for as long as it lasts: said once
        while True:
            await asyncio.sleep(interval)
            if self.state != "ready":
                continue  # stopping/reloading lines stay until the state changes
            try:
                text = await producer()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a status line is cosmetic: never kill the loop
                if not failed:
                    log.warning("status line failed: %s (not logged again until it works)", exc)
                failed += 1
                continue
            if failed:
                log.info("status line works again after %d failure(s)", failed)
                failed = 0
            self.status(text)

    async def stop_watchdog(self) -> None:
        """Cancel the heartbeat and status tasks and wait for them."""
        tasks = [t for t in (self._task, self._status_task) if t is not None]
        self._task = self._status_task = None
        for task in tasks:
            task.cancel()
        if tasks:
            # wait(), not `await task` under suppress(CancelledError): that also swallowed
            # a cancellation of the caller itself (the shutdown went on as if not asked).
            await asyncio.wait(tasks)

    def close(self) -> None:
        """Close the notification socket (the heartbeat must be stopped first)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def _heartbeat(self, interval: float) -> None:
        # Runs on the daemon's loop on purpose: a blocked loop stops the pings.
        while True:
            self.beat()
            await asyncio.sleep(interval)

    def beat(self) -> None:
        """One heartbeat: ``WATCHDOG=1`` (when systemd watches us) and the status file."""
        self.heartbeats += 1
        if self.watchdog_interval is not None:
            self.notify("WATCHDOG=1")
        self._write_status_file()

    # -- status file ----------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """What the status file holds."""
        return {
            "pid": self.pid,
            "state": self.state,
            "status": self.status_text,
            "status_at": self.status_at,
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "start_ticks": self.start_ticks,
            "updated_at": time.time(),
            "heartbeat_interval": self.ping_interval,
            "systemd": self.enabled,
            "watchdog_seconds": self.watchdog_interval,
            "brain": self.brain,
        }

    def _write_status_file(self) -> None:
        if self.status_path is not None:
            write_status_file(self.status_path, self.snapshot())


def _one_line(text: str) -> str:
    # A newline would start a new KEY=value field in the datagram.
    return " ".join(text.splitlines())
