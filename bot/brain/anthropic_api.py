"""One Messages API call with retries, and reading what it returned.

:class:`MessagesCaller` is what :class:`~bot.brain.anthropic.AnthropicBrain` calls the API
through. The SDK's own retries are off (``max_retries=0``); :meth:`MessagesCaller.call`
retries timeouts, connection errors, 408/409/429/5xx/529 and errors inside a stream with
exponential backoff and full jitter, honouring ``retry-after``, for at most a budget of
seconds. Past that it raises :class:`BrainUnavailable`. Authentication, permission and
billing errors raise :class:`BrainUnavailable` at once (retrying cannot fix them); a
request the API rejects as invalid raises :class:`Rejected` (it would fail the same way
forever).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anthropic
from anthropic import AsyncAnthropic

from bot.brain.base import BrainAccessRefused, BrainUnavailable, DeltaSink, Usage
from bot.brain.tokens import estimate_tokens
from bot.config.model import BrainConfig

log = logging.getLogger("my_agent.brain")

UNAVAILABLE_NOW = (401, 402, 403)
# Seconds an attempt gets at least (capped by brain.request_timeout), however little of
# the retry budget is left when it starts.
ATTEMPT_FLOOR = 20.0
REJECTED = (400, 404, 413, 422)


# The API's message for a request over the model's window (400 invalid_request_error).
PROMPT_TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum", re.IGNORECASE)


class Rejected(Exception):
    """The API refused the request itself (it would fail the same way on retry)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def too_long(self) -> bool:
        """Refused for its size ("prompt is too long", or 413 request_too_large): a
        smaller request can succeed where the same one cannot."""
        return self.status == 413 or "prompt is too long" in str(self).lower()

    @property
    def counted(self) -> tuple[int, int] | None:
        """(tokens the API counted, its maximum) when its message says, else None."""
        found = PROMPT_TOO_LONG.search(str(self))
        return (int(found.group(1)), int(found.group(2))) if found else None


class DeltaForwarder:
    """Forwards text deltas once: retried attempts do not resend what was already sent,
    and text of consecutive tool-loop iterations is separated by a blank line.

    A retry continues what an earlier attempt sent only while it repeats it: the model
    words a retry differently, and its deltas past the length already sent, spliced
    onto the first attempt's words, showed the watcher text nobody wrote. Once they
    differ, the rest of that call is not streamed (the finished reply replaces it)."""

    def __init__(self, sink: DeltaSink | None) -> None:
        self.sink = sink
        # the usage of a streamed call cancelled before it finished (a stop): what it had
        # billed by then (bot.brain.anthropic reports it; the final message never comes)
        self.cut: Usage | None = None
        self.any_sent = False
        self._sent = ""  # of the current call, by its attempts so far
        self._attempt = ""
        self._separated = True
        self._diverged = False

    def new_call(self) -> None:
        self._sent = ""
        self._attempt = ""
        self._separated = not self.any_sent
        self._diverged = False

    def new_attempt(self) -> None:
        self._attempt = ""

    @property
    def attempt_text(self) -> str:
        """The text streamed by the current attempt of the current call."""
        return self._attempt

    async def text(self, delta: str) -> None:
        start = len(self._attempt)
        self._attempt += delta
        if self.sink is None or self._diverged:
            return
        # only the part of this delta that overlaps what was sent needs comparing
        end = min(len(self._attempt), len(self._sent))
        if start < end and self._attempt[start:end] != self._sent[start:end]:
            self._diverged = True
            log.info("a retried stream differs from what was sent; not streaming the rest")
            return
        if len(self._attempt) <= len(self._sent):
            return
        fresh = self._attempt[len(self._sent) :]
        self._sent = self._attempt
        if not self._separated:
            fresh = "\n\n" + fresh
            self._separated = True
        self.any_sent = True
        await self.sink(fresh)


class MessagesCaller:
    """Calls ``client.messages`` with the retry policy of ``config`` (``brain:``)."""

    def __init__(
        self,
        config: BrainConfig,
        client: AsyncAnthropic,
        *,
        sleep: Callable[[float], Awaitable[None]],
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.client = client
        self._sleep, self._clock = sleep, clock

    async def call(
        self,
        params: dict[str, Any],
        deltas: DeltaForwarder | None,
        budget: float | None = None,
    ) -> Any:
        """One Messages API call (streamed when ``deltas`` is given), retried within
        ``budget`` seconds (default ``brain.retry_budget_seconds``). Returns the final
        ``Message``."""
        cfg = self.config
        deadline = self._clock() + (cfg.retry_budget_seconds if budget is None else budget)
        attempt = unreadable = 0
        while True:
            # The budget bounds when a new attempt may start, not how long one may take:
            # cut to what was left of it, the attempt after a long outage timed out before
            # a model slow to start on a long context could answer (at least ATTEMPT_FLOOR).
            remaining = deadline - self._clock()
            timeout = min(cfg.request_timeout, max(ATTEMPT_FLOOR, remaining))
            try:
                if deltas is None:
                    return await self.client.messages.create(**params, timeout=timeout)
                deltas.new_attempt()
                async with self.client.messages.stream(**params, timeout=timeout) as stream:
                    try:
                        await _consume(stream, deltas, timeout)
                    except asyncio.CancelledError:
                        deltas.cut = _usage_so_far(stream, deltas.attempt_text)
                        raise
                    return await stream.get_final_message()
            except anthropic.APIStatusError as exc:
                status = _status(exc)
                if status in UNAVAILABLE_NOW:
                    raise BrainAccessRefused(
                        status, f"Anthropic API refused access ({status}): {error_message(exc)}"
                    ) from exc
                if status in REJECTED:
                    raise Rejected(status, error_message(exc)) from exc
                error: Exception = exc
                retry_after = _retry_after(exc)
            except (
                anthropic.APIConnectionError,
                anthropic.APIResponseValidationError,
                StreamStalled,
                StreamBroken,
            ) as exc:
                error, retry_after = exc, None
            except UnreadableAnswer as exc:
                unreadable += 1
                if unreadable >= UNREADABLE_ATTEMPTS:
                    raise  # the same each time: not an outage (the reply engine's apology)
                error, retry_after = exc, None
            delay = min(cfg.retry_max_delay, cfg.retry_base_delay * 2**attempt)
            delay = random.uniform(0, delay)  # full jitter
            if retry_after is not None:
                delay = max(delay, retry_after)
            if self._clock() + delay > deadline:
                log.warning(
                    "Anthropic API unavailable after %d attempt(s): %s",
                    attempt + 1,
                    _describe(error),
                )
                raise BrainUnavailable(f"Anthropic API unavailable: {_describe(error)}") from error
            log.info(
                "Anthropic API attempt %d failed (%s); retrying in %.2fs",
                attempt + 1,
                _describe(error),
                delay,
            )
            await self._sleep(delay)
            attempt += 1


def _usage_so_far(stream: Any, streamed: str) -> Usage:
    """What a stream cancelled midway had billed: its input tokens (message_start gives
    them exactly) and its output so far: the final count only comes with message_delta,
    so at least the text streamed, estimated (:func:`~bot.brain.tokens.estimate_tokens`:
    at four characters a token, a stopped Chinese answer was billed a quarter of it)."""
    try:
        usage = stream.current_message_snapshot.usage
        given_in, given_out = int(usage.input_tokens or 0), int(usage.output_tokens or 0)
    except Exception:  # cancelled before message_start: nothing known
        given_in = given_out = 0
    return Usage(given_in, max(given_out, estimate_tokens(streamed)))


class StreamStalled(Exception):
    """A stream stayed open without progress (pings only) for the request timeout."""


class StreamBroken(Exception):
    """A stream ended before ``message_stop``: cut cleanly, or the connection dropped."""


class UnreadableAnswer(Exception):
    """The SDK could not read the streamed answer, e.g. tool input that is not JSON ("Please
    retry your request", it says): asked again, the model usually answers well."""


# Attempts of one call whose answer cannot be read, before it counts as a failure.
UNREADABLE_ATTEMPTS = 3


def _transport_errors() -> tuple[type[Exception], ...]:
    """The transport error base of the HTTP library under the SDK (``httpx2`` for
    anthropic 2.x, ``httpx`` before): raised as is while a stream's body is read."""
    found: list[type[Exception]] = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


TRANSPORT_ERRORS = _transport_errors()


async def _consume(stream: Any, deltas: DeltaForwarder, stall: float) -> None:
    """Forward a stream's text, abandoning it when nothing but keep-alive pings came for
    ``stall`` seconds. The SDK's timeout is per read and every ping resets it: a server
    that only pinged held a reply for as long as it pinged, with no notice to the owner
    and no retry (``brain.request_timeout`` is documented per request).

    A stream is complete only with its ``message_stop``: one that ends before it raises
    :class:`StreamBroken` (retried). The SDK returned such a truncated message as final
    (half a reply sent as the whole), and a connection dropped mid-stream surfaced as the
    HTTP library's own error, which is no ``anthropic`` exception and was never retried.
    An answer the SDK cannot read (tool input that is not JSON, a garbled event) raises
    :class:`UnreadableAnswer`, retried a few times.
    """
    events = stream.__aiter__()
    progress = time.monotonic()
    while True:
        left = stall - (time.monotonic() - progress)
        if left <= 0:
            raise StreamStalled(f"no progress in the stream for {stall:g}s")
        try:
            event = await asyncio.wait_for(events.__anext__(), left)
        except StopAsyncIteration:
            raise StreamBroken("the stream ended before message_stop") from None
        except TimeoutError:
            raise StreamStalled(f"no progress in the stream for {stall:g}s") from None
        except TRANSPORT_ERRORS as exc:
            raise StreamBroken(f"the stream broke: {type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            # Before: raised as is, never retried, and the owner got the apology and no
            # answer for a glitch that asking again mends.
            raise UnreadableAnswer(str(exc)) from exc
        if event.type == "message_stop":
            return
        if event.type != "ping":
            progress = time.monotonic()
        if event.type == "text":
            await deltas.text(event.text)


def text_of(message: Any) -> str:
    """The text blocks of a ``Message``, joined."""
    return "".join(b.text for b in message.content if b.type == "text")


def as_params(blocks: Sequence[Any]) -> list[dict[str, Any]]:
    """Response content blocks as request blocks (for the assistant turn of a tool loop);
    thinking blocks keep their signature, as the API requires."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        if b.type == "text":
            if b.text:
                out.append({"type": "text", "text": b.text})
        elif b.type == "tool_use":
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        elif b.type == "thinking":
            out.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        elif b.type == "redacted_thinking":
            out.append({"type": "redacted_thinking", "data": b.data})
    return out


def error_message(exc: anthropic.APIStatusError) -> str:
    """The API's own error message from the response body, else the exception's text."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return str(exc)


# The status each error type is sent with before a stream starts (the Messages API's
# error documentation): an error frame inside a stream comes after the 200.
STREAM_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def _status(exc: anthropic.APIStatusError) -> int:
    """The HTTP status of an API error; for an error frame inside a stream (the SDK
    gives the stream's 200), the status its type has before a stream. Taken for an
    outage, an invalid request or a refused key was retried for the whole budget and
    then by the pending reply every 30 s, for ever."""
    if exc.status_code >= 400:
        return exc.status_code
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return STREAM_ERROR_STATUS.get(str(kind), 500)


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def _describe(exc: Exception) -> str:
    if isinstance(exc, anthropic.APIStatusError):
        return f"{_status(exc)} {error_message(exc)}"
    return type(exc).__name__
