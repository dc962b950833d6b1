"""The streamed replies of the fake Anthropic API (:mod:`bot.bench.fakes.anthropic_api`):
``text/event-stream`` frames as the Messages API sends them (message_start, pings,
content blocks and their deltas, message_delta, message_stop), and the failures a test
scripts on the way: pings while the model stalls, an error event, a connection cut or
reset, a garbled frame after so many deltas, a pause before each delta (a slow stream).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from bot.bench.fakes.anthropic_api import Scripted


async def stream_message(
    request: web.Request, scripted: Scripted, message: dict[str, Any]
) -> web.StreamResponse:
    """Send ``message`` as the SSE frames of a streamed reply, with what ``scripted``
    asks for on the way (pings while stalled, an error or a cut after some deltas, a
    garbled frame)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    try:
        return await _frames(request, response, scripted, message)
    except ConnectionError:  # the client gave up on it (a timeout, a stop)
        return response


async def _frames(
    request: web.Request,
    response: web.StreamResponse,
    scripted: Scripted,
    message: dict[str, Any],
) -> web.StreamResponse:
    """The frames of :func:`stream_message`."""

    async def send(event: str, data: dict[str, Any]) -> None:
        frame = f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
        await response.write(frame.encode())

    start = dict(message, content=[], stop_reason=None)
    # message_start carries the input counts (the cache's too, as the API sends them)
    start["usage"] = {**message["usage"], "output_tokens": 1}
    await send("message_start", {"type": "message_start", "message": start})
    await send("ping", {"type": "ping"})
    stalled_until = time.monotonic() + scripted.ping_seconds
    while time.monotonic() < stalled_until:
        await asyncio.sleep(0.2)
        await send("ping", {"type": "ping"})
    deltas = 0
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty = {
            "text": {"type": "text", "text": ""},
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
            "tool_use": dict(block, input={}),
        }[kind]
        await send(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": empty},
        )
        scripted_block = scripted.blocks[index]
        for piece in pieces(block, scripted_block.chunks):
            if scripted.fail_after_deltas is not None and deltas >= scripted.fail_after_deltas:
                await send(
                    "error",
                    {
                        "type": "error",
                        "error": {
                            "type": scripted.error_type or "overloaded_error",
                            "message": "overloaded mid-stream"
                            if scripted.error_type is None
                            else scripted.error_message,
                        },
                    },
                )
                await response.write_eof()
                return response
            if scripted.cut_after_deltas is not None and deltas >= scripted.cut_after_deltas:
                if scripted.cut == "reset" and request.transport is not None:
                    request.transport.close()
                else:
                    await response.write_eof()
                return response
            if scripted.trickle_seconds:
                await asyncio.sleep(scripted.trickle_seconds)
            if deltas == scripted.garble_after_deltas:
                await response.write(b'event: content_block_delta\ndata: {"type": garbled\n\n')
            await send(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": piece},
            )
            deltas += 1
        if kind == "thinking":
            await send(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": "sig"},
                },
            )
        await send("content_block_stop", {"type": "content_block_stop", "index": index})
    await send(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
    )
    await send("message_stop", {"type": "message_stop"})
    await response.write_eof()
    return response


def pieces(block: dict[str, Any], chunks: Sequence[str] | None) -> list[dict[str, Any]]:
    """The deltas of one content block: the scripted chunks, else slices of it."""
    kind = block["type"]
    if kind == "tool_use":
        raw = json.dumps(block["input"])
        parts = list(chunks) if chunks else [raw[i : i + 7] for i in range(0, len(raw), 7)]
        return [{"type": "input_json_delta", "partial_json": p} for p in parts]
    full = block["text"] if kind == "text" else block["thinking"]
    parts = list(chunks) if chunks else [full[i : i + 12] for i in range(0, len(full), 12)]
    if kind == "text":
        return [{"type": "text_delta", "text": p} for p in parts]
    return [{"type": "thinking_delta", "thinking": p} for p in parts]
