"""A scriptable fake of the Anthropic Messages API (``POST /v1/messages``) on 127.0.0.1.

The real ``anthropic`` SDK talks to it over HTTP (``AsyncAnthropic(base_url=fake.base_url)``),
so tests and benchmarks exercise the SDK's own request building, SSE parsing, tool-input
reassembly and error classes (TESTING.md "Anthropic"). Each test scripts what the "model"
answers, in order:

    async with FakeAnthropicAPI() as fake:
        fake.push_error(529)                      # overloaded once
        fake.push_tool_use("search_conversations", {"query": "boiler"})
        fake.push_text("Found it.", chunks=["Fo", "und it."])
        ...
        assert fake.requests[1].body["messages"][-1]["content"][0]["type"] == "tool_result"

Every request body is recorded (``fake.requests``). ``down_for(seconds)`` answers every
request with an error until that time has passed (an outage); ``fallback="echo"`` answers
unscripted requests with an echo of the last user text (benchmarks), the default
``"error"`` answers them with a 400 so a test notices an unexpected call.
``prompt_cache=True`` counts cache writes and reads from the requests' ``cache_control``
breakpoints as the API does (:mod:`bot.bench.fakes.anthropic_cache`), and refuses
breakpoints the API refuses with a 400. Empty messages and blank text blocks are refused
with a 400 as the API refuses them (:mod:`bot.bench.fakes.anthropic_checks`).
``Scripted(trickle_seconds=)`` sends a body not streamed a few bytes at a time, and a
streamed one a delta at a time, each after that pause;
``Scripted(raw=)`` sends a raw body instead of the message (a proxy's page).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Literal

from aiohttp import web

from bot.bench.fakes.anthropic_cache import PromptCache
from bot.bench.fakes.anthropic_checks import content_problem
from bot.bench.fakes.anthropic_script import (
    Block,
    RecordedRequest,
    Responder,
    Scripted,
    estimate_tokens,
    last_user_text,
)
from bot.bench.fakes.anthropic_stream import stream_message

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


class FakeAnthropicAPI:
    """The fake server. ``await start()`` (or ``async with``) then use :attr:`base_url`."""

    def __init__(
        self, *, fallback: Literal["error", "echo"] = "error", prompt_cache: bool = False
    ) -> None:
        self.fallback = fallback
        # prompt_cache: count cache writes and reads as the API does (anthropic_cache)
        self.cache = PromptCache() if prompt_cache else None
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Scripted | Responder] = deque()
        self._down_until = 0.0
        self._down_status = 529
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0
        # model ids GET /v1/models/{id} and POST /v1/messages answer 404 not_found_error
        # for (a retired model)
        self.unknown_models: set[str] = set()
        self.model_requests: list[str] = []  # the ids asked for, in order
        # False: no Models API (a compatible endpoint serving Messages alone), its GET
        # answered with a web server's 404 page
        self.models_api = True

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._handle)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_get("/v1/models/{model_id}", self._model)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.base_url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropicAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- scripting -------------------------------------------------------------------
    def push(self, item: Scripted | Responder) -> None:
        """Queue a scripted answer, or a function of the request body returning one."""
        self._queue.append(item)

    def push_text(
        self,
        text: str,
        *,
        chunks: Sequence[str] | None = None,
        thinking: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        blocks = []
        if thinking is not None:
            blocks.append(Block("thinking", text=thinking))
        blocks.append(Block("text", text=text, chunks=chunks))
        self.push(Scripted(blocks, input_tokens=input_tokens, output_tokens=output_tokens))

    def push_tool_use(
        self,
        name: str,
        tool_input: dict[str, Any],
        *,
        text: str | None = None,
        tool_id: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        blocks = [Block("text", text=text)] if text else []
        blocks.append(Block("tool_use", name=name, input=tool_input, id=tool_id or ""))
        self.push(Scripted(blocks, input_tokens=input_tokens, output_tokens=output_tokens))

    def push_error(
        self, status: int, *, retry_after: float | None = None, message: str = "scripted error"
    ) -> None:
        self.push(Scripted(status=status, retry_after=retry_after, error_message=message))

    def down_for(self, seconds: float, status: int = 529) -> None:
        """Answer every request with ``status`` for the next ``seconds`` (an outage)."""
        self._down_until = time.monotonic() + seconds
        self._down_status = status

    def up(self) -> None:
        self._down_until = 0.0

    @property
    def pending(self) -> int:
        """Scripted answers not consumed yet."""
        return len(self._queue)

    # -- serving ---------------------------------------------------------------------
    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"input_tokens": estimate_tokens(body)})

    async def _model(self, request: web.Request) -> web.Response:
        """The Models API's one model: 404 for :attr:`unknown_models`, else its info."""
        model_id = request.match_info["model_id"]
        self.model_requests.append(model_id)
        if not self.models_api:
            return web.Response(status=404, text="404: Not Found")
        if model_id in self.unknown_models:
            message = f"model: {model_id}"
            return self._error(Scripted(status=404, error_message=message))
        info = {"type": "model", "id": model_id, "display_name": model_id}
        return web.json_response({**info, "created_at": "2025-01-01T00:00:00Z"})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(RecordedRequest(request.path, dict(request.headers), body))
        if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
            return self._error(Scripted(status=401, error_message="missing API key"))
        if time.monotonic() < self._down_until:
            return self._error(Scripted(status=self._down_status, error_message="down"))
        if body.get("model") in self.unknown_models:  # as the API answers a retired id
            gone = f"model: {body.get('model')}"
            return self._error(Scripted(status=404, error_message=gone))
        # Empty text the API refuses, then breakpoints it refuses (prompt_cache=True).
        problem = content_problem(body) or (self.cache.problem(body) if self.cache else None)
        if problem:
            return self._error(Scripted(status=400, error_message=problem))
        scripted = self._next(body)
        if scripted.delay:
            await asyncio.sleep(scripted.delay)
        if scripted.raw is not None:
            return web.Response(
                status=scripted.status,
                body=scripted.raw,
                headers={"Content-Type": scripted.raw_type},
            )
        if scripted.status >= 400:
            return self._error(scripted)
        message = self._message(scripted, body)
        if body.get("stream"):
            return await stream_message(request, scripted, message)
        if scripted.trickle_seconds:
            return await _trickle(request, message, scripted.trickle_seconds)
        return web.json_response(message)

    def _next(self, body: dict[str, Any]) -> Scripted:
        if self._queue:
            item = self._queue.popleft()
            return item(body) if callable(item) else item
        if self.fallback == "echo":
            return Scripted([Block("text", text=f"echo: {last_user_text(body)[:200]}")])
        return Scripted(status=400, error_message="fake Anthropic API: no scripted response left")

    def _error(self, scripted: Scripted) -> web.Response:
        headers = {}
        if scripted.retry_after is not None:
            headers["retry-after"] = str(scripted.retry_after)
        kind = scripted.error_type or _ERROR_TYPES.get(scripted.status, "api_error")
        payload = {"type": "error", "error": {"type": kind, "message": scripted.error_message}}
        return web.json_response(payload, status=scripted.status, headers=headers)

    def _message(self, scripted: Scripted, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for block in scripted.blocks:
            if block.type == "text":
                content.append({"type": "text", "text": block.text})
            elif block.type == "thinking":
                content.append({"type": "thinking", "thinking": block.text, "signature": "sig"})
            else:
                block.id = block.id or f"toolu_fake{next(self._ids):04d}"
                content.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                )
        stop = scripted.stop_reason or (
            "tool_use" if any(b.type == "tool_use" for b in scripted.blocks) else "end_turn"
        )
        inputs = {k: body.get(k) for k in ("system", "messages", "tools")}
        usage = {
            "input_tokens": scripted.input_tokens or estimate_tokens(inputs),
            "output_tokens": scripted.output_tokens or estimate_tokens(content),
        }
        if self.cache is not None and not scripted.input_tokens:
            usage.update(self.cache.usage(body))
        elif scripted.cache_write_tokens or scripted.cache_read_tokens:
            usage["cache_creation_input_tokens"] = scripted.cache_write_tokens
            usage["cache_read_input_tokens"] = scripted.cache_read_tokens
        return {
            "id": f"msg_fake{next(self._ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "unknown"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }


async def _trickle(
    request: web.Request, message: dict[str, Any], seconds: float
) -> web.StreamResponse:
    """``message`` as JSON, four bytes every ``seconds``: never a read timeout, no end soon."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    data = json.dumps(message).encode()
    try:
        for start in range(0, len(data), 4):
            await response.write(data[start : start + 4])
            await asyncio.sleep(seconds)
        await response.write_eof()
    except ConnectionError:  # the client gave up on it
        pass
    return response


# What tests and benchmarks import from here (defined in anthropic_script).
__all__ = [
    "Block",
    "FakeAnthropicAPI",
    "RecordedRequest",
    "Responder",
    "Scripted",
    "estimate_tokens",
    "last_user_text",
]
