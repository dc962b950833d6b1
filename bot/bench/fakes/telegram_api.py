"""A fake Telegram Bot API server (aiohttp) for tests and benchmarks.

It serves ``POST /bot{token}/{method}`` like api.telegram.org: method names compared
case-insensitively, urlencoded or multipart bodies whose non-string fields are
JSON-encoded, ``{"ok": true, "result": ...}`` answers and ``{"ok": false, "error_code",
"description", "parameters"}`` errors. ``getUpdates`` long-polls on an asyncio.Condition
and drops updates below ``offset`` exactly like the real server, so a client that
advances its offset too early loses messages here too.

It is strict where Telegram is strict: HTML that Telegram would refuse (unknown or
unbalanced tags, bare ``<`` or ``&``) gets 400 "can't parse entities", a text longer
than 4,096 UTF-16 units gets "message is too long", ``callback_data`` over 64 bytes
gets BUTTON_DATA_INVALID. Every call is recorded; failures (429 with ``retry_after``,
5xx, 403) can be scripted per method; updates of every kind can be injected.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.bench.fakes.telegram_html import HtmlError, parse_telegram_html
from bot.bench.fakes.telegram_sends import ApiError, SendMethods
from bot.bench.fakes.telegram_updates import UpdateInjection

# HtmlError, parse_telegram_html and ApiError stay importable from here
__all__ = ["TOKEN", "ApiCall", "ApiError", "FakeTelegramServer", "HtmlError", "parse_telegram_html"]

TOKEN = "123456:TEST-token_abc"
_JSON_FIELDS = frozenset(
    {
        "reply_markup", "allowed_updates", "commands", "entities", "caption_entities",
        "reply_parameters", "link_preview_options", "scope", "media", "results",
    }
)  # fmt: skip


@dataclass
class RawAnswer:
    """An answer that is not the Bot API's JSON (a proxy's HTML error page)."""

    status: int
    body: str
    content_type: str


@dataclass
class ApiCall:
    """One request the client made (params decoded; JSON fields parsed)."""

    method: str  # as sent (camelCase)
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


class FakeTelegramServer(UpdateInjection, SendMethods):
    """The fake server. ``await start()`` returns the base URL for ``TelegramAPIServer``."""

    def __init__(
        self, *, token: str = TOKEN, bot_id: int = 424242, bot_username: str = "my_agent_bot"
    ) -> None:
        self.token = token
        self.me = {"id": bot_id, "is_bot": True, "first_name": "My Agent", "username": bot_username}
        self.calls: list[ApiCall] = []
        self.sent: list[dict[str, Any]] = []  # messages the bot sent, in order
        self.commands: list[dict[str, Any]] = []  # the last menu set, whatever its scope
        self.menus: dict[str, list[str]] = {}  # scope ("default", "chat:1001"...) -> commands
        self.missing_chats: set[int] = set()  # 400 chat not found
        self.blocked_chats: set[int] = set()  # 403 bot was blocked by the user
        self.kicked_chats: set[int] = set()  # 403 bot was kicked from the group chat
        # old group id -> its supergroup's id: 400 with parameters.migrate_to_chat_id
        self.migrated_chats: dict[int, int] = {}
        self.webhook: str | None = None  # set: getUpdates is refused with 409, as there
        self.deleted_topics: set[int] = set()  # message_thread_id: 400 thread not found
        self._updates: list[dict[str, Any]] = []
        self._history: list[dict[str, Any]] = []
        self._next_update_id = 1000
        self._message_ids: dict[int, int] = defaultdict(lambda: 100)
        self._failures: dict[str, deque[ApiError | RawAnswer]] = defaultdict(deque)
        self._cond = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._closing = False
        self.base_url = ""

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        # handler_cancellation: a long poll whose client went away ends at once
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.base_url = f"http://{host}:{sock.getsockname()[1]}"
        return self.base_url

    async def close(self) -> None:
        self._closing = True  # pending long polls answer now instead of at their timeout
        async with self._cond:
            self._cond.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- scripting -----------------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        *,
        code: int = 429,
        description: str | None = None,
        retry_after: int | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail (429 with retry_after, 5xx...)."""
        if description is None:
            description = {
                429: f"Too Many Requests: retry after {retry_after or 1}",
                403: "Forbidden: bot was blocked by the user",
                400: "Bad Request: chat not found",
            }.get(code, "Internal Server Error")
        if code == 429 and retry_after is None:
            retry_after = 1
        for _ in range(times):
            self._failures[method.lower()].append(ApiError(code, description, retry_after))

    def answer_raw_next(
        self, method: str, body: str, *, status: int = 502, content_type: str = "text/html"
    ) -> None:
        """Answer the next call of ``method`` with ``body`` as it is, not JSON: what a
        proxy in front of Telegram sends when it cannot reach it (an HTML 502 page)."""
        self._failures[method.lower()].append(RawAnswer(status, body, content_type))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [c.params for c in self.calls if c.method.lower() == method.lower()]

    def sent_to(self, chat_id: int | str) -> list[dict[str, Any]]:
        return [m for m in self.sent if str(m["chat"]["id"]) == str(chat_id)]

    async def wait_for(self, method: str, count: int = 1, timeout: float = 10.0) -> None:
        """Wait until ``method`` has been called successfully-or-not ``count`` times."""

        def enough() -> bool:
            return len(self.calls_of(method)) >= count

        async with self._cond:
            await asyncio.wait_for(self._cond.wait_for(enough), timeout)

    async def wait_sent(self, chat_id: int | str, count: int = 1, timeout: float = 10.0) -> None:
        """Wait until the bot has sent ``count`` messages to ``chat_id``."""
        async with self._cond:
            await asyncio.wait_for(
                self._cond.wait_for(lambda: len(self.sent_to(chat_id)) >= count), timeout
            )

    def rewind(self, offset: int) -> None:
        """Queue again every update from ``offset`` on, as Telegram does for updates whose
        confirmation it never got (a client that crashed before polling again)."""
        self._updates = [u for u in self._history if u["update_id"] >= offset]
        asyncio.get_running_loop().create_task(self._notify())

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        return list(self._updates)

    # -- HTTP ------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params: dict[str, Any] = {}
        if request.can_read_body:
            form = await request.post()
            for key, value in form.items():
                raw = value if isinstance(value, str) else str(value)
                params[key] = json.loads(raw) if key in _JSON_FIELDS else raw
        call = ApiCall(method, params)
        self.calls.append(call)
        await self._notify()
        try:
            if request.match_info["token"] != self.token:
                raise ApiError(401, "Unauthorized")
            queued = self._failures.get(method.lower())
            failure = queued.popleft() if queued else None
            if isinstance(failure, RawAnswer):
                return web.Response(
                    status=failure.status, text=failure.body, content_type=failure.content_type
                )
            if failure is not None:
                raise failure
            result = await self._dispatch(method.lower(), params)
        except ApiError as exc:
            body: dict[str, Any] = {
                "ok": False, "error_code": exc.code, "description": exc.description,
            }  # fmt: skip
            if exc.retry_after is not None:
                body["parameters"] = {"retry_after": exc.retry_after}
            if exc.migrate_to_chat_id is not None:
                body["parameters"] = {"migrate_to_chat_id": exc.migrate_to_chat_id}
            return web.json_response(body, status=exc.code)
        await self._notify()
        return web.json_response({"ok": True, "result": result})

    async def _dispatch(self, method: str, p: dict[str, Any]) -> Any:
        if method == "getme":
            return self.me
        if method == "sendchataction":
            self._check_chat(int(p["chat_id"]), p)
            return True
        if method == "deletewebhook":
            self.webhook = None
            return True
        if method in ("answercallbackquery", "deletemessage"):
            return True
        if method in ("setmycommands", "deletemycommands"):
            scope = p.get("scope") or {"type": "default"}
            chat = scope.get("chat_id")
            if chat is not None and int(chat) in self.missing_chats:
                raise ApiError(400, "Bad Request: chat not found")  # never wrote to the bot
            key = scope["type"] if chat is None else f"{scope['type']}:{chat}"
            if method == "deletemycommands":
                self.menus.pop(key, None)
                return True
            self.commands = list(p.get("commands") or [])
            self.menus[key] = [c["command"] for c in self.commands]
            return True
        if method == "getmycommands":
            return self.commands
        if method == "getupdates":
            return await self._get_updates(p)
        if method == "sendmessage":
            return self._send_message(p)
        if method in ("sendphoto", "senddocument"):
            return self._send_file(method[len("send") :], p)
        raise ApiError(404, "Not Found: method not found")

    async def _get_updates(self, p: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook is not None:
            raise ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use "
                "deleteWebhook to delete the webhook first",
            )
        offset = int(p.get("offset", 0))
        timeout = float(p.get("timeout", 0))
        limit = int(p.get("limit", 100))
        allowed = p.get("allowed_updates")
        if offset:  # confirms (forgets) everything below the offset, like Telegram
            self._updates = [u for u in self._updates if u["update_id"] >= offset]

        def ready() -> list[dict[str, Any]]:
            found = [u for u in self._updates if u["update_id"] >= offset]
            if allowed:
                found = [u for u in found if any(k in u for k in allowed)]
            return found[:limit]

        async with self._cond:
            try:
                await asyncio.wait_for(
                    self._cond.wait_for(lambda: bool(ready()) or self._closing), timeout
                )
            except TimeoutError:
                pass
        return ready()
