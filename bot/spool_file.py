"""The spool's messages across a stop: ``data_dir/spool.jsonl`` and its reserve.

A message the disk refused is held in memory (:mod:`bot.spool`) and its channel was told
it is taken (the loopback's 202, the dashboard's ``kept``): it must outlive a stop
before the disk has room again. The daemon writes what is still held here when it
stops and holds it again at the next start (stored then, or at the next stop written
again); the file goes once all of it is stored. The disk that refused the messages may
refuse this file too: ``spool.reserve`` (1 MiB, made at start) is deleted to make room
for it. Each message that still cannot be written is logged (an ERROR naming its
channel, id and the start of its text), so that the journal keeps what was lost.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

from bot.events import Attachment, InboundMessage
from bot.moments import parse_moment

log = logging.getLogger("my_agent.services")

SPOOL_NAME = "spool.jsonl"
RESERVE_NAME = "spool.reserve"
RESERVE_BYTES = 1 << 20
TEXT_LOGGED = 200  # characters of a lost message's text in its log line

T = TypeVar("T")
_FIELDS = {f.name for f in fields(InboundMessage)}
_TUPLES = ("sender_aliases", "thread_refs")


def encode(message: InboundMessage) -> bytes:
    """One line of the spool file for ``message``."""
    record: dict[str, Any] = {name: getattr(message, name) for name in _FIELDS}
    record["received_at"] = message.received_at.isoformat()  # (to the microsecond)
    record["attachments"] = [asdict(a) for a in message.attachments]
    record["metadata"] = dict(message.metadata)  # (a read-only mapping: json cannot)
    return (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode()


def decode(record: Any) -> InboundMessage | None:
    """The message of one spool line (None if it is not one: skipped)."""
    if not isinstance(record, dict):
        return None
    try:
        values = {k: v for k, v in record.items() if k in _FIELDS}
        received = parse_moment(values["received_at"])
        if received is None:
            return None
        values["received_at"] = received
        values["attachments"] = tuple(Attachment(**a) for a in values.get("attachments") or ())
        for name in _TUPLES:
            values[name] = tuple(values.get(name) or ())
        values["metadata"] = dict(values.get("metadata") or {})
        return InboundMessage(**values)
    except (KeyError, TypeError, ValueError):
        return None


def read_held(data_dir: Path) -> list[InboundMessage]:
    """The messages the last stop left in the spool file ([] if none)."""
    try:
        raw = (data_dir / SPOOL_NAME).read_bytes()
    except FileNotFoundError:
        return []
    held = []
    for line in raw.splitlines():
        try:
            message = decode(json.loads(line))
        except ValueError:
            message = None
        if message is None:
            log.warning("unreadable line in %s skipped", data_dir / SPOOL_NAME)
            continue
        held.append(message)
    return held


def remove_held(data_dir: Path) -> None:
    """All held messages are stored: the spool file is not needed any more."""
    try:
        (data_dir / SPOOL_NAME).unlink(missing_ok=True)
    except OSError as exc:  # read again at the next start: each one found a duplicate
        log.warning("cannot remove %s: %s", data_dir / SPOOL_NAME, exc)


def make_reserve(data_dir: Path) -> None:
    """Set aside :data:`RESERVE_BYTES` for the spool file, unless already there."""
    path = data_dir / RESERVE_NAME
    try:
        if path.stat().st_size >= RESERVE_BYTES:
            return
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.pwrite(fd, bytes(RESERVE_BYTES), 0)  # a file system without fallocate
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        log.warning("no room for %s (%s): held messages may not survive a stop", path, exc)


def write_held(
    data_dir: Path, messages: Iterable[InboundMessage], *, final: bool = True
) -> list[InboundMessage]:
    """Add ``messages`` to the spool file, each whole and synced or not at all; the
    reserve is given up if the disk refuses. Appended, never rewritten: what the file
    holds already stays, whatever happens to these. Returns the messages that could not
    be written, each logged as lost when ``final`` (the stop's; else they are still held
    in memory, and the stop tries them again)."""
    pending = list(messages)
    path = data_dir / SPOOL_NAME
    # (while the daemon runs they are still held in memory, and the stop tries again)
    level = logging.ERROR if final else logging.WARNING
    reserve = data_dir / RESERVE_NAME

    def room(attempt: Callable[[], T]) -> T:
        """``attempt()``, once more after deleting the reserve if the disk was full (only
        at the stop: deleted while the daemon runs, the room it made went to the next
        messages' writes, and the stop had none left for the file)."""
        try:
            return attempt()
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not reserve.exists() or not final:
                raise
            reserve.unlink()
            log.warning("disk full: %s deleted to write the held messages", reserve)
            return attempt()

    try:
        fd = room(lambda: os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError as exc:
        log.log(level, "cannot write the held messages to %s: %s", path, exc)
    else:
        try:
            end = os.fstat(fd).st_size
            if end and os.pread(fd, 1, end - 1) != b"\n":
                torn = b"\n"  # a line a crash cut short: the next one starts on its own
            else:
                torn = b""
            while pending:
                data = torn + encode(pending[0])
                try:
                    room(functools.partial(_write_at, fd, data, end))
                    room(lambda: os.fsync(fd))
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, end)
                    log.log(level, "cannot write the held messages to %s: %s", path, exc)
                    break
                end += len(data)
                torn = b""
                pending.pop(0)
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):  # (the file is new at most once)
            dir_fd = os.open(data_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    if final:
        for message in pending:
            log_lost(message)
    return pending


def log_lost(message: InboundMessage) -> None:
    """The one trace left of a message that could not be kept: the journal's."""
    log.error(
        "held message lost at stop (not stored, not saved): %s message %s from %s: %r",
        message.channel,
        message.message_id,
        message.sender_id,
        message.text[:TEXT_LOGGED],
    )


def _write_at(fd: int, data: bytes, offset: int) -> None:
    """Write ``data`` whole at ``offset`` (a retry writes it again from there)."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        offset += done
        view = view[done:]
