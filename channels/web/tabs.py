"""The open dashboard tabs and how frames reach them.

Each tab (:class:`Client`) has a bounded send queue drained by its own writer task, so
one slow tab never delays a frame to the others; a tab that falls too far behind is
closed (it reconnects and reloads), and so is one whose login session ended (logged
out, or expired while the tab stayed open). :class:`Tabs` holds them and sends: to one
tab, to every tab, or to the tabs viewing a conversation. What is said over the
WebSocket is :mod:`channels.web.ws`; what the core announces, :mod:`channels.web.feed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from bot.tasks import spawn

log = logging.getLogger("my_agent.web.ws")

QUEUE_LIMIT = 1000  # frames queued for one tab, at most
# Characters queued for one tab, at most: the frame count alone let a tab that stopped
# reading hold 1000 frames of whatever size (a 64 KB delta each, 64 MB). A page of the
# chat is under 1 MB (channels.web.pages), so a reading tab never comes near it.
QUEUE_CHARS = 8 * 1024 * 1024


class Client:
    """One open dashboard tab."""

    def __init__(self, ws: web.WebSocketResponse, session: str | None = None) -> None:
        self.id = f"ws-{uuid.uuid4().hex[:12]}"
        self.ws = ws
        self.session = session  # the login session it was opened with (closed on logout)
        self.conversation_id: str | None = None
        self.pending_model: str | None = None  # chosen before the first message
        self.pending_title: str | None = None  # "/rename" typed before the first message
        # the conversation the tab showed before its new chat: named to the model in the
        # conversation the chat's first message starts (bot/previous_conversation.py)
        self.left: str | None = None
        # The conversation being read for this tab, and the updates of it broadcast while
        # it was read: sent again after its page, which may have been read before them.
        self.loading: tuple[str, list[dict[str, Any]]] | None = None
        self.queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_LIMIT)
        self.queued = 0  # characters in the queue
        self.writer: asyncio.Task[None] | None = None

    def push(self, data: str) -> bool:
        """Queue a frame; False when the client is hopelessly behind (too many frames or
        characters queued: one frame alone is always taken)."""
        if self.queued and self.queued + len(data) > QUEUE_CHARS:
            return False
        try:
            self.queue.put_nowait(data)
        except asyncio.QueueFull:
            return False
        self.queued += len(data)
        return True

    def drop(self) -> None:
        """Forget the queued frames and end the writer (a tab closed for being too slow:
        its closing handshake can take a while, and its frames would be held meanwhile)."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queued = 0
        self.queue.put_nowait(None)

    async def write_loop(self) -> None:
        """Send the queued frames in order until the queue's end marker or a closed socket."""
        while True:
            data = await self.queue.get()
            if data is None or self.ws.closed:
                return
            self.queued -= len(data)
            try:
                await self.ws.send_str(data)
            except (ConnectionError, RuntimeError):
                return


class Tabs:
    """The connected tabs; ``session_valid`` says whether a login session still holds."""

    def __init__(self, session_valid: Callable[[str], bool]) -> None:
        self.session_valid = session_valid
        self.clients: dict[str, Client] = {}

    def open(self, ws: web.WebSocketResponse, session: str | None) -> Client:
        """Register a new tab and start its writer."""
        client = Client(ws, session)
        client.writer = spawn(client.write_loop(), name=f"web-writer-{client.id}")
        self.clients[client.id] = client
        log.debug("client %s connected (%d open)", client.id, len(self.clients))
        return client

    def closed(self, client: Client) -> None:
        """Forget a tab whose socket ended, and stop its writer."""
        self.clients.pop(client.id, None)
        if client.writer is not None:
            client.writer.cancel()
        log.debug("client %s gone (%d open)", client.id, len(self.clients))

    def get(self, client_id: str) -> Client | None:
        return self.clients.get(client_id)

    async def close_all(self) -> None:
        for client in list(self.clients.values()):
            with contextlib.suppress(Exception):
                await client.ws.close(code=1001, message=b"server shutdown")
            if client.writer is not None:
                client.writer.cancel()
        self.clients.clear()

    def close_session(self, session: str | None) -> None:
        """Close the tabs opened with ``session`` (logged out): a revoked session must
        not go on receiving every new turn. In the background: the logout need not wait
        for each tab's closing handshake."""
        for client in [c for c in self.clients.values() if session and c.session == session]:
            self.clients.pop(client.id, None)
            spawn(client.ws.close(code=4401, message=b"logged out"), name="web-close-logout")

    def send(self, client: Client, payload: dict[str, Any]) -> None:
        self._push(client, json.dumps(payload, ensure_ascii=False))

    def _push(self, client: Client, data: str) -> None:
        if client.session is not None and not self.session_valid(client.session):
            # Its login expired (session_ttl_hours) while the tab stayed open: it gets
            # nothing more, as after Log out, and the page asks for the login again.
            self.clients.pop(client.id, None)
            spawn(client.ws.close(code=4401, message=b"session expired"), name="web-close-ttl")
            return
        if not client.push(data):
            log.warning("web client %s too slow, disconnecting", client.id)
            self.clients.pop(client.id, None)
            client.drop()
            spawn(client.ws.close(code=1013, message=b"too slow"), name="web-close-slow")

    def broadcast(self, payload: dict[str, Any], clients: Iterable[Client] | None = None) -> int:
        """Send one frame to ``clients`` (all by default); returns how many got it."""
        data = json.dumps(payload, ensure_ascii=False)
        targets = list(self.clients.values() if clients is None else clients)
        for client in targets:
            self._push(client, data)
        return len(targets)

    def broadcast_update(self, conversation_id: str, payload: dict[str, Any]) -> None:
        """Broadcast an update of a conversation, kept too for the tabs reading it."""
        self.broadcast(payload)
        for client in self.clients.values():
            if client.loading is not None and client.loading[0] == conversation_id:
                client.loading[1].append(payload)

    def viewing(self, conversation_id: str) -> list[Client]:
        return [c for c in self.clients.values() if c.conversation_id == conversation_id]
