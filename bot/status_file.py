"""The daemon's status file (``data_dir/daemon.json``): its state for ``my-agent status``.

:class:`bot.notify.Notifier` writes it on every change and heartbeat, with or without
systemd; ``my-agent status`` and the health check read it (:mod:`bot.health_daemon`)
to tell a live daemon from a dead one, and from a later process that got its pid
(:func:`process_start_ticks`).

A daemon that exits with an error (its start refused: exit 74 for a database it cannot
use, 69 for a channel that cannot start; or a bug, 70) records it there last
(:func:`record_exit`): before session 42 a refused start left ``starting``, and
``my-agent status`` said the daemon had been killed or had crashed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("my_agent.notify")

STATUS_FILE_NAME = "daemon.json"


def write_status_file(path: Path, state: dict[str, Any]) -> None:
    """Replace the file at ``path`` with ``state`` as JSON; a failure is logged (debug)
    and otherwise ignored."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        # Small and not fsynced on purpose: it is advisory, rewritten every heartbeat.
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("cannot write %s: %s", path, exc)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # a full disk made it and refused its bytes


def read_status_file(path: Path) -> dict[str, Any] | None:
    """The daemon's last written state, or None when absent or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``), None
    without /proc. Unlike a wall-clock start time it does not move when the clock is
    set: it tells this process from a later one that got its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def record_exit(path: Path, code: int, reason: str) -> bool:
    """Record in the status file at ``path`` that this process ends with exit ``code``
    for ``reason`` (its first line): state ``stopped``, ``exit_code`` and
    ``exit_reason``. Only a file this process wrote is changed (another daemon's, or
    one left by an earlier process, is not ours to say anything of); returns whether it
    was."""
    data = read_status_file(path)
    pid = os.getpid()
    if data is None or data.get("pid") != pid:
        return False
    ticks = process_start_ticks(pid)
    if ticks is not None and data.get("start_ticks") not in (None, ticks):
        return False  # written by an earlier process that had our pid
    lines = reason.strip().splitlines()
    data.update(
        state="stopped",
        exit_code=code,
        exit_reason=lines[0] if lines else "",
        updated_at=time.time(),
    )
    write_status_file(path, data)
    return True
