"""Logging in to the dashboard and out of it: ``GET/POST /login`` and ``POST /logout``.

The token from ``data_dir/web_token`` buys a session cookie (``HttpOnly``,
``SameSite=Strict``, ``Secure`` over HTTPS, also behind a TLS proxy); attempts are
limited per client address, a correct token included. Log out revokes the session and
closes the sockets of every tab it had open. The checks every request passes (host,
origin, session) are :class:`channels.web.server.WebChannel`'s middleware.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.auth import LEGACY_COOKIE_NAME, forwarded, login_client, token_matches

if TYPE_CHECKING:
    from channels.web.server import WebChannel

log = logging.getLogger("my_agent.web")

LOGIN_PAGE = Path(__file__).parent / "static" / "login.html"


def redirect(location: str, headers: dict[str, str] | None = None) -> web.Response:
    """A 303 we can still attach cookies to (aiohttp's HTTPSeeOther is raised, not returned)."""
    return web.Response(status=303, headers={"Location": location, **(headers or {})})


def over_https(request: web.Request) -> bool:
    """Whether the browser reached us over HTTPS, directly or through a TLS proxy.

    Behind the proxy docs/web.md recommends, the request arrives as plain HTTP and
    ``request.secure`` is False, so the session cookie went out without ``Secure``. The
    proxy's ``X-Forwarded-Proto`` (or ``Forwarded: proto=``) says what the browser used;
    trusting it costs nothing, since a forged value only makes the forger's own cookie
    stricter.
    """
    if request.secure:
        return True
    forwarded_proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0]
    if forwarded_proto.strip().lower() == "https":
        return True
    return forwarded(request.headers, "proto").lower() == "https"


def set_session_cookie(
    channel: WebChannel, request: web.Request, response: web.StreamResponse, sid: str
) -> None:
    """Hand the browser session ``sid`` under this instance's cookie name."""
    response.set_cookie(
        channel.cookie_name,
        sid,
        httponly=True,
        samesite="Strict",
        path="/",
        max_age=int(channel.settings.session_ttl_hours * 3600),
        secure=over_https(request),
    )


def carry_legacy_session(
    channel: WebChannel, request: web.Request, response: web.StreamResponse
) -> None:
    """Move a valid session from the cookie name every instance shared until session 26
    to this instance's own, so an upgrade logs no one out. A legacy cookie this instance
    does not know (another daemon's) is left alone for that daemon to carry over."""
    if request.cookies.get(channel.cookie_name) or response.prepared:
        return
    sid = request.cookies.get(LEGACY_COOKIE_NAME)
    if sid and channel.sessions.valid(sid):
        set_session_cookie(channel, request, response, sid)
        response.del_cookie(LEGACY_COOKIE_NAME, path="/")


def setup_login(app: web.Application, channel: WebChannel) -> None:
    """Route ``/login`` and ``/logout`` to ``channel``'s token, sessions and rate limit."""

    async def login_page(request: web.Request) -> web.StreamResponse:
        if channel.authenticated(request):
            raise web.HTTPSeeOther("/")
        return web.FileResponse(LOGIN_PAGE)

    async def login(request: web.Request) -> web.StreamResponse:
        wants_json = request.content_type == "application/json"
        client = login_client(request.remote, request.headers)
        peer = request.remote or "unknown"
        wait = channel.limiter.check(client, peer if client.startswith(f"{peer} for ") else None)
        if wait:
            if channel.limiter.first_refusal(client):
                log.warning("web login rate limited for %s (told once a minute)", client)
            headers = {"Retry-After": str(int(wait) + 1)}
            if wants_json:
                return web.json_response(
                    {"error": "too many attempts"}, status=429, headers=headers
                )
            return redirect("/login?error=rate", headers)
        try:
            if wants_json:
                body = await request.json()
                given = str(body.get("token", "")) if isinstance(body, dict) else ""
            else:
                given = str((await request.post()).get("token", ""))
        except (ValueError, RecursionError):
            # RecursionError: JSON nested past the decoder's depth (before: a 500 and a
            # traceback, from anyone able to reach the login page)
            given = ""
        if not channel.token or not token_matches(channel.token, given):
            log.warning("web login failed from %s", client)
            if wants_json:
                return web.json_response({"error": "invalid token"}, status=401)
            return redirect("/login?error=invalid")
        channel.limiter.reset(client)
        sid = channel.sessions.create()
        response: web.StreamResponse = (
            web.json_response({"ok": True}) if wants_json else redirect("/")
        )
        set_session_cookie(channel, request, response, sid)
        return response

    async def logout(request: web.Request) -> web.StreamResponse:
        sid = channel.session_id(request)
        channel.sessions.revoke(sid)
        channel.hub.tabs.close_session(sid)
        response = redirect("/login")
        response.del_cookie(channel.cookie_name, path="/")
        if sid and request.cookies.get(LEGACY_COOKIE_NAME) == sid:
            response.del_cookie(LEGACY_COOKIE_NAME, path="/")
        return response

    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
