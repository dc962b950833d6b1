"""Daemon liveness, read from outside the daemon (part of ``my-agent status``).

- the status file the daemon's :class:`bot.notify.Notifier` rewrites on every heartbeat
  (``data_dir/daemon.json``: pid, state, last beat), checked against the process table
  (a zombie or a reused pid is no daemon);
- ``/readyz`` on the web channel when it is enabled;
- free space in the data directory's file system.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bot.config.model import AppConfig
from bot.notify import STATUS_FILE_NAME, process_start_ticks, read_status_file

# A heartbeat older than this many intervals means the loop is stuck or the process died.
STALE_INTERVALS = 3.0


# Less free space than this in the data directory's file system: it counts as full (a
# message, its journal record and its index rows no longer fit for long).
FULL_BYTES = 1 << 20


def data_dir_unreadable(path: Path) -> str | None:
    """Why a command that reads the store cannot use the data directory ``path`` (None:
    it can). ``Path.is_dir`` is False for a directory this user may not enter as well:
    ``my-agent status`` without sudo next to the system unit (``/var/lib/private`` is
    0700) said the data directory did not exist, as if the history were gone.

    The path is said absolute: "data directory .my_agent does not exist", from a command
    run in another directory than the daemon's, did not say where it had looked."""
    shown = path.absolute()
    denied = (
        f"data directory {shown} cannot be read as this user (permission denied): run the "
        "command as the service's user or with sudo"
    )
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"data directory {shown} does not exist ({_elsewhere(path)})"
    except PermissionError:
        return denied
    except OSError as exc:
        return f"data directory {shown} cannot be read: {exc}"
    if not stat.S_ISDIR(mode):
        return f"data directory {shown} is not a directory"
    if not os.access(path, os.R_OK | os.X_OK):
        return denied
    return None


def _elsewhere(path: Path) -> str:
    """Where the store may be instead of ``path``: the hint after "does not exist"."""
    give = "give --config (the daemon's config file) or MY_AGENT_DATA_DIR (its data directory)"
    if path.is_absolute():
        return f"is the store elsewhere? {give}"
    return f"{path} is relative: run the command in the directory the daemon runs in, or {give}"


def disk_space(path: Path) -> dict[str, Any]:
    """Free and total bytes of the file system holding ``path`` (as the daemon's
    unprivileged user sees it: without the blocks reserved for root)."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"error": str(exc), "full": False}
    free = st.f_bavail * st.f_frsize
    return {"free_bytes": free, "total_bytes": st.f_blocks * st.f_frsize, "full": free < FULL_BYTES}


def _pid_alive(pid: int, started_at: float | None = None, start_ticks: int | None = None) -> bool:
    """Whether ``pid`` is still the daemon that wrote its status file at ``started_at``.

    ``os.kill(pid, 0)`` alone also succeeds for a daemon killed (``kill -9``) but not yet
    reaped by its parent (a zombie), and for another process that got the pid later:
    both were reported as a ready daemon.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user (the service's DynamicUser)
    proc = _proc_state(pid)
    if proc is None:
        return True  # no /proc to ask: trust the signal check
    state, started = proc
    if state == "Z":
        return False
    ticks = process_start_ticks(pid)
    if start_ticks is not None and ticks is not None:
        return ticks == start_ticks
    # (A status file without start_ticks, from an older version.) The daemon wrote
    # started_at after it started; a process started later is another. Both sides are
    # wall-clock times: a clock set forward since makes this one look started later.
    return not (started_at and started > started_at + 2.0)


def _proc_state(pid: int) -> tuple[str, float] | None:
    """(state letter, start time as a Unix time) of ``pid`` from /proc, None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold ")"
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def daemon_from_status_file(data_dir: Path, now: float | None = None) -> dict[str, Any]:
    """Interpret ``daemon.json``: running / stale / stopped / unknown."""
    data = read_status_file(data_dir / STATUS_FILE_NAME)
    if data is None:
        return {"state": "unknown", "source": "none", "detail": "no status file"}
    now = time.time() if now is None else now
    # Whatever the file holds (an edit by hand, another version): never a traceback, and
    # never a pid below 1 (``os.kill(-1, 0)`` succeeds: "any process", read as ready).
    raw_pid = _number(data.get("pid"))
    valid = raw_pid is not None and raw_pid.is_integer() and 1 <= raw_pid < 2**31
    pid = int(raw_pid) if valid and raw_pid is not None else 0
    age = now - (_number(data.get("updated_at")) or 0.0)
    interval = _number(data.get("heartbeat_interval"))
    out: dict[str, Any] = {
        "source": "status-file",
        "pid": pid,
        "reported_state": data.get("state"),
        "status": data.get("status", ""),
        "heartbeat_age_seconds": round(age, 1),
        "uptime_seconds": round(now - (_number(data.get("started_at")) or now), 1),
        # how old the figures of "status" are (made every 30 s): beside the fresh counts
        # of `my-agent status` they read as contradicting them
        "status_age_seconds": round(now - (_number(data.get("status_at")) or now), 1),
        "systemd": bool(data.get("systemd")),
    }
    brain = data.get("brain")
    if isinstance(brain, str) and brain:
        out["brain"] = brain  # the running daemon's: "offline" when no model answers
    started = _number(data.get("started_at"))
    ticks = _number(data.get("start_ticks"))
    alive = bool(pid) and _pid_alive(pid, started, int(ticks) if ticks is not None else None)
    if data.get("state") == "stopped" or not pid or not alive:
        out["state"] = "stopped"
        if data.get("state") != "stopped" and pid:
            # Its last word was "ready" (or "starting"...) and it never wrote "stopped":
            # killed (kill -9, the OOM killer) or crashed. Its status line is what it
            # said alive, printed after "stopped" it read as the state of now.
            out["unclean"] = True
        _exit(data, out)
    elif interval is not None and age > STALE_INTERVALS * interval + 2:
        out["state"] = "stale"  # alive but no heartbeat: the event loop is stuck
    else:
        state = data.get("state")
        out["state"] = state if isinstance(state, str) and state else "unknown"
    return out


def _exit(data: dict[str, Any], out: dict[str, Any]) -> None:
    """The error exit a stopped daemon recorded (:func:`bot.status_file.record_exit`),
    into ``out``: ``exit_code``, ``exit_reason``, and ``refused`` when it never said
    ready (its start was refused)."""
    code = _number(data.get("exit_code"))
    if data.get("state") != "stopped" or not code or not code.is_integer():
        return
    reason = data.get("exit_reason")
    out["exit_code"] = int(code)
    out["exit_reason"] = reason if isinstance(reason, str) else ""
    out["refused"] = _number(data.get("ready_at")) is None


def _number(value: Any) -> float | None:
    """A finite number from the status file, None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _fetch_readyz(url: str, timeout: float) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read(65536)
            status = resp.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(65536), exc.code
    except urllib.error.URLError as exc:  # "[Errno 111] Connection refused", not wrapped
        return {"url": url, "ok": False, "error": str(exc.reason)}
    except (OSError, ValueError) as exc:
        return {"url": url, "ok": False, "error": str(exc)}
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = body.decode("utf-8", "replace")[:200]
    return {"url": url, "ok": status == 200, "http_status": status, "body": payload}


def check_readyz(config: AppConfig, timeout: float = 2.0) -> dict[str, Any] | None:
    """GET ``/readyz`` of the web channel (None when the web channel is disabled)."""
    web = config.channels.web
    if not web.enabled or not web.port:
        return None
    host = "127.0.0.1" if web.host in ("0.0.0.0", "", "::") else web.host
    host = f"[{host}]" if ":" in host else host
    return _fetch_readyz(f"http://{host}:{web.port}/readyz", timeout)


__all__ = [
    "FULL_BYTES",
    "STALE_INTERVALS",
    "check_readyz",
    "daemon_from_status_file",
    "data_dir_unreadable",
    "disk_space",
]
