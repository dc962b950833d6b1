"""The dashboard's WebSocket protocol (seed 000 "WebSocket Protocol Messages").

Client → server: ``new_conversation``, ``switch_conversation`` {conversationId,
aroundTurn?}, ``rename_conversation`` {title, conversationId?}, ``send_message`` {text,
conversationId?}, ``stop_generation``, ``set_model`` {model}, ``load_more``
{conversationId, olderThan}, ``load_newer`` {conversationId, newerThan}, ``ping``.

Server → client: ``conversation_loaded`` {conversation, turns, hasMore, olderThan,
hasNewer, newerThan, models},
``conversation_list`` {conversations, activeMinutes, hasMore, pendingEscalations (the
first one a tab gets on connecting)}, ``conversation_list_more``
{conversations, hasMore} (after ``list_more`` {offset}), ``conversation_created``,
``conversation_renamed``, ``conversation_updated`` {conversationId, turn?, event?,
conversation?}, ``history`` {conversationId, turns, hasMore, olderThan}, ``newer`` {conversationId,
turns, hasNewer, newerThan}, ``stream``
{conversationId, turnNumber, delta, done}, ``reply``, ``notice``, ``external_updated``,
``error``, ``pong``.

This module is the conversation with one tab: connecting, and answering what it sends.
The tabs and their send queues are :mod:`channels.web.tabs`; what the core announces to
them (streams, replies, new turns, renames), :mod:`channels.web.feed`; a message on its
way to the core, :mod:`channels.web.sending`; a title or model changed,
:mod:`channels.web.edits`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from bot.command_status import missing_model_ids
from channels.web.edits import rename_conversation, set_model
from channels.web.feed import Feed
from channels.web.paging import LAST_POSITION, PAGE_SIZE, load_newer, load_older
from channels.web.sending import SentRefs, send_message
from channels.web.tabs import Client, Tabs
from channels.web.titles import derived_titles
from channels.web.views import conversation_meta

if TYPE_CHECKING:
    from channels.web.server import WebChannel

log = logging.getLogger("my_agent.web.ws")

LIST_SIZE = 200


class WsHub:
    """The protocol: each tab's connection and the handlers of what it sends."""

    def __init__(self, channel: WebChannel) -> None:
        self.channel = channel
        self.tabs = Tabs(channel.sessions.valid)
        self.sent_refs = SentRefs()  # messages a reconnecting tab may send again
        self.feed = Feed(self.tabs, follow=self.load, waiting=self._waiting)

    @property
    def services(self) -> Any:
        return self.channel.services

    def _waiting(self, conversation_id: str) -> str | None:
        """Why the reply owed in the conversation waits (the model is down), if it does."""
        waiting: dict[str, str] = self.services.replies.generation.waiting
        return waiting.get(conversation_id)

    # -- connection -------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        # No permessage-deflate: compressing every broadcast once per tab costs CPU for
        # nothing on a local dashboard.
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=1 << 20, compress=False)
        await ws.prepare(request)
        client = self.tabs.open(ws, self.channel.session_id(request))
        try:
            await self._on_connect(client, request.query.get("conversation"))
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                if not self.channel.sessions.valid(client.session):
                    # Expired (or logged out) while the socket stayed open: checking only
                    # the frames sent to the tab still let this one deliver a message.
                    log.info("web: closing a socket whose session ended (%s)", client.id)
                    await ws.close(code=4401, message=b"session expired")
                    break
                try:
                    data = json.loads(msg.data)
                    if not isinstance(data, dict):
                        raise ValueError("not an object")
                except (ValueError, RecursionError):
                    # RecursionError: a few KB of "[[[[" nest past the decoder's depth;
                    # uncaught, it closed the socket (1006) with a traceback logged.
                    self.send(client, {"type": "error", "message": "malformed message"})
                    continue
                try:
                    await self.dispatch(client, data)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("web: handling %r failed", data.get("type"))
                    self.send(client, {"type": "error", "message": "internal error"})
        finally:
            self.tabs.closed(client)
        return ws

    async def _on_connect(self, client: Client, viewing: str | None = None) -> None:
        """Reconnect protocol: resume the most recent web conversation, then the list.

        ``viewing`` (``/ws?conversation=``) is what a reconnecting tab showed: that
        conversation, or ``new`` for an empty chat. A dropped socket must not move the
        tab to another conversation, where the owner's next message would go.
        """
        rec = None
        if viewing and viewing != "new":
            rec = await self.services.conversations.get(viewing)
        if rec is None and viewing != "new":
            rec = await self.services.conversations.most_recent(channel="web")
        await self.load(client, rec.id if rec is not None else None)
        await self.send_list(client, connecting=True)
        self.feed.send_alerts(client)

    # -- sending ----------------------------------------------------------------------
    def send(self, client: Client, payload: dict[str, Any]) -> None:
        self.tabs.send(client, payload)

    async def send_list(self, client: Client | None = None, connecting: bool = False) -> None:
        """The conversation list, to ``client`` or every tab; ``connecting``: the first
        list of a tab that just connected, which also counts the pending escalations."""
        records = await self.services.conversations.list(limit=LIST_SIZE + 1)
        titles = await derived_titles(self.services, records[:LIST_SIZE])
        payload = {
            "type": "conversation_list",
            "conversations": [conversation_meta(r, titles) for r in records[:LIST_SIZE]],
            "activeMinutes": self.channel.config.conversations.list_active_minutes,
            "timeZone": self._zone(),
            "hasMore": len(records) > LIST_SIZE,  # "Older conversations" pages on
        }
        if connecting:
            # The External tab's "new" badge came only with a live frame: escalations
            # that arrived while no tab was open went unsignalled in a tab opened later
            # (until session 39). Only here: the list sent again on every change would
            # bring back a badge the owner had cleared by looking.
            payload["pendingEscalations"] = await self.services.external.pending_escalation_count()
        if client is None:
            self.tabs.broadcast(payload)
        else:
            self.send(client, payload)

    def _zone(self) -> str:
        """``owner.timezone``: the dashboard shows times in it, not in the browser's."""
        return self.channel.config.owner.timezone

    def _models(self) -> dict[str, Any]:
        models = self.channel.config.models
        # Without a key the offline brain answers whatever the selector says: the page
        # says so beside it (it read "sonnet" while no model answered).
        offline = getattr(self.services.brain, "name", "") == "offline"
        # The aliases whose model the model service does not offer (as /model marks them):
        # the selector offered them like the others, and choosing one was refused.
        missing = missing_model_ids(self.services)
        config = self.channel.config
        refused = sorted(a for a in models.aliases if config.resolve_model(a) in missing)
        return {
            "aliases": sorted(models.aliases),
            "default": models.default,
            "offline": offline,
            "notOffered": refused,
        }

    async def load(
        self, client: Client, conversation_id: str | None, around: int | None = None
    ) -> None:
        """Show the tab a conversation (``None``: the empty new chat), around a turn."""
        previous, client.conversation_id = client.conversation_id, None
        if conversation_id is None and previous is not None:
            client.left = previous  # a new chat, as /new (bot/previous_conversation.py)
        elif conversation_id is not None:
            client.left = None
        try:
            await self._show(client, conversation_id, around)
        finally:
            if previous is not None and previous != client.conversation_id:
                # The owner left it (another conversation or a new one): its notes are
                # written now instead of when its idle timer fires (seed 000 "Idle Timer").
                await self.services.bus.emit(
                    "conversation_switched",
                    previous_id=previous,
                    current_id=client.conversation_id,
                    channel="web",
                )

    async def _show(self, client: Client, conversation_id: str | None, around: int | None) -> None:
        rec = None
        if conversation_id:
            rec = await self.services.conversations.get(conversation_id)
            if rec is None:
                self.send(client, {"type": "error", "message": "no such conversation"})
        if rec is None:
            self.send(
                client,
                {
                    "type": "conversation_loaded",
                    "conversation": None,
                    "turns": [],
                    "hasMore": False,
                    "models": self._models(),
                    "timeZone": self._zone(),
                },
            )
            return
        client.pending_model = client.pending_title = None
        # A turn written while the page is read reached the tab before the page, which
        # may not hold it, and the page replaced it: it is sent again after the page.
        client.loading = (rec.id, [])
        try:
            await self._send_page(client, rec, around)
        finally:
            missed = client.loading[1] if client.loading else []
            client.loading = None
        for payload in missed:
            self.send(client, payload)

    async def _send_page(self, client: Client, rec: Any, around: int | None) -> None:
        titles = await derived_titles(self.services, [rec])
        page = await self.channel.read_page(rec.id, PAGE_SIZE, around=around)
        # Opened around an older turn (a search result): later turns exist past the page,
        # and the tab must not show new ones right under it, as if none came between.
        # Viewing from here on, without an await in between: every delta of a reply being
        # written is either in the catch-up frame below or streamed after it, never both.
        client.conversation_id = rec.id
        self.send(
            client,
            {
                "type": "conversation_loaded",
                "conversation": conversation_meta(rec, titles),
                "turns": page.items,
                "hasMore": page.has_more,
                "olderThan": page.start,
                "hasNewer": page.has_newer,
                "newerThan": page.end,
                "models": self._models(),
                "timeZone": self._zone(),
                "focusTurn": around,
            },
        )
        self.feed.catch_up(client, rec.id)

    # -- client messages -------------------------------------------------------------
    async def dispatch(self, client: Client, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "ping":
            self.send(client, {"type": "pong", "t": data.get("t")})
        elif kind == "new_conversation":
            # No transcript until the first message (seed 000 Flow 2, step 3).
            await self.load(client, None)
        elif kind == "switch_conversation":
            around = data.get("aroundTurn")
            await self.load(
                client,
                str(data.get("conversationId") or "") or None,
                around=around if isinstance(around, int) else None,
            )
        elif kind == "load_more":
            await load_older(self, client, data)
        elif kind == "load_newer":
            await load_newer(self, client, data)
        elif kind == "list_more":
            await self._list_more(client, data)
        elif kind == "rename_conversation":
            await rename_conversation(self, client, data)
        elif kind == "send_message":
            await send_message(self, client, data)
        elif kind == "stop_generation":
            cid = data.get("conversationId") or client.conversation_id
            if cid:
                stopped = self.services.router.cancel(str(cid))
                if inspect.isawaitable(stopped):
                    await stopped
        elif kind == "set_model":
            await set_model(self, client, data)
        else:
            self.send(client, {"type": "error", "message": f"unknown message type {kind!r}"})

    async def _list_more(self, client: Client, data: dict[str, Any]) -> None:
        """The next page of the conversation list, after the ``offset`` the tab holds
        (the list stopped at :data:`LIST_SIZE`; older ones were reachable only by
        search). Newer conversations arriving meanwhile sit on top, so the count the tab
        holds is still where its page ends."""
        offset = data.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            return
        records = await self.services.conversations.list(
            limit=LIST_SIZE + 1,
            offset=min(offset, LAST_POSITION),  # 2**63: OverflowError
        )
        titles = await derived_titles(self.services, records[:LIST_SIZE])
        self.send(
            client,
            {
                "type": "conversation_list_more",
                "conversations": [conversation_meta(r, titles) for r in records[:LIST_SIZE]],
                "hasMore": len(records) > LIST_SIZE,
            },
        )
