"""ImapSession.idle when the connection dies while IDLE is being started (regression:
aioimaplib's idle_start waited for the server's "+ idling" until the command timeout,
so new mail went unseen after a drop at that moment; seen once in CI)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from channels.email.imap import ImapSession
from channels.email.imap_wire import ImapError
from tests.channels.email.test_adapter import make_config


class _StuckIdleClient:
    """idle_start never sees the server's acknowledgement (the socket is gone)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def idle_start(self, timeout: float) -> Any:
        self.started.set()
        await asyncio.Event().wait()


def _session(timeout: float) -> ImapSession:
    config = make_config(Path("."), 1, 1, "INBOX")
    return ImapSession(config.channels.email.imap, "user", "pw", timeout)


async def test_connection_lost_while_idle_starts_raises_at_once() -> None:
    session = _session(timeout=30)
    client = _StuckIdleClient()
    session._client = client  # type: ignore[assignment]
    task = asyncio.ensure_future(session.idle(30, asyncio.Event()))
    await client.started.wait()
    session._on_lost(ConnectionResetError("proxy cut"))
    with pytest.raises(ImapError, match="connection lost while starting IDLE"):
        await asyncio.wait_for(task, 2)  # not the 30 s command timeout


async def test_unacknowledged_idle_gives_up_after_the_command_timeout() -> None:
    session = _session(timeout=0.2)
    session._client = _StuckIdleClient()  # type: ignore[assignment]
    with pytest.raises(ImapError, match="did not acknowledge IDLE"):
        await asyncio.wait_for(session.idle(30, asyncio.Event()), 2)


@pytest.mark.parametrize("then", ["hangs up", "says nothing"])
async def test_a_server_that_greets_and_then_fails_ends_the_connect(then: str) -> None:
    # Regression: a server (or proxy) that sent its greeting and then hung up, or went
    # silent, at aioimaplib's own CAPABILITY left connect() waiting for good (a lock
    # held under the cancelled wait): no reconnect, inbound mail stopped, and every
    # e-mail send waited for the first check of the inbox. It ends within the timeout.
    silent = asyncio.Event()

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"* OK [CAPABILITY IMAP4rev1 IDLE] ready\r\n")
        await writer.drain()
        await reader.readline()  # the client's CAPABILITY
        if then == "hangs up":
            writer.close()
        else:
            await silent.wait()

    listening = await asyncio.start_server(server, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    config = make_config(Path("."), port, 1, "INBOX").channels.email.imap
    session = ImapSession(config.model_copy(update={"security": "none"}), "user", "pw", 1.0)
    try:
        with pytest.raises(ImapError):  # NoGreeting for silence; not the 10 s guard
            await asyncio.wait_for(session.connect(), 10)
    finally:
        session.abort()
        silent.set()
        listening.close()
