"""A tab that stops reading while a long reply streams: the server holds a bounded
amount for it, then closes it (it reconnects and reloads), over a real socket."""

from __future__ import annotations

import asyncio
import base64
import os
import socket

import pytest

from bot.events import StreamEvent
from tests.channels.web.conftest import Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _silent_tab(stack: Stack, client, conversation_id: str) -> asyncio.StreamWriter:
    """A WebSocket opened by hand that never reads a frame (a frozen or suspended tab)."""
    cookie = next(c for c in client.cookie_jar if c.key == stack.channel.cookie_name)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = stack.url.split("//")[1].rstrip("/").split(":")
    sock.connect((host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /ws?conversation={conversation_id} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {stack.origin}\r\nCookie: {cookie.key}={cookie.value}\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    status = await reader.readline()
    assert b" 101 " in status, status
    return writer  # and never read again


async def test_a_tab_that_stops_reading_holds_a_bounded_queue(stack: Stack, client) -> None:
    rec = await stack.services.conversations.create(channel="web")
    writer = await _silent_tab(stack, client, rec.id)
    try:
        tabs = stack.channel.hub.tabs
        for _ in range(100):
            tab = next((c for c in tabs.clients.values() if c.conversation_id == rec.id), None)
            if tab is not None:
                break
            await asyncio.sleep(0.05)
        assert tab is not None
        # A long reply in big pieces, 300 x 64 K characters (19 M): all of it stayed
        # queued for the tab (300 frames, under the limit of 1000 frames).
        delta = "z" * 65536
        most = 0
        for _ in range(300):
            stack.channel.hub.feed.on_stream(StreamEvent(rec.id, 1, delta))
            await asyncio.sleep(0)
            most = max(most, sum(len(d) for d in list(tab.queue._queue) if d))
        assert most <= 9 * 2**20  # channels.web.tabs.QUEUE_CHARS (8 M) and a frame
        assert tab.id not in tabs.clients  # closed as too slow: it reloads on reconnect
        assert sum(len(d) for d in list(tab.queue._queue) if d) == 0
    finally:
        stack.channel.hub.feed.on_stream(StreamEvent(rec.id, 1, "", done=True))
        writer.close()
