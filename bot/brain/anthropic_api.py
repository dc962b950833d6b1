"""One Messages API call with retries, and reading what it returned.

:class:`MessagesCaller` is what :class:`~bot.brain.anthropic.AnthropicBrain` calls the API
through. The SDK's own retries are off (``max_retries=0``); :meth:`MessagesCaller.call`
retries timeouts (of the whole answer, :func:`_within`), connection errors,
408/409/429/5xx/529, answers that are no message and errors inside a stream with
exponential backoff and full jitter, honouring ``retry-after``, for at most a budget of
seconds. Past that it raises :class:`BrainUnavailable`. Authentication, permission and
billing errors raise :class:`BrainUnavailable` at once (retrying cannot fix them); a
request the API rejects as invalid raises :class:`Rejected` (it would fail the same way
forever). A streamed call shares its reply's ``brain.reply_timeout`` with the reply's
other calls (:class:`~bot.brain.anthropic_stream.ReplyTimedOut` past it, not retried).
Reading a streamed answer is :mod:`bot.brain.anthropic_stream`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anthropic
from anthropic import AsyncAnthropic

from bot.backoff import doubled
from bot.brain.anthropic_stream import (
    UNREADABLE_ATTEMPTS,
    DeltaForwarder,
    ReplyTimedOut,
    StreamBroken,
    StreamStalled,
    UnreadableAnswer,
    consume,
    final_snapshot,
)
from bot.brain.anthropic_stream import usage_so_far as _usage_so_far
from bot.brain.base import BrainAccessRefused, BrainUnavailable, ForeignAnswer
from bot.brain.foreign_answers import foreign_excerpt
from bot.brain.stream_message import StreamedMessage
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

    def __init__(
        self, status: int, message: str, kind: str | None = None, foreign: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        # the API's own error type (``not_found_error``...), None when the body had none
        # (a proxy's or a web server's page): a 404 is about the model only with it
        self.kind = kind
        # a plain excerpt of the answer when it is not the API's own error (a proxy's
        # page: bot.brain.foreign_answers), None for the API's
        self.foreign = foreign

    @property
    def too_long(self) -> bool:
        """Refused for its size by the API ("prompt is too long", or 413
        request_too_large): a smaller request can succeed where the same one cannot. A
        proxy's 413 is not the model's count (before session 41 it compressed the
        conversation and told the owner it was too long for the model)."""
        if self.foreign is not None:
            return False
        return self.status == 413 or "prompt is too long" in str(self).lower()

    @property
    def counted(self) -> tuple[int, int] | None:
        """(tokens the API counted, its maximum) when its message says, else None."""
        found = PROMPT_TOO_LONG.search(str(self))
        return (int(found.group(1)), int(found.group(2))) if found else None


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
        # Why the last call could not reach the model (a refused key, an outage), None
        # once one got through: ``/status`` says it (before session 40 it read "Brain:
        # anthropic" while every reply waited for a key only the owner could replace).
        self.failing: BrainUnavailable | None = None

    async def call(
        self,
        params: dict[str, Any],
        deltas: DeltaForwarder | None,
        budget: float | None = None,
    ) -> Any:
        """One Messages API call (streamed when ``deltas`` is given), retried within
        ``budget`` seconds (default ``brain.retry_budget_seconds``). Returns the final
        ``Message``."""
        try:
            message = await self._call(params, deltas, budget)
        except BrainUnavailable as exc:
            self.failing = exc
            raise
        except Rejected:  # the service answered: the key and the connection work
            self.failing = None
            raise
        self.failing = None
        return message

    async def _call(
        self, params: dict[str, Any], deltas: DeltaForwarder | None, budget: float | None
    ) -> Any:
        cfg = self.config
        deadline = self._clock() + (cfg.retry_budget_seconds if budget is None else budget)
        if deltas is not None and deltas.deadline is None:  # the reply's first call
            deltas.deadline = self._clock() + cfg.reply_timeout
        attempt = unreadable = 0
        while True:
            # The budget bounds when a new attempt may start, not how long one may take:
            # cut to what was left of it, the attempt after a long outage timed out before
            # a model slow to start on a long context could answer (at least ATTEMPT_FLOOR).
            remaining = deadline - self._clock()
            timeout = min(cfg.request_timeout, max(ATTEMPT_FLOOR, remaining))
            try:
                if deltas is None:
                    return await self._whole(params, timeout)
                left = self._reply_left(deltas)
                deltas.new_attempt()
                # raw events, not messages.stream(): it raised on tool input that is not
                # JSON and lost the answer (bot.brain.stream_message)
                wait = min(timeout, left)
                try:
                    events = await _within(
                        self.client.messages.create(**params, stream=True, timeout=wait), wait
                    )
                except StreamStalled:
                    if left < timeout:  # the reply's time ran out, not the attempt's
                        raise self._timed_out() from None
                    raise
                async with events:
                    stream = StreamedMessage(events)
                    try:
                        # the reply's time bounds the stream as a whole: a server sending
                        # a token every few seconds never stalls (before session 41 it
                        # held the reply, and the conversation, for ever)
                        await consume(stream, deltas, timeout, left)
                    except asyncio.CancelledError:
                        deltas.cut = _usage_so_far(stream, deltas.attempt_text)
                        raise
                    except Exception:
                        deltas.abandoned(stream)  # its tokens were billed (session 41)
                        raise
                    return final_snapshot(stream)
            except anthropic.APIStatusError as exc:
                status = _status(exc)
                # A proxy's or a firewall's page is no word of the API's: said as what it
                # is (session 41; a 403 page read "permission denied", a 413 page "too long")
                foreign = foreign_excerpt(exc)
                if status in UNAVAILABLE_NOW:
                    if foreign is not None:
                        raise ForeignAnswer(status, foreign) from exc
                    raise BrainAccessRefused(
                        status, f"Anthropic API refused access ({status}): {error_message(exc)}"
                    ) from exc
                if status in REJECTED:
                    if foreign is not None:
                        message = f"HTTP {status}, not the model service's own error: {foreign}"
                        raise Rejected(status, message, None, foreign) from exc
                    raise Rejected(status, error_message(exc), error_type(exc)) from exc
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
            delay = doubled(cfg.retry_base_delay, attempt, cfg.retry_max_delay)
            delay = random.uniform(0, delay)  # full jitter
            if retry_after is not None:
                delay = max(delay, retry_after)
            if self._clock() + delay > deadline:
                log.warning(
                    "Anthropic API unavailable after %d attempt(s): %s",
                    attempt + 1,
                    _describe(error),
                )
                raise BrainUnavailable(
                    f"Anthropic API unavailable: {_describe(error)}", retry_after=retry_after
                ) from error
            if deltas is not None and deltas.deadline is not None:
                if self._clock() + delay >= deltas.deadline:  # no time left for another
                    raise self._timed_out() from error
            log.info(
                "Anthropic API attempt %d failed (%s); retrying in %.2fs",
                attempt + 1,
                _describe(error),
                delay,
            )
            await self._sleep(delay)
            attempt += 1

    def _reply_left(self, deltas: DeltaForwarder) -> float:
        """Seconds left of the reply's ``brain.reply_timeout`` (:class:`ReplyTimedOut`
        when none are)."""
        left = (deltas.deadline or 0.0) - self._clock()
        if left <= 0:
            raise self._timed_out()
        return left

    def _timed_out(self) -> ReplyTimedOut:
        limit = self.config.reply_timeout
        return ReplyTimedOut(f"no complete answer within brain.reply_timeout ({limit:g}s)")

    async def _whole(self, params: dict[str, Any], timeout: float) -> Any:
        """One attempt of a call not streamed, within ``timeout`` seconds as a whole: the
        SDK's timeout is per read, and a server sending its answer a byte at a time held
        a note, a title or the summary inside an owner's reply for ever (before session
        40). An answer that is no ``Message`` (a proxy's or a captive portal's page sent
        with 200, which the SDK hands back as a string) raises :class:`StreamBroken`:
        retried as an outage, it was read as a message and failed with AttributeError."""
        message = await _within(self.client.messages.create(**params, timeout=timeout), timeout)
        if not isinstance(message, anthropic.types.Message):
            shown = str(message)[:80].replace("\n", " ")
            raise StreamBroken(f"the answer was no message ({type(message).__name__}: {shown})")
        return message


async def _within(call: Awaitable[Any], timeout: float) -> Any:
    """``call`` (a request), abandoned as :class:`StreamStalled` past ``timeout`` seconds."""
    try:
        return await asyncio.wait_for(call, timeout)
    except TimeoutError:
        raise StreamStalled(f"no complete answer in {timeout:g}s") from None


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
            # the API takes an object only: a call given anything else (answered with an
            # error, bot.brain.tool_calls.execute) goes back with none, not as a 400
            tool_input = b.input if isinstance(b.input, dict) else {}
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": tool_input})
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


def error_type(exc: anthropic.APIStatusError) -> str | None:
    """The API's own error type from the response body (``not_found_error``), if any."""
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


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
    return STREAM_ERROR_STATUS.get(str(error_type(exc)), 500)


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
        foreign = foreign_excerpt(exc)  # a proxy's page: its words, not its HTML
        if foreign is not None:
            return f"{_status(exc)} (not the API's answer) {foreign}"
        return f"{_status(exc)} {error_message(exc)}"
    if isinstance(exc, (StreamStalled, StreamBroken, UnreadableAnswer)):  # our own words
        return f"{type(exc).__name__} ({exc})"
    return type(exc).__name__
