"""The web dashboard channel: an aiohttp server on 127.0.0.1:4321 by default.

Every page, API and the WebSocket need a session obtained on ``/login`` with the token
from ``data_dir/web_token`` (printed at start on a terminal). ``/healthz`` and
``/readyz`` are open and carry no data. Requests naming a foreign ``Host`` are refused
(DNS rebinding) and the WebSocket only accepts the dashboard's own ``Origin`` (these
checks and the security headers: :mod:`channels.web.guard`). Replies
to dashboard messages come back through :meth:`WebChannel.send` and
:meth:`WebChannel.stream`; everything else the dashboard shows (turns from other
channels, renames, externals) comes from the event bus.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.channel import ChannelHost
from bot.config.model import AppConfig
from bot.events import OutboundMessage, SendResult, StreamEvent
from channels.web.analytics import setup_analytics
from channels.web.api import setup_api
from channels.web.auth import (
    LEGACY_COOKIE_NAME,
    RateLimiter,
    SessionStore,
    cookie_name,
    load_or_create_token,
)
from channels.web.external import setup_external_api
from channels.web.guard import guard_middlewares, origin_allowed
from channels.web.login import setup_login
from channels.web.pages import Page, read_page, read_turn
from channels.web.ws import WsHub

log = logging.getLogger("my_agent.web")

STATIC_DIR = Path(__file__).parent / "static"


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


class WebChannel:
    """The dashboard (implements :class:`bot.channel.StreamingChannel`)."""

    name = "web"
    supports_streaming = True

    def __init__(
        self,
        config: AppConfig,
        services: Any,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` paces the login rate limit; ``wall_clock`` dates sessions (they
        outlive the process, so they need real time)."""
        self.config = config
        self.services = services
        self.settings = config.channels.web
        self.token_path = config.data_dir / "web_token"
        self.token = ""
        self.sessions = SessionStore(
            self.settings.session_ttl_hours * 3600.0,
            wall_clock,
            path=config.data_dir / "web_sessions.json",
        )
        self.cookie_name = cookie_name(config.data_dir)
        self.limiter = RateLimiter(self.settings.login_attempts_per_minute, 60.0, clock)
        self.hub = WsHub(self)
        self.host: ChannelHost | None = None
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self.started = False  # read by Services.health() for /readyz
        self._unsubscribe: list[Callable[[], None]] = []

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        host = self.settings.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        # an IPv6 address in brackets: "http://::1:4321/" (the link the owner is given at
        # start) was no address a browser could open
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{self.port}"

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=guard_middlewares(self), client_max_size=1 << 20)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._ws)
        app.router.add_static("/static", STATIC_DIR, follow_symlinks=False)
        setup_login(app, self)
        setup_api(app, self)
        setup_external_api(app, self)
        setup_analytics(app, self)
        return app

    async def start(self, host: ChannelHost) -> None:
        """Load or create the token, bind the server and follow the event bus."""
        self.host = host
        self.token = load_or_create_token(self.token_path)
        self._runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.settings.port
        self._subscribe()
        self.started = True
        # WARNING so it shows at the default log level: the owner needs it to log in.
        # The token itself only on a terminal: under systemd the log is the journal, kept
        # and readable by every member of its group, and the token opens the dashboard.
        if _stderr_is_terminal():
            log.warning(
                "dashboard at %s/ — log in with the token in %s: %s (or open %s/login#token=%s)",
                self.url,
                self.token_path,
                self.token,
                self.url,
                self.token,
            )
        else:
            log.warning(
                "dashboard at %s/ — log in with the token in %s (not logged: the log is not "
                "a terminal)",
                self.url,
                self.token_path,
            )

    async def stop(self) -> None:
        self.started = False
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        await self.hub.tabs.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def send(self, message: OutboundMessage) -> SendResult:
        """Show a reply or notice in the open tabs (the transcript already holds replies)."""
        self.hub.feed.on_outbound(message)
        return SendResult(message_ref=f"web-{uuid.uuid4().hex}")

    async def stream(self, event: StreamEvent) -> None:
        """Forward a token delta to the tabs viewing that conversation."""
        self.hub.feed.on_stream(event)

    # -- helpers used by the hub and the API -----------------------------------------
    def _transcript(self, conversation_id: str) -> Path | None:
        try:
            return Path(self.services.store.path(conversation_id))
        except ValueError:  # not a conversation id at all
            return None

    async def read_page(
        self,
        conversation_id: str,
        limit: int,
        before: int | None = None,
        around: int | None = None,
        older_than: int | None = None,
        newer_than: int | None = None,
    ) -> Page:
        """A page of the chat (:func:`channels.web.pages.read_page`), read in a thread."""
        path = self._transcript(conversation_id)
        if path is None:
            return Page()
        return await asyncio.to_thread(
            read_page,
            path,
            limit=limit,
            before=before,
            around=around,
            older_than=older_than,
            newer_than=newer_than,
        )

    async def read_turn(self, conversation_id: str, number: int, role: str) -> Any:
        """The whole of one turn (a cut one's "Show all"), or None."""
        path = self._transcript(conversation_id)
        if path is None:
            return None
        return await asyncio.to_thread(read_turn, path, number, role)

    async def create_web_conversation(self, model: str | None, title: str | None = None) -> Any:
        """A new web conversation, created when its first message is sent (``title``:
        the owner's, from ``/rename`` typed before it, kept as a manual one)."""
        rec = await self.services.conversations.create(channel="web", model=model)
        if title:
            rec = await self.services.conversations.rename(rec.id, title)
        return rec

    def _subscribe(self) -> None:
        self._unsubscribe += self.hub.feed.subscribe(self.services.bus)

    # -- sessions -----------------------------------------------------------------------
    def session_id(self, request: web.Request) -> str | None:
        """The session ``request`` carries: under this instance's cookie name, or a valid
        one under the name all instances shared before (carried over by the guard)."""
        sid = request.cookies.get(self.cookie_name)
        if sid:
            return sid
        legacy = request.cookies.get(LEGACY_COOKIE_NAME)
        return legacy if legacy and self.sessions.valid(legacy) else None

    def authenticated(self, request: web.Request) -> bool:
        """Whether ``request`` carries a valid session cookie."""
        return self.sessions.valid(self.session_id(request))

    # -- handlers ---------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        """Readiness of store, index and channels: booleans only, never data."""
        checks: dict[str, Any] = {"web": self._runner is not None}
        try:
            health = self.services.health()
            checks["core"] = bool(health.get("ready"))
            channels = health.get("channels") or {}
            checks["channels"] = {str(k): bool(v) for k, v in channels.items()}
            checks["vectorSearch"] = bool(health.get("vectorSearch"))  # informative only
            # Not ready while messages are refused: draining after SIGTERM, or storage
            # failing (messages held in memory, replies waiting to be written).
            checks["accepting"] = bool(health.get("accepting", True))
            checks["storage"] = not health.get("spooled") and not health.get(
                "repliesWaitingForStorage"
            )
        except Exception:
            log.exception("health check failed")
            checks["core"] = False
        ready = bool(
            checks["web"]
            and checks.get("core")
            and checks.get("accepting")
            and checks.get("storage")
            and all(checks.get("channels", {}).values())
        )
        return web.json_response({"ready": ready, "checks": checks}, status=200 if ready else 503)

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        if not origin_allowed(self.settings, request):
            log.warning("web socket refused: origin %r", request.headers.get("Origin"))
            return web.json_response({"error": "origin not allowed"}, status=403)
        return await self.hub.handle(request)
