"""What the fake Anthropic API (:mod:`bot.bench.fakes.anthropic_api`) is scripted with
and records: the scripted answers (``Scripted``, ``Block``), the recorded requests, and
the helpers that read a request body."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.brain.prompt_cache import CLOCK_START


@dataclass
class Block:
    """One content block of a scripted reply: ``text``, ``tool_use`` or ``thinking``."""

    type: Literal["text", "tool_use", "thinking"]
    text: str = ""
    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    chunks: Sequence[str] | None = None  # how text/thinking/JSON is split into deltas


@dataclass
class Scripted:
    """A scripted answer: a message (``blocks``) or an HTTP error (``status`` >= 400)."""

    blocks: list[Block] = field(default_factory=list)
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    # prompt caching's counts (usage.cache_creation_input_tokens / cache_read_input_tokens)
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    status: int = 200
    error_type: str | None = None
    error_message: str = "scripted error"
    retry_after: float | None = None
    # Streaming only: after this many content deltas, send an SSE ``error`` frame instead
    # of the rest (a failure mid-stream), of ``error_type`` (default overloaded_error).
    fail_after_deltas: int | None = None
    # Streaming only: after this many content deltas, end the stream without an error
    # frame and without message_stop: ``"eof"`` closes the body cleanly, ``"reset"``
    # drops the connection (a proxy or network failure mid-answer).
    cut_after_deltas: int | None = None
    cut: Literal["eof", "reset"] = "eof"
    # Streaming only: after this many content deltas, one frame whose data is not JSON
    # (an answer the SDK cannot read), then the rest of the answer.
    garble_after_deltas: int | None = None
    delay: float = 0.0  # seconds before answering (timeouts)
    # Streaming only: after message_start, only pings (every 0.2 s) for this many seconds:
    # a stream that stays open and makes no progress.
    ping_seconds: float = 0.0
    # Not streamed: the JSON body sent a few bytes at a time, this many seconds apart (a
    # server trickling its answer, each piece within the SDK's per-read timeout).
    # Streamed: this many seconds before each content delta (a slow but steady stream,
    # never stalled).
    trickle_seconds: float = 0.0
    # Instead of the message: this body with ``status`` and ``raw_type`` as its
    # Content-Type (a proxy's HTML page, hand-written SSE frames).
    raw: bytes | None = None
    raw_type: str = "text/html"


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def text(self) -> str:
        """The whole body as JSON text (for "this string never appears" assertions)."""
        return json.dumps(self.body, ensure_ascii=False)


Responder = Callable[[dict[str, Any]], Scripted]


def estimate_tokens(value: Any) -> int:
    """A rough token count (4 characters per token) of any JSON value."""
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message in a request body."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        # not the clock note after the owner's text (bot.brain.prompt_cache)
        texts = [
            b.get("text", "")
            for n, b in enumerate(content)
            if b.get("type") == "text" and not (n and b.get("text", "").startswith(CLOCK_START))
        ]
        if texts:
            return "\n".join(texts)
    return ""
