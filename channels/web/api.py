"""JSON endpoints of the dashboard (all behind the session cookie).

- ``GET /api/conversations?channel=&limit=&offset=`` and
  ``GET /api/conversations/{id}?before=&around=``: a page (:mod:`channels.web.pages`);
  ``GET /api/conversations/{id}/turns/{n}?role=``: a cut turn whole
- ``GET /api/search?q=&channel=&from=&to=&conversation=&cursor=``: the hybrid search
  (seed 000 Flow 4)
- ``GET /api/external``: parties with tier, recent messages and pending escalations
- ``POST /api/external/{party_id}/tier`` {tier} and ``.../reply`` {text, ref}:
  Trust/Block/Reply (``ref``: the page's token for one reply, which it is queued by once;
  the answer's ``sent`` says where it went)

Conversation chat itself goes over the WebSocket (:mod:`channels.web.ws`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.command_search import focus_turn, search_channel
from bot.owner_days import day_range, owner_zone
from bot.party_lines import sent_to
from bot.party_tiers import handles_of, tier_now
from channels.web.paging import LAST_POSITION
from channels.web.titles import derived_titles
from channels.web.views import conversation_meta

if TYPE_CHECKING:
    from channels.web.server import WebChannel

log = logging.getLogger("my_agent.web.api")

TIERS = ("known", "untrusted", "blocked")
_REF = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a Reply's ref, made by the page
MESSAGES_PER_PARTY = 20


def _int(
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
        limit = _int(request, "limit", 100, 1, 500) or 100
        offset = _int(request, "offset", 0) or 0
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
            _int(request, "limit", 50, 1, 500) or 50,
            before=_int(request, "before", None),
            around=_int(request, "around", None),
            older_than=_int(request, "olderThan", None),
            newer_than=_int(request, "newerThan", None),
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
            "limit": _int(request, "limit", 20, 1, 100),
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
            result["label"] = conversation_meta(rec)["label"] if rec is not None else ""
        return web.json_response(body)

    # -- external communications ----------------------------------------------------
    async def external(self, request: web.Request) -> web.Response:
        db = self.services.index.db
        # Messages counted both ways from external_messages: the parties' message_count
        # counts only what they sent, and a party answered twice read "1 message".
        parties = await db.fetchall(
            "SELECT p.id, p.channel, p.party_key, p.display_name, p.tier, p.tier_source,"
            " json_extract(p.meta, '$.handles'), p.created, p.updated,"
            " (SELECT count(*) FROM external_messages m"
            "  WHERE m.party_id = p.id AND m.direction = 'in'),"
            " (SELECT count(*) FROM external_messages m"
            "  WHERE m.party_id = p.id AND m.direction = 'out'),"
            " p.tokens_in, p.tokens_out, p.cost_total"
            " FROM external_parties p ORDER BY p.updated DESC LIMIT 200"
        )
        escalations = await db.fetchall(
            "SELECT id, party_id, created, text FROM escalations WHERE status = 'pending'"
            " ORDER BY id"
        )
        pending: dict[str, list[dict[str, Any]]] = {}
        for eid, pid, created, text in escalations:
            pending.setdefault(pid, []).append({"id": eid, "created": created, "text": text})
        out = []
        for row in parties:
            pid, channel, key, name, *stored, created, updated, n_in, n_out = row[:-3]
            spent = row[-3:]
            # the tier that applies now: the record's is as of their last message, and
            # the owner may have changed trust.contacts since (before session 30 a
            # contact taken off the list showed "known" until they wrote again)
            tier, source = tier_now(
                self.services.config, channel, key, stored[0], stored[1], handles_of(stored[2])
            )
            rows = await db.fetchall(
                "SELECT direction, content, timestamp, kind FROM external_messages"
                " WHERE party_id = ? ORDER BY id DESC LIMIT ?",
                (pid, MESSAGES_PER_PARTY),
            )
            out.append(
                {
                    "id": pid,
                    "channel": channel,
                    "identity": key,
                    "name": name,
                    "tier": tier,
                    "tierSource": source,
                    "created": created,
                    "updated": updated,
                    "messageCount": n_in + n_out,
                    "messagesIn": n_in,
                    "messagesOut": n_out,
                    # what the model's answers to them cost (session 40)
                    "tokensIn": spent[0],
                    "tokensOut": spent[1],
                    "cost": round(float(spent[2]), 6),
                    "escalations": pending.get(pid, []),
                    "messages": [
                        {"direction": d, "content": c, "timestamp": t, "kind": k}
                        for d, c, t, k in reversed(rows)
                    ],
                }
            )
        return web.json_response({"parties": out, "tiers": list(TIERS)})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if request.content_type != "application/json":
            # JSON only: a cross-site form cannot send it without a CORS preflight.
            raise web.HTTPUnsupportedMediaType(text="application/json required")
        try:
            body = await request.json()
        except (ValueError, RecursionError) as exc:
            # ValueError: JSONDecodeError and a body that is not UTF-8
            # (UnicodeDecodeError); RecursionError: JSON nested deeper than the
            # decoder goes. Both were a 500 with a traceback in the log.
            raise web.HTTPBadRequest(text="malformed JSON") from exc
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="an object is required")
        return body

    async def set_tier(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        tier = body.get("tier")
        if tier not in TIERS:
            return web.json_response({"error": f"tier must be one of {TIERS}"}, status=400)
        party_id = request.match_info["party_id"]
        if await self.services.external.get(party_id) is None:
            return web.json_response({"error": "no such party"}, status=404)
        await self.services.external.set_tier(party_id, tier)
        log.info("owner set tier of %s to %s from the dashboard", party_id, tier)
        await self.channel.hub.feed.on_external("tier")
        return web.json_response({"ok": True, "tier": tier})

    async def reply(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        text = str(body.get("text") or "").strip()
        if not text:
            return web.json_response({"error": "empty reply"}, status=400)
        party_id = request.match_info["party_id"]
        party = await self.services.external.get(party_id)
        if party is None:
            return web.json_response({"error": "no such party"}, status=404)
        ref = body.get("ref")
        if ref is not None and not (isinstance(ref, str) and _REF.fullmatch(ref)):
            return web.json_response({"error": "ref must be a short token"}, status=400)
        # "all": to everyone their message went to, as /replyall (session 41)
        to_all = body.get("all", False)
        if not isinstance(to_all, bool):
            return web.json_response({"error": "all must be true or false"}, status=400)
        # Keyed by the page's ref for this reply, as /reply is by the owner's message: a
        # POST sent again (a retry after a lost answer, a double submit) is queued and
        # recorded once; before session 40 it had no key and went twice.
        dedup = f"web:{ref or uuid.uuid4().hex}:to-party"
        answering = await self.services.external.reply_thread(party)
        if await self.services.outbox.has_key(dedup):
            log.info("dashboard reply %s to %s was queued before: not again", ref, party_id)
        else:
            # Same path as the owner's /reply command: recorded, queued in the outbox, to
            # the party alone (never reply-all to those their mail went to, session 40),
            # or, with "all", to everyone their mail went to (/replyall, session 41).
            await self.services.router.send_to_party(
                party,
                text,
                kind="reply",
                dedup=dedup,
                answering=answering,
                alone=True,
                to_all=to_all,
            )
        await self.services.external.resolve_escalations(party_id, "replied")
        await self.channel.hub.feed.on_external("reply")
        # where it went, as /reply's confirmation says it (the page shows it)
        address = self.services.config.channels.email.address
        said = sent_to(party, answering, to_all=to_all, ourselves=[address] if address else [])
        return web.json_response({"ok": True, "sent": said + "."})


def setup_api(app: web.Application, channel: WebChannel) -> None:
    api = Api(channel)
    app.router.add_get("/api/conversations", api.conversations)
    app.router.add_get("/api/conversations/{conversation_id}", api.conversation)
    app.router.add_get("/api/conversations/{conversation_id}/turns/{number}", api.turn)
    app.router.add_get("/api/search", api.search)
    app.router.add_get("/api/external", api.external)
    app.router.add_post("/api/external/{party_id}/tier", api.set_tier)
    app.router.add_post("/api/external/{party_id}/reply", api.reply)
