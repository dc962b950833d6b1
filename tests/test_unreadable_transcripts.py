"""A transcript the disk will not give at start (permissions 000, an I/O error): the
daemon starts and serves every other conversation, names the file (status, /status,
the owner alert), leaves it untouched and writes nothing to it until a restart reads it.

Tests run as root here, where chmod 000 still reads: the refusal is injected."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from bot import healthcheck, router
from bot.channel import DeliveryError
from bot.config import AppConfig
from bot.daemon import start_serving
from bot.healthcheck import live_status
from bot.services import DatabaseOpenError, open_services
from bot.transcript import TranscriptStore, turn_line
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import inbound

OWNER = "424242"  # the owner's Telegram identity (tests/conftest.owner_identities)


def _refuse(monkeypatch: pytest.MonkeyPatch, conv_id: str) -> None:
    """Reading ``conv_id``'s transcript fails as a file with permissions 000 does."""
    real = TranscriptStore.read_from

    def read_from(self: TranscriptStore, cid: str, offset: int) -> Any:
        if cid == conv_id:
            raise PermissionError(errno.EACCES, "Permission denied", str(self.path(cid)))
        return real(self, cid, offset)

    monkeypatch.setattr(TranscriptStore, "read_from", read_from)


def _transcripts(config: AppConfig) -> list[str]:
    return sorted(p.name for p in config.conversations_dir.glob("conv-*.jsonl"))


async def _two_conversations(config: AppConfig) -> tuple[str, str]:
    """The owner's Telegram conversation (left with lines not yet indexed) and another."""
    services = await open_services(config)
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("the boiler again", sender=OWNER))
        await settle(services)
        web = await services.conversations.create("web")
        await services.conversations.append_turn(web.id, "user", "printer ink")
        (owner_conv,) = [
            c.id for c in await services.conversations.list() if c.channel == "telegram"
        ]
        # written to the transcript only, as a crash before its index update leaves it:
        # start-up has to read this file
        await services.store.append(owner_conv, [turn_line("user", "kumquat jam?", 2)])
    finally:
        await shutdown_services(services)
    return owner_conv, web.id


async def test_one_unreadable_transcript_does_not_stop_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = telegram_config(tmp_path)
    owner_conv, web_conv = await _two_conversations(config)
    path = config.conversations_dir / f"{owner_conv}.jsonl"
    before = path.read_bytes()
    files_before = _transcripts(config)
    _refuse(monkeypatch, owner_conv)
    monkeypatch.setattr(router, "STORAGE_RETRIES", (0.0,))

    services = await open_services(config)  # raised DatabaseOpenError (exit 74)
    try:
        assert services.recovery is not None
        assert list(services.recovery.unreadable) == [path.name]
        status = await live_status(services)
        assert f"transcript {path.name} cannot be read (Permission denied)" in status
        # every other conversation is served
        rec, _ = await services.conversations.append_turn(web_conv, "user", "and toner")
        assert rec.turn_count == 2
        # a message for the skipped conversation neither writes to its file (the index
        # lags it: the turn number would repeat, the unread lines be skipped) nor starts
        # another conversation for the owner (a fork): it is held, as storage trouble
        with pytest.raises(DeliveryError):
            await services.router.deliver(inbound("and the roof?", sender=OWNER))
        assert path.read_bytes() == before
        assert _transcripts(config) == files_before
    finally:
        await shutdown_services(services)
    assert path.read_bytes() == before  # never moved, cut or rewritten

    monkeypatch.undo()  # readable again (a chmod): picked up at the next start
    services = await open_services(config)
    try:
        assert services.recovery is not None and services.recovery.unreadable == {}
        fresh = await services.conversations.get(owner_conv)
        assert fresh is not None and fresh.turn_count == 2
        assert "kumquat" in str(await services.search.search("kumquat jam"))
    finally:
        await shutdown_services(services)


async def test_the_owner_is_told_which_file_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = telegram_config(tmp_path)
    owner_conv, _ = await _two_conversations(config)
    _refuse(monkeypatch, owner_conv)
    services = await open_services(config)
    try:
        telegram = RecordingChannel("telegram")
        services.channels["telegram"] = telegram
        await start_serving(services, [telegram])
        sent = await telegram.wait_for(
            lambda sent: any(f"{owner_conv}.jsonl" in m.text for m in sent)
        )
        alert = next(m for m in sent if f"{owner_conv}.jsonl" in m.text)
        assert alert.chat_id == OWNER and "cannot be read" in alert.text
    finally:
        await shutdown_services(services)


async def test_a_conversations_directory_that_cannot_be_listed_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Path.glob returned nothing for it: every conversation was taken out of the index."""
    config = telegram_config(tmp_path)
    await _two_conversations(config)
    real = os.scandir
    target = os.fspath(config.conversations_dir)

    def scandir(path: Any = ".") -> Any:
        if os.fspath(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", target)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(DatabaseOpenError):
        await open_services(config)
    monkeypatch.undo()
    services = await open_services(config)
    try:
        assert services.recovery is not None and services.recovery.removed == 0
        assert await services.index.count() == 2
    finally:
        await shutdown_services(services)


async def test_status_names_an_unreadable_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`my-agent status` exited 74 ("cannot read conversations.db") for one such file."""
    config = telegram_config(tmp_path)
    owner_conv, _ = await _two_conversations(config)
    services = await open_services(config)  # caught up: the index is consistent
    await shutdown_services(services)
    real = Path.read_bytes
    name = f"{owner_conv}.jsonl"

    def read_bytes(self: Path) -> bytes:
        if self.name == name:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    report = healthcheck.collect(config)
    assert report["exit_code"] == 1
    assert f"index: transcript {name} cannot be read (Permission denied)" in report["problems"]


async def test_a_held_message_for_it_names_the_file_not_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner was told "please free disk space" for a message held because its
    conversation's transcript could not be read: the wrong remedy."""
    config = telegram_config(tmp_path)
    owner_conv, _ = await _two_conversations(config)
    _refuse(monkeypatch, owner_conv)
    monkeypatch.setattr(router, "STORAGE_RETRIES", (0.0,))
    services = await open_services(config)
    alerts: list[str] = []

    async def alert_owner(text: str) -> None:
        alerts.append(text)

    monkeypatch.setattr(services, "alert_owner", alert_owner)
    try:
        for text in ("and the roof?", "and the gutters?"):
            with pytest.raises(DeliveryError):
                await services.router.deliver(inbound(text, sender=OWNER))
        assert len(alerts) == 1, alerts  # once per file
        assert f"{owner_conv}.jsonl" in alerts[0] and "readable" in alerts[0]
        assert "free disk space" not in alerts[0]
    finally:
        await shutdown_services(services)
