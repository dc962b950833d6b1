"""The data directory the services open on: whether it takes writes, what a full one means.

The daemon and every command that writes check it first (:func:`check_data_dir`: its
folders made, a probe written): a failure is a :class:`DataDirError` (exit 73) saying
why, a read-only file system and a full one (:class:`DataDirFull`) named as such. On a
full disk a command that only reads opens the store as it is instead
(``open_services(read_only=True)``, :func:`opened_read_only`), and says so when the
index must be written before it can be read (:func:`full_disk_write`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Awaitable
from typing import TypeVar

from bot.config import AppConfig
from bot.index_rescue import is_storage_refusal

T = TypeVar("T")


class DataDirError(Exception):
    """The data directory cannot be created or written (exit 73)."""


class DataDirFull(DataDirError):
    """The data directory's file system is full (exit 73 where a write is needed: a
    reading command opens the store read-only instead, ``open_services(read_only=True)``)."""


def check_data_dir(config: AppConfig) -> None:
    """Make the data directory's folders and prove it takes writes, or raise
    :class:`DataDirError` saying why (a read-only file system named as such)."""
    try:
        config.conversations_dir.mkdir(parents=True, exist_ok=True)
        config.external_dir.mkdir(parents=True, exist_ok=True)
        probe = config.data_dir / ".write-test"
        try:
            probe.write_bytes(b"ok")
        finally:
            # On a full disk the file is made and its two bytes are refused: it stayed
            # behind, empty, in the owner's data directory after every refused start.
            probe.unlink(missing_ok=True)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DataDirFull(
                f"the file system of data directory {config.data_dir} is full ({exc}): "
                "free space and try again"
            ) from exc
        if exc.errno == errno.EROFS and not config.data_dir.exists():
            # a first start in a read-only place: there is nothing to copy
            raise DataDirError(
                f"data directory {config.data_dir} cannot be created: the file system is "
                "read-only; run my-agent from a writable directory, or set data_dir "
                "(MY_AGENT_DATA_DIR) to one"
            ) from exc
        if exc.errno == errno.EROFS:
            # a snapshot or a backup mounted read-only: every command writes the index
            # (it catches up with the transcripts), and "not usable" said no more
            raise DataDirError(
                f"data directory {config.data_dir} is on a read-only file system: my-agent "
                "writes its index even to search it; copy the directory somewhere writable "
                "and point --config at the copy"
            ) from exc
        raise DataDirError(f"data directory {config.data_dir} is not usable: {exc}") from exc
    try:
        os.chmod(config.data_dir, 0o700)
    except OSError:
        pass


async def opened_read_only(config: AppConfig, opening: Awaitable[T]) -> T:
    """``opening`` (the services opened read-only, on a full disk, for a command that
    only reads), a write it would need raised as :class:`DataDirFull` saying so: before
    session 42 ``search`` and ``conversations`` exited 73 there even with nothing to
    write (the write probe of :func:`check_data_dir` refused them)."""
    try:
        return await opening
    except Exception as exc:
        if not is_storage_refusal(exc):
            raise
        raise DataDirFull(full_disk_write(config, exc)) from exc


def full_disk_write(config: AppConfig, exc: BaseException) -> str:
    """What a reading command says when, on a full disk, it would have to write: the
    index catching up with the transcripts (or a migration, a journal to replay)."""
    return (
        f"the file system of data directory {config.data_dir} is full, and the index must "
        "be written before it can be read (it is behind the transcripts, or this my-agent "
        f"has to update it: {exc}): free space and try again"
    )
