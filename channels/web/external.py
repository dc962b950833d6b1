"""The External panel's endpoints (all behind the session cookie):

- ``GET /api/external?limit=&offset=``: a page of parties with tier, recent messages and
  pending escalations, and ``total``, how many parties there are. Parties with a
  pending escalation come first, then the rest by their last activity, newest first.
- ``POST /api/external/{party_id}/tier`` {tier} and ``.../reply`` {text, ref}:
  Trust/Block/Reply (``ref``: the page's token for one reply, which it is queued by once;
  the answer's ``sent`` says where it went)

Split out of :mod:`channels.web.api` in session 41, when the list began to page.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.party_lines import sent_to
from bot.party_tiers import handles_of, tier_now
from channels.web.api import query_int

if TYPE_CHECKING:
    from channels.web.server import WebChannel

log = logging.getLogger("my_agent.web.external")

TIERS = ("known", "untrusted", "blocked")
_REF = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a Reply's ref, made by the page
MESSAGES_PER_PARTY = 20
PAGE_SIZE = 200  # parties a page unless asked (the panel's "Older parties" asks for more)
MAX_PAGE = 500

# Those waiting for the owner first, whatever their last activity: before session 41
# the panel listed the 200 most recently active parties only, so the longest-waiting
# escalations (of parties quiet since) could not be reached from it, though the tab's
# badge counted them. ``p.id`` last keeps the order total, so pages neither repeat
# nor skip a party of the same ``updated``.
_PAGE = (
    "SELECT p.id, p.channel, p.party_key, p.display_name, p.tier, p.tier_source,"
    " json_extract(p.meta, '$.handles'), p.created, p.updated,"
    " (SELECT count(*) FROM external_messages m"
    "  WHERE m.party_id = p.id AND m.direction = 'in'),"
    " (SELECT count(*) FROM external_messages m"
    "  WHERE m.party_id = p.id AND m.direction = 'out'),"
    " p.tokens_in, p.tokens_out, p.cost_total"
    " FROM external_parties p ORDER BY"
    " EXISTS (SELECT 1 FROM escalations e WHERE e.status = 'pending' AND e.party_id = p.id)"
    " DESC, p.updated DESC, p.id LIMIT ? OFFSET ?"
)


class ExternalApi:
    """The External panel's handlers, bound to one :class:`~channels.web.server.WebChannel`."""

    def __init__(self, channel: WebChannel) -> None:
        self.channel = channel

    @property
    def services(self) -> Any:
        return self.channel.services

    async def parties(self, request: web.Request) -> web.Response:
        """A page of parties (``limit``, ``offset``), ``total`` and ``hasMore``."""
        db = self.services.index.db
        limit = query_int(request, "limit", PAGE_SIZE, 1, MAX_PAGE) or PAGE_SIZE
        offset = query_int(request, "offset", 0) or 0
        # Messages counted both ways from external_messages: the parties' message_count
        # counts only what they sent, and a party answered twice read "1 message".
        parties = await db.fetchall(_PAGE, (limit, offset))
        total_row = await db.fetchone("SELECT count(*) FROM external_parties")
        total = int(total_row[0]) if total_row else 0
        pending = await self._pending([row[0] for row in parties])
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
        return web.json_response(
            {
                "parties": out,
                "tiers": list(TIERS),
                "total": total,
                "offset": offset,
                "hasMore": offset + len(out) < total,
            }
        )

    async def _pending(self, party_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The pending escalations of the page's parties (not of all: a flood of
        strangers leaves thousands), by party, oldest first."""
        pending: dict[str, list[dict[str, Any]]] = {}
        for start in range(0, len(party_ids), 400):  # under SQLite's bound variables
            chunk = party_ids[start : start + 400]
            marks = ",".join("?" * len(chunk))
            rows = await self.services.index.db.fetchall(
                "SELECT id, party_id, created, text FROM escalations"
                f" WHERE status = 'pending' AND party_id IN ({marks}) ORDER BY id",
                tuple(chunk),
            )
            for eid, pid, created, text in rows:
                pending.setdefault(pid, []).append({"id": eid, "created": created, "text": text})
        return pending

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


def setup_external_api(app: web.Application, channel: WebChannel) -> None:
    """Route the External panel's endpoints."""
    api = ExternalApi(channel)
    app.router.add_get("/api/external", api.parties)
    app.router.add_post("/api/external/{party_id}/tier", api.set_tier)
    app.router.add_post("/api/external/{party_id}/reply", api.reply)
