"""A corrupt conversations.db at the daemon's start is set aside and rebuilt from the
transcripts (bot/index_rescue.py); a one-shot command still refuses it, naming the file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bot.config import AppConfig
from bot.index_rescue import PAGES_DAMAGED, PAGES_OK, check_pages, is_corruption
from bot.journal_files import lock_journal
from bot.services import DatabaseOpenError, open_services
from tests.conftest import make_config, settle, shutdown_services
from tests.ops.daemon import DaemonProcess
from tests.ops.loopback import base_config, fake_telegram
from tests.sqlite_driver import sqlite3
from tests.support import ScriptedBrain, garble_page, inbound

MESSAGES = 12


async def _store(config: AppConfig) -> None:
    services = await open_services(config, brain=ScriptedBrain())
    try:
        for i in range(MESSAGES):
            text = f"note {i}: the boiler pressure is low " + "x" * 300
            await services.router.deliver(
                inbound(text, channel="web", sender="owner", chat="dashboard", message_id=f"m{i}")
            )
        await settle(services)
    finally:
        await shutdown_services(services)


def _damage(path: Path, how: str) -> None:
    if how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
    else:  # garbage over the header
        with open(path, "r+b") as fh:
            fh.write(b"\xa5" * 100)


async def _turns(config: AppConfig) -> int:
    services = await open_services(config, brain=ScriptedBrain())
    try:
        row = await services.index_db.fetchone("SELECT count(*) FROM turns")
        assert row is not None
        return int(row[0])
    finally:
        await shutdown_services(services)


@pytest.mark.parametrize("how", ["truncated", "garbage"])
async def test_the_daemon_rebuilds_a_corrupt_index_from_the_transcripts(
    tmp_path: Path, how: str
) -> None:
    """Regression: the daemon exited 74 on a corrupt index, and systemd restarted it
    into the same error every 5 s; nothing could be received until someone moved it."""
    config = make_config(tmp_path)
    await _store(config)
    turns = await _turns(config)
    assert turns == 2 * MESSAGES
    _damage(config.index_path, how)

    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    try:
        assert services.recovery is not None and services.recovery.registered == 1
        row = await services.index_db.fetchone("SELECT count(*) FROM turns")
        assert row is not None and row[0] == turns
        page = await services.search.search("boiler pressure", limit=50)
        assert page.to_dict()["results"]
        # a message after the rebuild is a new one; an old one is still known
        await services.router.deliver(
            inbound("after", channel="web", sender="owner", chat="dashboard", message_id="m0")
        )
        await settle(services)
        row = await services.index_db.fetchone("SELECT count(*) FROM turns")
        assert row is not None and row[0] == turns
    finally:
        await shutdown_services(services)
    kept = list(config.index_path.parent.glob("conversations.db.corrupt-*"))
    assert [p.name.endswith("-wal") for p in kept].count(False) == 1, kept


async def test_the_page_check_reports_damage_no_start_reads(tmp_path: Path) -> None:
    """Regression (session 27): a page neither the open nor recovery reads (here the
    conversations' id index) was found by the first search or write that reached it,
    maybe weeks later. :func:`check_pages` reports it as damage met while running: the
    index marked for the next start, which sets it aside and rebuilds it."""
    config = make_config(tmp_path)
    await _store(config)
    garble_page(config.index_path, "sqlite_autoindex_conversations_1")

    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    try:
        assert (await check_pages(services.index_db)).startswith(PAGES_DAMAGED)
        problem = services.index_damage()
        assert problem is not None and "quick check" in problem, problem
        marker = config.index_path.with_name("conversations.db.damaged")
        assert "quick check" in marker.read_text(encoding="utf-8")
    finally:
        await shutdown_services(services)
    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    try:
        assert await check_pages(services.index_db) == PAGES_OK
        assert services.index_damage() is None
        row = await services.index_db.fetchone("SELECT count(*) FROM turns")
        assert row is not None and row[0] == 2 * MESSAGES
    finally:
        await shutdown_services(services)
    assert len(list(config.index_path.parent.glob("conversations.db.corrupt-*"))) >= 1


async def test_the_daemon_tells_the_owner_of_a_damaged_page_after_its_start(
    tmp_path: Path, telegram_fake: Any
) -> None:
    """The real daemon runs the page check once its channels are up: the owner's alert
    has a channel to go on (run during the start, it was only logged)."""
    owner = 1001
    config = make_config(tmp_path)
    await _store(config)
    garble_page(config.index_path, "sqlite_autoindex_conversations_1")
    daemon = DaemonProcess(
        tmp_path,
        base_config(
            tmp_path,
            channels=fake_telegram(telegram_fake.base_url),
            owner={"identities": {"telegram": [str(owner)]}},
        ),
    )
    assert daemon.data_dir == config.data_dir
    try:
        await daemon.start()
        await telegram_fake.wait_sent(owner, 1, timeout=60)
        (alert,) = telegram_fake.sent_to(owner)
        assert alert["text"].startswith("Index problem: conversations.db is damaged (quick check")
        assert "Traceback" not in daemon.log()
        assert await daemon.terminate() == 0
    finally:
        await daemon.close()
    assert config.index_path.with_name("conversations.db.damaged").exists()


async def test_a_command_still_refuses_a_corrupt_index(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    await _store(config)
    _damage(config.index_path, "garbage")
    with pytest.raises(DatabaseOpenError, match=r"conversations\.db"):
        await open_services(config, brain=ScriptedBrain())
    assert not list(config.index_path.parent.glob("*.corrupt-*"))


async def test_a_corrupt_index_held_by_another_daemon_is_left_alone(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    await _store(config)
    _damage(config.index_path, "garbage")
    lock = lock_journal(config.conversations_dir)  # another daemon runs on it
    try:
        with pytest.raises(DatabaseOpenError, match=r"conversations\.db"):
            await open_services(config, brain=ScriptedBrain(), exclusive=True)
    finally:
        os.close(lock)
    assert config.index_path.exists()
    assert not list(config.index_path.parent.glob("*.corrupt-*"))


async def test_damage_found_by_recovery_is_rebuilt_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged page the open never read (only recovery's reads reach it)."""
    config = make_config(tmp_path)
    await _store(config)
    from bot import services as services_module

    real = services_module.recover
    calls: list[int] = []

    def damaged_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            exc = sqlite3.DatabaseError("database disk image is malformed")
            exc.sqlite_errorcode = 11  # type: ignore[attr-defined]
            raise exc
        return real(*args, **kwargs)

    monkeypatch.setattr(services_module, "recover", damaged_once)
    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    try:
        assert len(calls) == 2
        assert services.recovery is not None and services.recovery.registered == 1
        row = await services.index_db.fetchone("SELECT count(*) FROM turns")
        assert row is not None and row[0] == 2 * MESSAGES
    finally:
        await shutdown_services(services)


async def test_damage_a_commands_recovery_meets_names_the_file_and_the_remedy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a page only recovery reads, met by `my-agent search`, exited 74 with
    # "recovery from the transcripts failed: database disk image is malformed": no file
    # named, no remedy (the damage a command's own query meets names both).
    config = make_config(tmp_path)
    await _store(config)
    from bot import services as services_module

    def damaged(*args: Any, **kwargs: Any) -> Any:
        exc = sqlite3.DatabaseError("database disk image is malformed")
        exc.sqlite_errorcode = 11  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(services_module, "recover", damaged)
    with pytest.raises(DatabaseOpenError) as caught:
        await open_services(config, brain=ScriptedBrain())
    assert f"{config.index_path} is damaged" in str(caught.value)
    assert "my-agent reindex" in str(caught.value)
    assert not list(config.index_path.parent.glob("*.corrupt-*"))  # left for the remedy


def test_is_corruption_reads_sqlites_code_through_the_cause_chain() -> None:
    notadb = sqlite3.DatabaseError("file is not a database")
    notadb.sqlite_errorcode = 26  # type: ignore[attr-defined]
    vtab = sqlite3.DatabaseError("database disk image is malformed")
    vtab.sqlite_errorcode = 267  # type: ignore[attr-defined]  # SQLITE_CORRUPT_VTAB
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = 5  # type: ignore[attr-defined]
    assert is_corruption(notadb) and is_corruption(vtab)
    assert not is_corruption(busy) and not is_corruption(OSError("disk full"))
    wrapped = DatabaseOpenError("recovery failed")
    wrapped.__cause__ = vtab
    assert is_corruption(wrapped)


# -- state.db: never silently started over ---------------------------------------------
async def test_an_empty_state_db_next_to_conversations_stops_the_start(tmp_path: Path) -> None:
    """Regression: SQLite took a state.db that lost its content (0 bytes) for a new
    database and the daemon started over without a word: unsent replies dropped, channel
    cursors gone (e-mail resynchronised as on a first run)."""
    config = make_config(tmp_path)
    await _store(config)
    os.truncate(config.state_path, 0)
    Path(f"{config.state_path}-wal").unlink(missing_ok=True)
    try:
        services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    except DatabaseOpenError as exc:
        assert "state.db is empty" in str(exc) and "backup" in str(exc)
    else:
        await shutdown_services(services)
        pytest.fail("an empty state.db was started over")
    assert config.state_path.stat().st_size == 0  # left as found, for a restore


async def test_an_empty_state_db_with_its_wal_opens(tmp_path: Path) -> None:
    """A state.db whose pages are all still in its WAL (never checkpointed) is fine."""
    config = make_config(tmp_path)
    await _store(config)
    Path(f"{config.state_path}-wal").write_bytes(b"\0" * 32)  # a WAL, unreadable or not
    os.truncate(config.state_path, 0)
    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    await shutdown_services(services)


async def test_an_empty_state_db_on_a_first_start_opens(tmp_path: Path) -> None:
    """A crash during the very first start: nothing stored yet, nothing to lose."""
    config = make_config(tmp_path)
    config.state_path.parent.mkdir(parents=True, exist_ok=True)
    config.state_path.write_bytes(b"")
    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    await shutdown_services(services)


async def test_a_missing_state_db_next_to_conversations_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Moved aside by hand (what the error says to do): a new one, with an error logged."""
    config = make_config(tmp_path)
    await _store(config)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.state_path}{suffix}").unlink(missing_ok=True)
    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)
    await shutdown_services(services)
    assert any("state.db is missing" in r.getMessage() for r in caplog.records)


async def test_a_start_cancelled_in_recovery_stops_it_and_gives_the_store_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 42's QA): Ctrl-C during a command's catch-up (`reindex`'s row
    # rebuild) cancelled the open, whose cleanup ran on an Exception only: recovery went
    # on, its connections' threads and the store stayed open, the process never exited.
    import asyncio
    import threading
    import time

    from bot import services as services_module

    config = make_config(tmp_path)
    await _store(config)
    real = services_module.recover
    started, asked_to_stop = threading.Event(), threading.Event()

    def waits_for_a_stop(*args: Any, **kwargs: Any) -> Any:
        started.set()
        stopping = args[4]
        deadline = time.monotonic() + 10
        while not stopping() and time.monotonic() < deadline:
            time.sleep(0.01)
        if stopping():
            asked_to_stop.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(services_module, "recover", waits_for_a_stop)
    opening = asyncio.create_task(open_services(config, brain=ScriptedBrain(), exclusive=True))
    assert await asyncio.to_thread(started.wait, 10)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert await asyncio.to_thread(asked_to_stop.wait, 5)
    monkeypatch.setattr(services_module, "recover", real)
    services = await open_services(config, brain=ScriptedBrain(), exclusive=True)  # free
    await shutdown_services(services)
