"""The local fake Messages API, holding the requests of one kind (by their system
prompt) until the test opens the gate: a model call in flight, without sleeps."""

from __future__ import annotations

import asyncio

from aiohttp import web

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI


class GatedAPI(FakeAnthropicAPI):
    """Holds every request whose system prompt contains ``hold`` until :attr:`gate` is
    set; :attr:`held` is set when the first one arrives."""

    def __init__(self, hold: str) -> None:
        super().__init__(fallback="echo")
        self.hold = hold
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()  # (aiohttp keeps the body: read again below)
        if self.hold in str(body.get("system")):
            self.held.set()
            await self.gate.wait()
        return await super()._handle(request)
