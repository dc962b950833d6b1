"""The checks every request to the dashboard passes, and the headers every answer carries.

A request naming a foreign ``Host`` is refused (DNS rebinding); one without a session is
sent to ``/login`` (an API call or the WebSocket gets a 401), except the few paths the
health probes and the login page need; a state-changing request must come from the
dashboard's own pages (``Origin``). Every response, raised ones included, carries the
security headers (CSP, no framing, no sniffing, no referrer, no caching of private pages).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from bot.config.channels import WebChannelConfig
from channels.web.login import carry_legacy_session

if TYPE_CHECKING:
    from channels.web.server import WebChannel

log = logging.getLogger("my_agent.web")

# Reachable without a session: the health probes and what the login page itself needs.
PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/login", "/static/login.js", "/static/style.css", "/favicon.ico"}
)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


def harden(request: web.Request, headers: MutableMapping[str, str]) -> None:
    """The security headers every response carries."""
    headers.setdefault("Content-Security-Policy", CSP)
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    headers.setdefault("X-Frame-Options", "DENY")
    if request.path in ("/", "/login") or request.path.startswith(("/api/", "/analytics/")):
        # the dashboard page too: cached, Back after Log out showed it again
        headers.setdefault("Cache-Control", "no-store")
    elif request.path.startswith("/static/"):
        # The dashboard's scripts are ES modules importing one another: each is checked
        # again at every load (a 304 when unchanged), so after an upgrade a browser never
        # runs a cached module beside a newer one that no longer exports what it imports.
        headers.setdefault("Cache-Control", "no-cache")


def host_allowed(settings: WebChannelConfig, request: web.Request) -> bool:
    """Refuse foreign Host headers so a rebinding DNS name cannot reach us."""
    if settings.host in ("0.0.0.0", "", "::"):
        return True
    hostname = urlsplit(f"//{request.host}").hostname or ""
    allowed = set(LOOPBACK_HOSTS) | {settings.host}
    allowed |= {urlsplit(o).hostname or "" for o in settings.allowed_origins}
    return hostname in allowed


def origin_allowed(settings: WebChannelConfig, request: web.Request) -> bool:
    """The WebSocket (and state-changing requests) must come from our own pages."""
    origin = request.headers.get("Origin")
    if not origin:
        return False
    if origin in settings.allowed_origins:
        return True
    return origin == f"{request.scheme}://{request.host}"


def write_origin_allowed(settings: WebChannelConfig, request: web.Request) -> bool:
    """A state-changing request without a foreign ``Origin``.

    Under our ``no-referrer`` policy Chromium sends a form POST (Log out) with
    ``Origin: null``; its ``Sec-Fetch-Site``, which no page can set, still says
    whether it came from our own pages."""
    origin = request.headers.get("Origin")
    if not origin:
        return True
    if origin == "null":
        return request.headers.get("Sec-Fetch-Site") == "same-origin"
    return origin_allowed(settings, request)


def guard_middlewares(channel: WebChannel) -> list[Middleware]:
    """The middlewares of ``channel``'s application, in order: the host check and the
    security headers, then the session and origin checks."""

    @web.middleware
    async def security(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not host_allowed(channel.settings, request):
            return web.Response(status=421, text="misdirected request")
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            # Raised, not returned (the redirect to /login, 404, 403, 405): they went out
            # without any of these headers.
            harden(request, exc.headers)
            raise
        harden(request, response.headers)
        carry_legacy_session(channel, request, response)
        return response

    @web.middleware
    async def authentication(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PUBLIC_PATHS or channel.authenticated(request):
            if request.method not in ("GET", "HEAD", "OPTIONS"):
                # Belt and braces beside SameSite=Strict: writes come from our own pages.
                # The login too: a foreign page posting guesses from the owner's browser
                # used up the owner's own attempts and kept the owner locked out.
                if not write_origin_allowed(channel.settings, request):
                    # Named in the log: behind a proxy whose origin is missing from
                    # channels.web.allowed_origins, the owner's own login lands here.
                    log.warning(
                        "web: refused %s %s from origin %r",
                        request.method,
                        request.path,
                        request.headers.get("Origin"),
                    )
                    return web.json_response({"error": "bad origin"}, status=403)
            return await handler(request)
        if (
            request.path.startswith("/api/")
            or request.path == "/ws"
            or request.path.startswith("/analytics/")
        ):
            return web.json_response({"error": "authentication required"}, status=401)
        raise web.HTTPSeeOther("/login")

    return [security, authentication]
