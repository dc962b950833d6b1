"""JSON endpoints of the dashboard (all behind the session cookie).

- ``GET /api/conversations?channel=&limit=&offset=`` and
  ``GET /api/conversations/{id}?before=&around=``: a page (:mod:`channels.web.pages`);
  ``GET /api/conversations/{id}/turns/{n}?role=``: a cut turn whole
- ``GET /api/search?q=&channel=&from=&to=&conversation=&cursor=``: the hybrid search
  (seed 000 Flow 4)
- the External panel's (``/api/external``): :mod:`channels.web.external`

Conversation chat itself goes over the WebSocket (:mod:`channels.web.ws`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.command_search import focus_turn, search_channel
from bot.owner_days import day_range, owner_zone
from channels.web.paging import LAST_POSITION
from channels.web.titles import derived_titles
from channels.web.views import conversation_meta

if TYPE_CHECKING:
    from channels.web.server import WebChannel

log = logging.getLogger("my_agent.web.api")


def query_int(
    request: web.Request, key: str, default: int | None, lo: int = 0, hi: int | None = None
) -> int | None:
    """Query parameter ``key`` as a number within ``lo``..``hi``; a 400 naming it if it is
    not one. Positions (``offset``, ``before``, ``around``) have no upper bound: capped
    at 10,000 they read the page at 10,000 for any later one (``before=15000`` of a
    20,000-turn conversation, ``offset=10200`` of 10,400 conversations)."""
    value = request.query.get(key)
    if value is None or value == "":
        return default
    try:
        number = max(lo, int(value))
    except ValueError as exc:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"{key} is not a number: {value[:40]!r}"}),
            content_type="application/json",
        ) from exc
    # past SQLite's largest integer (an OverflowError, a 500) no row is found either
    return min(LAST_POSITION if hi is None else hi, number)


class Api:
    """Handlers bound to one :class:`~channels.web.server.WebChannel`."""

    def __init__(self, channel: WebChannel) -> None:
        self.channel = channel

    @property
    def services(self) -> Any:
        return self.channel.services

    async def conversations(self, request: web.Request) -> web.Response:
        try:  # as /api/search: an unknown channel listed nothing, as if it had none
            channel = search_channel(self.services.config, request.query.get("channel") or None)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        limit = query_int(request, "limit", 100, 1, 500) or 100
        offset = query_int(request, "offset", 0) or 0
        records = await self.services.conversations.list(
            channel=channel, limit=limit, offset=offset
        )
        titles = await derived_titles(self.services, records)
        return web.json_response({"conversations": [conversation_meta(r, titles) for r in records]})

    async def conversation(self, request: web.Request) -> web.Response:
        cid = request.match_info["conversation_id"]
        rec = await self.services.conversations.get(cid)
        if rec is None:
            return web.json_response({"error": "not found"}, status=404)
        page = await self.channel.read_page(
            cid,
            query_int(request, "limit", 50, 1, 500) or 50,
            before=query_int(request, "before", None),
            around=query_int(request, "around", None),
            older_than=query_int(request, "olderThan", None),
            newer_than=query_int(request, "newerThan", None),
        )
        titles = await derived_titles(self.services, [rec])
        return web.json_response(
            {
                "conversation": conversation_meta(rec, titles),
                "turns": page.items,
                "hasMore": page.has_more,
                "olderThan": page.start,
                "hasNewer": page.has_newer,
                "newerThan": page.end,
            }
        )

    async def turn(self, request: web.Request) -> web.Response:
        """The whole of a turn that a page showed cut (``cut`` in the turn): "Show all"."""
        cid = request.match_info["conversation_id"]
        number = request.match_info["number"]
        role = request.query.get("role", "")
        if not (number.isascii() and number.isdigit()) or len(number) > 18:
            return web.json_response({"error": "a turn number is digits"}, status=400)
        if role not in ("user", "assistant"):
            return web.json_response({"error": "role must be user or assistant"}, status=400)
        if await self.services.conversations.get(cid) is None:
            return web.json_response({"error": "not found"}, status=404)
        turn = await self.channel.read_turn(cid, int(number), role)
        if turn is None:
            return web.json_response({"error": "no such turn"}, status=404)
        return web.json_response({"turn": turn})

    async def search(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "").strip()
        if not query:
            return web.json_response(
                {"results": [], "next_cursor": None, "total": 0, "method": "none"}
            )
        config = self.services.config
        try:  # checked here, so that the error names this API's parameter
            # days of the owner's calendar, as /search, `my-agent search` and the recall
            # tool read them: a bare date was a UTC day here, and an unknown channel
            # matched nothing, read as "never talked about it"
            date_from, date_to = day_range(
                request.query.get("from") or None,
                request.query.get("to") or None,
                owner_zone(config),
                ("from", "to"),
            )
            channel = search_channel(config, request.query.get("channel") or None)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        # One conversation's turns (seed 000's filters: channel, date range, conversation).
        # The parameter was ignored: an id of none searched everything.
        conversation = request.query.get("conversation") or None
        if conversation and await self.services.conversations.get(conversation) is None:
            return web.json_response(
                {"error": f"conversation: no conversation {conversation[:40]!r}"}, status=404
            )
        kwargs: dict[str, Any] = {
            "channel": channel,
            "date_from": date_from,
            "date_to": date_to,
            "conversation_id": conversation,
            "limit": query_int(request, "limit", 20, 1, 100),
            "cursor": request.query.get("cursor") or None,
        }
        try:
            page = await self.services.search.search(query, **kwargs)
        except ValueError as exc:  # a stale or foreign cursor, a date that is not one
            return web.json_response({"error": str(exc)}, status=400)
        body = page.to_dict()
        for found, result in zip(page.results, body["results"], strict=True):
            result["focus_turn"] = focus_turn(found)  # the turn its snippet quotes
            # The contact, or sender and subject, as in the sidebar (seed 000 "Channel
            # Indicators"): a channel conversation's title alone does not say whose it is.
            rec = await self.services.conversations.get(result["conversation_id"])
            meta = conversation_meta(rec) if rec is not None else {}
            result["label"] = meta.get("label", "")
            if "labelFull" in meta:  # a long subject: cut, whole in the title attribute
                result["labelFull"] = meta["labelFull"]
        return web.json_response(body)


def setup_api(app: web.Application, channel: WebChannel) -> None:
    api = Api(channel)
    app.router.add_get("/api/conversations", api.conversations)
    app.router.add_get("/api/conversations/{conversation_id}", api.conversation)
    app.router.add_get("/api/conversations/{conversation_id}/turns/{number}", api.turn)
    app.router.add_get("/api/search", api.search)
