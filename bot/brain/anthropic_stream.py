"""Reading one streamed Messages API answer (the stream of :class:`MessagesCaller`'s
attempt, bot.brain.anthropic_api).

:class:`DeltaForwarder` forwards the text to the watcher once across retried attempts;
:func:`consume` reads a stream to its ``message_stop``, raising :class:`StreamStalled`
(only keep-alive pings for the request timeout), :class:`StreamBroken` (ended early, or
the connection dropped) or :class:`UnreadableAnswer` (the SDK could not read it), all of
which the caller retries, or :class:`ReplyTimedOut` (the reply's ``brain.reply_timeout``
is up: not retried); :func:`usage_so_far` is what a stream cancelled midway billed.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bot.brain.base import DeltaSink, Usage
from bot.brain.cost import usage_of
from bot.brain.tokens import estimate_tokens

log = logging.getLogger("my_agent.brain")


class DeltaForwarder:
    """Forwards text deltas once: retried attempts do not resend what was already sent,
    and text of consecutive tool-loop iterations is separated by a blank line.

    A retry continues what an earlier attempt sent only while it repeats it: the model
    words a retry differently, and its deltas past the length already sent, spliced
    onto the first attempt's words, showed the watcher text nobody wrote. Once they
    differ, the rest of that call is not streamed (the finished reply replaces it)."""

    def __init__(
        self, sink: DeltaSink | None, spent: Callable[[Usage], None] | None = None
    ) -> None:
        self.sink = sink
        # the usage of a streamed call cancelled before it finished (a stop): what it had
        # billed by then (bot.brain.anthropic reports it; the final message never comes)
        self.cut: Usage | None = None
        # told the usage of each attempt that failed after its message_start (retried or
        # not): billed, and never part of a final message (see :meth:`abandoned`)
        self._spent = spent
        # When the reply's streamed calls must have ended (MessagesCaller's clock): set
        # at its first call to brain.reply_timeout from then, shared by its tool rounds
        # and retries (see :class:`ReplyTimedOut`).
        self.deadline: float | None = None
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

    def abandoned(self, stream: Any) -> None:
        """The current attempt failed after it started (an error frame, a cut or stalled
        stream, a garbled event): the API billed its input (``message_start`` gives it)
        and the output so far, but only a successful attempt's message is accounted, and
        before session 41 a retried attempt's tokens were recorded nowhere (the turn,
        the conversation's cost and ``/status`` under-counted every retry)."""
        if self._spent is None or not started(stream):
            return
        self._spent(usage_so_far(stream, self._attempt))

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


def started(stream: Any) -> bool:
    """Whether ``stream`` (a :class:`~bot.brain.stream_message.StreamedMessage`) has had
    its ``message_start``, which carries the attempt's input count."""
    try:
        return stream.current_message_snapshot is not None
    except Exception:
        return False


def usage_so_far(stream: Any, streamed: str) -> Usage:
    """What a stream cancelled midway had billed: its input tokens (message_start gives
    them exactly) and its output so far: the final count only comes with message_delta,
    so at least the text streamed, estimated (:func:`~bot.brain.tokens.estimate_tokens`:
    at four characters a token, a stopped Chinese answer was billed a quarter of it)."""
    try:
        given = usage_of(stream.current_message_snapshot.usage)
    except Exception:  # cancelled before message_start: nothing known
        given = Usage()
    return replace(given, output=max(given.output, estimate_tokens(streamed)))


class StreamStalled(Exception):
    """A stream stayed open without progress (pings only) for the request timeout."""


class StreamBroken(Exception):
    """A stream ended before ``message_stop``: cut cleanly, or the connection dropped."""


class ReplyTimedOut(Exception):
    """The reply's streamed calls were not done within ``brain.reply_timeout`` (a server
    trickling a token every few seconds, never stalled, never finished: before session
    41 it held the reply, and the conversation's lock with the owner's next messages,
    for as long as it trickled). ``partial``: the text the attempt cut off had streamed
    (the reply keeps it, marked as cut off). Not retried."""

    def __init__(self, message: str, partial: str = "") -> None:
        super().__init__(message)
        self.partial = partial


class UnreadableAnswer(Exception):
    """The SDK could not read the streamed answer (a garbled event): asked again, the
    model usually answers well. Tool input that is not JSON is no longer one: the model
    gets an error result for that call (bot.brain.stream_message)."""


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


async def consume(
    stream: Any, deltas: DeltaForwarder, stall: float, limit: float | None = None
) -> None:
    """Forward a stream's text, abandoning it when nothing but keep-alive pings came for
    ``stall`` seconds. The SDK's timeout is per read and every ping resets it: a server
    that only pinged held a reply for as long as it pinged, with no notice to the owner
    and no retry (``brain.request_timeout`` is documented per request). Past ``limit``
    seconds in all (what is left of the reply's ``brain.reply_timeout``), however steady
    the stream, :class:`ReplyTimedOut` with the text streamed so far.

    A stream is complete only with its ``message_stop``: one that ends before it raises
    :class:`StreamBroken` (retried). The SDK returned such a truncated message as final
    (half a reply sent as the whole), and a connection dropped mid-stream surfaced as the
    HTTP library's own error, which is no ``anthropic`` exception and was never retried.
    An answer the SDK cannot read (a garbled event) raises :class:`UnreadableAnswer`,
    retried a few times. ``stream`` yields the raw events (bot.brain.stream_message).
    """
    events = stream.__aiter__()
    progress = time.monotonic()
    end = None if limit is None else progress + limit
    while True:
        now = time.monotonic()
        left = stall - (now - progress)
        if end is not None and end - now < left:
            if end <= now:
                raise ReplyTimedOut("the reply's time ran out mid-stream", deltas.attempt_text)
            left = end - now
        if left <= 0:
            raise StreamStalled(f"no progress in the stream for {stall:g}s")
        try:
            event = await asyncio.wait_for(events.__anext__(), left)
        except StopAsyncIteration:
            raise StreamBroken("the stream ended before message_stop") from None
        except TimeoutError:
            if end is not None and time.monotonic() >= end:
                raise ReplyTimedOut(
                    "the reply's time ran out mid-stream", deltas.attempt_text
                ) from None
            raise StreamStalled(f"no progress in the stream for {stall:g}s") from None
        except TRANSPORT_ERRORS as exc:
            raise StreamBroken(f"the stream broke: {type(exc).__name__}: {exc}") from exc
        except MALFORMED as exc:
            # Before: raised as is, never retried, and the owner got the apology and no
            # answer for a glitch that asking again mends.
            raise UnreadableAnswer(f"{type(exc).__name__}: {exc}") from exc
        if event.type == "message_stop":
            return
        if event.type != "ping":
            progress = time.monotonic()
        text = _text_delta(event)
        if text:
            await deltas.text(text)


# What reading a malformed answer raises: data that is not JSON (ValueError), and events
# that do not fit together, which the SDK's accumulation trips over: a delta for a block
# that never started (IndexError), a text_delta without its text (TypeError), an event
# without a field it reads (AttributeError, KeyError), no message_start (LookupError).
# Before session 40 only the first was asked again; the rest ended the reply in the
# apology after one request.
MALFORMED = (ValueError, LookupError, TypeError, AttributeError)


def _text_delta(event: Any) -> str | None:
    """The text of a ``text_delta`` event (None for any other event)."""
    try:
        if event.type != "content_block_delta" or event.delta.type != "text_delta":
            return None
        text = event.delta.text
    except MALFORMED as exc:
        raise UnreadableAnswer(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(text, str):
        raise UnreadableAnswer(f"a text_delta without text ({type(text).__name__})")
    return text


def final_snapshot(stream: Any) -> Any:
    """The message of a stream read to its ``message_stop`` (:func:`consume`): a stream
    that never sent ``message_start`` has none, an :class:`UnreadableAnswer`."""
    try:
        return stream.current_message_snapshot
    except MALFORMED as exc:
        raise UnreadableAnswer(f"{type(exc).__name__}: {exc}") from exc
