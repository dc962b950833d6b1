"""The loopback channel's own record of what it sent (``loopback-sent.jsonl``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.config import AppConfig
from bot.events import OutboundMessage
from bot.services import Services, open_services
from channels import loopback
from tests.conftest import attach_channel, make_config, settle, shutdown_services
from tests.sqlite_driver import sqlite3
from tests.support import ScriptedBrain, inbound


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[AppConfig, Services, Any]]:
    """The core with the loopback channel started on it (the owner is "owner")."""
    config = make_config(
        tmp_path,
        owner={"identities": {"loopback": ["owner"]}},
        channels={"loopback": {"enabled": True}},
    )
    services = await open_services(config, brain=ScriptedBrain())
    try:
        channel = loopback.LoopbackChannel(config, services)
        await attach_channel(services, channel)  # type: ignore[arg-type]
        yield config, services, channel
    finally:
        await shutdown_services(services)


def test_a_short_write_leaves_the_record_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: on a full disk a short os.write counted as sent; the torn record
    # swallowed the next one ({"ref": "loo{"ref": ...) and both sends were lost.
    path = tmp_path / "sent.jsonl"
    loopback._append_durably(str(path), b'{"ref": "first"}\n')
    real_write = os.write
    calls = {"n": 0}

    def short_then_full(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[:5]))  # part of it, as a full disk does
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loopback.os, "write", short_then_full)
    with pytest.raises(OSError, match="No space"):
        loopback._append_durably(str(path), b'{"ref": "second"}\n')
    monkeypatch.setattr(loopback.os, "write", real_write)
    assert path.read_bytes() == b'{"ref": "first"}\n'  # no torn record
    loopback._append_durably(str(path), b'{"ref": "second"}\n')
    assert path.read_bytes().splitlines() == [b'{"ref": "first"}', b'{"ref": "second"}']


async def test_replies_are_sent_after_state_db_was_lost(tmp_path: Path) -> None:
    # Regression: the channel skipped any message whose outbox id it had delivered
    # before (its crash-resend guard). With state.db deleted or replaced, the outbox
    # numbers from 1 again, so every new reply and command answer was dropped in
    # silence ("outbox 1 was delivered before a crash: not sent again").
    async def exchange(text: str, message_id: str) -> AppConfig:
        async with serving(tmp_path) as (config, services, _channel):
            await services.router.deliver(
                inbound(
                    text, channel="loopback", sender="owner", chat="owner", message_id=message_id
                )
            )
            await settle(services)
        return config

    config = await exchange("first, before the loss", "m-1")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.data_dir / 'state.db'}{suffix}").unlink(missing_ok=True)
    await exchange("second, after it", "m-2")
    sent = loopback.read_json_lines(config.data_dir / "loopback-sent.jsonl")
    assert [(s["inReplyTo"], s["text"]) for s in sent] == [
        ("m-1", "re: first, before the loss"),
        ("m-2", "re: second, after it"),
    ]
    assert [s["outbox"] for s in sent] == [1, 1]  # the same number, a different message


async def test_a_message_held_on_a_full_disk_is_accepted_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the ingress answered 503 "retry" for a message the spool already held;
    # a client that retried without an id got a new one and the message was stored twice.
    monkeypatch.setattr("bot.router.STORAGE_RETRIES", ())
    async with serving(tmp_path) as (config, services, channel):
        db = services.index.db
        real_run = db.run
        full = True

        async def refusing_run(fn: Any, **kwargs: Any) -> Any:
            if full and kwargs.get("write", True):
                exc = sqlite3.OperationalError("database or disk is full")
                exc.sqlite_errorcode = 13  # SQLITE_FULL
                raise exc
            return await real_run(fn, **kwargs)

        monkeypatch.setattr(db, "run", refusing_run)
        url = f"http://127.0.0.1:{channel.port}/inbound"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json={"sender": "owner", "text": "hold me"}) as resp:
                status, body = resp.status, await resp.json()
            assert status == 202, body  # accepted: do not send it again
            assert body["ok"] is True and body["held"] is True and body["message_id"]
            assert services.health()["spooled"] == 1
            full = False
            async with asyncio.timeout(10):
                while services.health()["spooled"]:
                    await asyncio.sleep(0.02)
            await settle(services)
            # the daemon stopping: not taken, send it again (with the id it was given)
            services.router.accepting = False
            async with session.post(url, json={"sender": "owner", "text": "late"}) as resp:
                status, body = resp.status, await resp.json()
            assert status == 503 and body["ok"] is False and body["message_id"]
        sent = loopback.read_json_lines(config.data_dir / "loopback-sent.jsonl")
        assert [s["text"] for s in sent] == ["re: hold me"]  # stored and answered once


async def test_only_a_local_script_is_heard_never_a_web_page(tmp_path: Path) -> None:
    # Regression: any page the owner opened could POST a form (text/plain, read as JSON)
    # to 127.0.0.1 as the owner, and a page whose name was rebound to 127.0.0.1 could
    # read everything the daemon sent (GET /sent).
    async with serving(tmp_path) as (_config, services, channel):
        base = f"http://127.0.0.1:{channel.port}"
        message = {"sender": "owner", "text": "/new"}
        form = '{"sender": "owner", "text": "forged"}'
        async with aiohttp.ClientSession() as session:
            refused: list[tuple[str, str, dict[str, Any]]] = [
                ("POST", "/inbound", {"data": form, "headers": {"Content-Type": "text/plain"}}),
                ("POST", "/inbound", {"json": message, "headers": {"Origin": "https://x.example"}}),
                ("POST", "/inbound", {"json": message, "headers": {"Host": "evil.example"}}),
                ("GET", "/sent", {"headers": {"Host": f"evil.example:{channel.port}"}}),
                ("GET", "/sent", {"headers": {"Origin": "null"}}),
            ]
            for method, path, kwargs in refused:
                async with session.request(method, f"{base}{path}", **kwargs) as resp:
                    assert resp.status == 403, await resp.text()
                    assert (await resp.json())["ok"] is False
            await settle(services)
            assert await services.conversations.list() == []  # nothing was taken
            async with session.post(f"{base}/inbound", json=message) as resp:
                assert resp.status == 200, await resp.text()
            for host in ("localhost", f"localhost:{channel.port}"):
                async with session.get(f"{base}/sent", headers={"Host": host}) as resp:
                    assert resp.status == 200, await resp.text()


async def test_a_body_nested_past_the_json_decoders_depth_is_a_400(tmp_path: Path) -> None:
    # Regression: json's RecursionError was not among the errors caught: a 500 and a
    # traceback in the log, where every other unreadable body gets its 400.
    async with serving(tmp_path) as (_config, _services, channel):
        base = f"http://127.0.0.1:{channel.port}"
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{base}/inbound", data="[" * 6000, headers=headers) as r:
                assert r.status == 400, await r.text()
                assert (await r.json())["error"] == "need JSON with sender and text"


def _reply(outbox: int, text: str = "") -> OutboundMessage:
    text = text or f"reply {outbox} " + "x" * 500
    return OutboundMessage(channel="loopback", chat_id="owner", text=text, outbox_id=outbox)


async def test_a_resend_is_skipped_and_only_the_latest_sends_are_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 41): every message ever sent was kept whole (its outbox id and
    # its whole text), and every line of loopback-sent.jsonl at start, for the life of
    # the daemon. A resend after a crash is of the latest rows only.
    monkeypatch.setattr(loopback, "DELIVERED", 3, raising=False)
    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    channel = loopback.LoopbackChannel(config)
    refs = {n: (await channel.send(_reply(n))).message_ref for n in range(1, 7)}
    assert len(channel._delivered) == 3
    # the same row sent again (a crash before its "sent" mark): not sent twice
    assert (await channel.send(_reply(6))).message_ref == refs[6]
    # after a restart too, from the file's latest lines
    again = loopback.LoopbackChannel(config)
    await again.start(None)  # type: ignore[arg-type]
    try:
        assert len(again._delivered) == 3
        assert (await again.send(_reply(5))).message_ref == refs[5]
        # the same id saying something else (state.db lost) is a new message: sent
        assert (await again.send(_reply(6, "another reply"))).message_ref != refs[6]
    finally:
        await again.stop()
    sent = loopback.read_json_lines(config.data_dir / "loopback-sent.jsonl")
    assert [s["outbox"] for s in sent] == [1, 2, 3, 4, 5, 6, 6]


async def test_the_sent_record_is_cut_to_its_latest_lines_past_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 42): loopback-sent.jsonl grew for the life of the data
    # directory, and GET /sent and every start read it whole. Past sent_max_bytes it is
    # cut to its latest lines (at least the ones a restart reads to skip a resend).
    monkeypatch.setattr(loopback, "DELIVERED", 2, raising=False)
    monkeypatch.setattr(loopback, "KEEP_AT_LEAST", 2, raising=False)
    config = make_config(tmp_path, channels={"loopback": {"sent_max_bytes": 4000}})
    config.data_dir.mkdir(parents=True, exist_ok=True)
    path = config.data_dir / "loopback-sent.jsonl"
    channel = loopback.LoopbackChannel(config)
    refs = {n: (await channel.send(_reply(n))).message_ref for n in range(1, 41)}
    assert path.stat().st_size <= 4000
    sent = loopback.read_json_lines(path)
    outboxes = [s["outbox"] for s in sent]
    assert outboxes == list(range(41 - len(sent), 41))  # the latest, whole and in order
    assert len(sent) >= 2
    assert not path.with_name(f".{path.name}.tmp").exists()
    # a restart still knows the latest sends: a resend of one is skipped
    again = loopback.LoopbackChannel(config)
    await again.start(None)  # type: ignore[arg-type]
    try:
        assert (await again.send(_reply(40))).message_ref == refs[40]
    finally:
        await again.stop()


def test_a_cut_keeps_the_latest_lines_however_long(tmp_path: Path) -> None:
    path = tmp_path / "sent.jsonl"
    path.write_bytes(b"".join(b'{"n": %d, "x": "%s"}\n' % (n, b"y" * 100) for n in range(10)))
    assert loopback.cut_to_latest(path, keep_bytes=10, keep_lines=3) == 3
    assert [s["n"] for s in loopback.read_json_lines(path)] == [7, 8, 9]
    assert loopback.cut_to_latest(path, keep_bytes=10_000, keep_lines=1) == 3


async def test_sent_max_bytes_zero_never_cuts(tmp_path: Path) -> None:
    # The soak bench counts every reply of its run from the file: it sets 0.
    config = make_config(tmp_path, channels={"loopback": {"sent_max_bytes": 0}})
    config.data_dir.mkdir(parents=True, exist_ok=True)
    channel = loopback.LoopbackChannel(config)
    for n in range(1, 21):
        await channel.send(_reply(n))
    sent = loopback.read_json_lines(config.data_dir / "loopback-sent.jsonl")
    assert [s["outbox"] for s in sent] == list(range(1, 21))
