"""The spool file (bot/spool_file.py): the messages a stop could not store, kept for the
next start, with the reserve deleted to make room on a full disk, and each message that
still cannot be written logged."""

from __future__ import annotations

import errno
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot import spool_file
from bot.events import Attachment
from bot.spool_file import RESERVE_NAME, SPOOL_NAME, make_reserve, read_held, write_held
from tests.support import inbound


def test_a_message_comes_back_as_it_was(tmp_path: Path) -> None:
    message = inbound(
        "the alarm code is 4711 \U0001f512",
        message_id="m-1",
        sender_aliases=("@hanan",),
        attachments=(Attachment(kind="photo", name="door.jpg", size=12, ref="f-1"),),
        thread_refs=("<a@x>", "<b@x>"),
        metadata={"topic": 7, "full": {"body": "hi"}},
        conversation_id="conv-1",
    )
    assert write_held(tmp_path, [message]) == []
    assert read_held(tmp_path) == [message]


def test_messages_are_added_to_what_the_file_holds(tmp_path: Path) -> None:
    first, second = inbound("one", message_id="a"), inbound("two", message_id="b")
    write_held(tmp_path, [first])
    with (tmp_path / SPOOL_NAME).open("ab") as fh:
        fh.write(b'{"channel": "telegram", "te')  # a line a crash cut short
    write_held(tmp_path, [second])
    assert read_held(tmp_path) == [first, second]


def _full_until_the_reserve_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if (tmp_path / RESERVE_NAME).exists():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(spool_file.os, "pwrite", pwrite)


def test_a_full_disk_gives_up_the_reserve_for_the_held_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_reserve(tmp_path)
    assert (tmp_path / RESERVE_NAME).stat().st_size == spool_file.RESERVE_BYTES
    _full_until_the_reserve_is_gone(tmp_path, monkeypatch)
    held = [inbound("one", message_id="a"), inbound("two", message_id="b")]
    assert write_held(tmp_path, held) == []
    assert not (tmp_path / RESERVE_NAME).exists()
    assert read_held(tmp_path) == held


def test_a_message_that_cannot_be_written_is_logged_with_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def pwrite(fd: int, data: Any, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool_file.os, "pwrite", pwrite)  # no reserve either
    message = inbound("please remember the alarm code 4711 " + "x" * 500, message_id="o-held")
    with caplog.at_level(logging.ERROR, logger="my_agent.services"):
        assert write_held(tmp_path, [message]) == [message]
    [lost] = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert "telegram" in lost and "o-held" in lost and "alarm code 4711" in lost
    assert len(lost) < 400  # the start of its text, not all of it
    assert read_held(tmp_path) == []


def test_a_received_time_without_an_offset_is_read_as_utc() -> None:
    # Regression (session 42): a spool line's ``received_at`` without an offset came
    # back naive, unlike every other message's (aware UTC); every stored time without
    # one is UTC (bot/moments.py). A malformed one still makes the line unreadable.
    record = json.loads(spool_file.encode(inbound("hi")))
    record["received_at"] = "2026-03-01T12:00:00"
    message = spool_file.decode(record)
    assert message is not None
    assert message.received_at == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert message.received_at.tzinfo is not None
    record["received_at"] = "2026-03-01T13:00:00+01:00"  # any zone encode met
    again = spool_file.decode(record)
    assert again is not None and again.received_at == message.received_at
    for bad in ("garbage", None, 1772366400):
        record["received_at"] = bad
        assert spool_file.decode(record) is None
