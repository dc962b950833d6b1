"""Who may use a data directory at the same time: the daemon, the reading commands and
``my-agent reindex``.

``data_dir/maintenance.lock`` is an flock(2) lock. The daemon and the reading commands
(``conversations``, ``search``) hold it shared for as long as they run; ``reindex``
holds it exclusively, from before it sets ``conversations.db`` aside until the rows are
rebuilt, then shared (:func:`share`). So a reindex refuses while anything else uses the
store, and a daemon starting during a reindex waits for it (bounded) instead of opening
the index that is about to be set aside, or running on one half rebuilt. (Before session
41 it was held exclusively through the embedding of every vector too: 30 minutes on a
large store, the daemon giving up after 120 s.)

The transcript journal's own lock (:func:`bot.journal.lock_journal`) still keeps a
second daemon off the directory. A reading command holds that one too while it replays
the journal and catches the index up; a daemon starting meanwhile waits for it
(:func:`wait_for_journal`) rather than exiting 75 and being restarted by systemd.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bot.index_rescue import is_lock_contention, is_storage_refusal
from bot.journal import journal_in_use
from bot.journal_files import journal_lock_path

if TYPE_CHECKING:
    from bot.config import AppConfig
    from bot.services import Services
    from bot.start_progress import StartProgress

log = logging.getLogger("my_agent.store_lock")

LOCK_NAME = "maintenance.lock"
# A daemon starting during a reindex waits this long for it; under the unit's
# TimeoutStartSec (180 s), and long enough that systemd's restarts after a refusal
# (RestartSec=5) stay far below StartLimitBurst (5 in 300 s).
REINDEX_WAIT_SECONDS = 120.0
# ... and this long for a reading command that holds the transcript journal (it replays
# the journal and catches the index up: seconds); a second daemon is refused after it.
JOURNAL_WAIT_SECONDS = 15.0
POLL_SECONDS = 0.1
# The daemon's start on a disk that refuses writes: tried again after 1, 2, 4 ... 10 s.
STORAGE_WAIT_FIRST = 1.0
STORAGE_WAIT_MAX = 10.0
STORAGE_LOG_SECONDS = 60.0  # while waiting, the log is told again this often


def try_lock(data_dir: Path, exclusive: bool) -> int | None:
    """The maintenance lock's fd, taken shared or exclusive; None while it is held in the
    other mode (or exclusively). Raises :class:`OSError` when the file cannot be opened.

    Opened read-only, created 0644: root running a command (sudo) next to the service's
    own user must not leave a file that user cannot open."""
    fd = os.open(data_dir / LOCK_NAME, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def share(fd: int | None) -> None:
    """Turn the exclusive lock ``fd`` (:func:`try_lock`) into a shared one: ``reindex``
    once the rows are rebuilt, so the daemon and the reading commands may use the store
    while it closes or embeds with ``--vectors``. (flock(2) converts it by letting it go
    and taking it again: should another process get it exclusively in between, this one
    goes on without it.)"""
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            log.debug("the maintenance lock was taken in between: going on without it")


def release(fd: int | None) -> None:
    """Release a lock :func:`try_lock` took (None: nothing to release)."""
    if fd is not None:
        os.close(fd)


async def _poll(ready: Callable[[], bool], seconds: float, stop: asyncio.Event | None) -> bool:
    """Call ``ready()`` every POLL_SECONDS until it is true (True), ``seconds`` pass or
    ``stop`` is set (False). On the loop: a SIGTERM while waiting is seen at once."""
    deadline = time.monotonic() + seconds
    while not ready():
        if (stop is not None and stop.is_set()) or time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_SECONDS)
    return True


async def lock_for_daemon(
    data_dir: Path, stop: asyncio.Event | None = None, seconds: float | None = None
) -> int | None:
    """The daemon's shared maintenance lock, waiting up to ``seconds`` for a running
    reindex. None when the data directory cannot be used yet (opening the services then
    says why, exit 73) or when ``stop`` was set while waiting. Raises
    :class:`TimeoutError` when the reindex is still running after ``seconds``."""
    seconds = REINDEX_WAIT_SECONDS if seconds is None else seconds
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # as open_services
        fd = try_lock(data_dir, exclusive=False)
    except OSError as exc:
        log.debug("no maintenance lock in %s: %s", data_dir, exc)
        return None
    if fd is not None:
        _refuse_a_running_daemon(data_dir, fd)
        return fd
    log.warning("a reindex is running on %s: waiting up to %.0f s for it to end", data_dir, seconds)
    taken: list[int] = []

    def ready() -> bool:
        got = try_lock(data_dir, exclusive=False)
        if got is not None:
            taken.append(got)
        return got is not None

    if await _poll(ready, seconds, stop):
        return taken[0]
    if stop is not None and stop.is_set():
        return None
    raise TimeoutError(f"a reindex is still running on {data_dir} after {seconds:.0f} s")


def running_daemon(data_dir: Path) -> int | None:
    """The pid of another daemon serving ``data_dir`` now, or None: ``daemon.json`` names
    a live process (its start ticks matching: not a reused pid), not stopping, and the
    transcript journal is held. A daemon stopping is waited for (a restart)."""
    from bot.health_daemon import daemon_from_status_file

    journal = data_dir / "conversations"  # AppConfig.conversations_dir
    if not journal.is_dir() or not journal_in_use(journal):
        return None
    daemon = daemon_from_status_file(data_dir)
    pid = daemon.get("pid")
    if daemon.get("state") in ("stopped", "stopping", "unknown") or not pid:
        return None
    return int(pid) if pid != os.getpid() else None


def _refuse_a_running_daemon(data_dir: Path, fd: int) -> None:
    """Raise :class:`bot.services.DataDirInUse` (exit 75), the maintenance lock ``fd``
    released, when another daemon serves ``data_dir``. `my-agent run` next to a running
    daemon waited JOURNAL_WAIT_SECONDS (15 s) before saying so; the wait is for a
    reading command, which holds the journal for seconds."""
    pid = running_daemon(data_dir)
    if pid is None:
        return
    from bot.services import DataDirInUse

    release(fd)
    lock = journal_lock_path(data_dir.resolve() / "conversations")
    raise DataDirInUse(
        f"another my-agent daemon (pid {pid}) is running on {data_dir.resolve()}"
        f" (it holds {lock}); stop it first"
    )


async def open_services_waiting(
    config: AppConfig,
    stop: asyncio.Event | None = None,
    waiting: Callable[[str], None] | None = None,
    progress: StartProgress | None = None,
) -> Services:
    """The daemon's ``open_services(exclusive=True)``, retried for up to
    JOURNAL_WAIT_SECONDS while another process holds the transcript journal: a reading
    command started just before the daemon made it exit 75 (and systemd restart it).
    Raises :class:`bot.services.DataDirInUse` when it is still held then (a daemon).

    While the disk refuses writes (full, read-only, failing) the open is tried again,
    backing off up to STORAGE_WAIT_MAX seconds, until it works or ``stop`` is set (then
    the error is raised); ``waiting(text)`` is told each time (the daemon's systemd
    status, and more start time: :meth:`bot.notify.Notifier.extend_timeout`). Before
    session 18 the daemon exited 74 at once; systemd restarted it every 5 s, gave up
    after 5 starts in 300 s (StartLimitBurst) and left it down once space came back.

    ``stop`` also reaches recovery, which ends between two transcripts once it is set
    (the services then open with ``recovery.stopped``; the next start goes on), and so
    does ``progress`` (how far its catch-up has come: :mod:`bot.start_progress`).
    """
    from bot.services import DataDirInUse, open_services

    def free() -> bool:  # the daemon takes both journals (bot.services.open_services)
        return not (journal_in_use(config.conversations_dir) or journal_in_use(config.external_dir))

    deadline = time.monotonic() + JOURNAL_WAIT_SECONDS
    warned = False
    delay = STORAGE_WAIT_FIRST
    said = -STORAGE_LOG_SECONDS
    while True:
        try:
            return await open_services(config, exclusive=True, stop=stop, progress=progress)
        except DataDirInUse:
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                raise
            if not warned:
                log.warning(
                    "the transcript journal of %s is held by another process (a my-agent "
                    "command, or another daemon): waiting up to %.0f s",
                    config.data_dir,
                    left,
                )
                warned = True
            await _poll(free, left, stop)
        except Exception as exc:
            if not may_wait(exc) or (stop is not None and stop.is_set()):
                raise
            # (a lock: the error says so, bot.service_databases; free space says nothing)
            disk = "" if is_lock_contention(exc) else _free_space(config.data_dir)
            why = f" ({disk})" if disk and disk not in str(exc) else ""
            text = f"cannot open the store: {exc}{why}; trying again in {delay:.0f} s"
            if time.monotonic() >= said + STORAGE_LOG_SECONDS:
                log.error("%s", text)
                said = time.monotonic()
            if waiting is not None:
                waiting(text)
            await _poll(lambda: False, delay, stop)
            if stop is not None and stop.is_set():
                raise
            delay = min(delay * 2, STORAGE_WAIT_MAX)


def may_wait(exc: BaseException) -> bool:
    """Whether the daemon's open is tried again after ``exc``: the disk refusing writes,
    or a database another process holds locked (a backup, an ``sqlite3`` shell). The
    lock made the daemon exit 74 advising to move state.db aside, which would have
    thrown away a good outbox; systemd restarted it into the same lock, 5 times."""
    return is_storage_refusal(exc) or is_lock_contention(exc)


def _free_space(data_dir: Path) -> str:
    """What the file system under ``data_dir`` says: read-only, or its free space; ""
    when that is not known. A data directory not created yet is looked at through its
    nearest existing folder: before session 40 the line ended "(free space of ...
    unknown: [Errno 2] No such file or directory)", noise about a read-only disk."""
    place = data_dir
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        st = os.statvfs(place)
    except OSError:
        return ""
    if st.f_flag & os.ST_RDONLY:
        return "the file system is read-only"
    return f"{st.f_bavail * st.f_frsize // 1024} KiB free in {place}"
