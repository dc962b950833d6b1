"""Whether a failed Bot API request went out at all.

A send that failed after its request was written may have reached Telegram (only the
answer was lost): sent again, it may be a copy. One that failed before (no connection
made: refused, a name that does not resolve, a connect that hangs while packets are
dropped) cannot have arrived, and is retried freely. aiogram hands aiohttp one total
timeout, so a connect that hangs ends in the same plain timeout as an answer that never
came; before, it was read as "may have arrived" and the reply given up on after three
(about three minutes of outage). aiohttp's request tracing tells the two apart: a
:class:`Written` mark is set in the calling task's context, and the trace's
``on_request_headers_sent`` sets it once the request is on its way.
"""

from __future__ import annotations

from contextvars import ContextVar
from types import SimpleNamespace

from aiogram.client.session.aiohttp import AiohttpSession
from aiohttp import (
    ClientSession,
    TraceConfig,
    TraceRequestHeadersSentParams,
    TraceRequestStartParams,
)


class Written:
    """One request's marks: ``traced`` once aiohttp began it (tracing is on), ``sent``
    once its headers were written to the connection."""

    __slots__ = ("sent", "traced")

    def __init__(self) -> None:
        self.traced = False
        self.sent = False


_CURRENT: ContextVar[Written | None] = ContextVar("telegram_request_written", default=None)


def watch() -> Written:
    """A fresh mark for the request the calling task makes next."""
    mark = Written()
    _CURRENT.set(mark)
    return mark


async def _started(
    session: ClientSession, context: SimpleNamespace, params: TraceRequestStartParams
) -> None:
    mark = _CURRENT.get()
    if mark is not None:
        mark.traced = True


async def _headers_sent(
    session: ClientSession, context: SimpleNamespace, params: TraceRequestHeadersSentParams
) -> None:
    mark = _CURRENT.get()
    if mark is not None:
        mark.sent = True


def _trace() -> TraceConfig:
    trace = TraceConfig()
    trace.on_request_start.append(_started)
    trace.on_request_headers_sent.append(_headers_sent)
    trace.freeze()
    return trace


class TracedSession(AiohttpSession):
    """aiogram's session, its requests traced for :func:`watch`."""

    async def create_session(self) -> ClientSession:
        session = await super().create_session()
        if _TRACE not in session.trace_configs:
            # aiogram makes the ClientSession itself; its trace list is read per request
            session.trace_configs.append(_TRACE)
        return session


_TRACE = _trace()


def never_sent(mark: Written | None) -> bool | None:
    """True: the request failed before it was written; False: it was written; None:
    unknown (the session is not traced)."""
    if mark is None or not mark.traced:
        return None
    return not mark.sent
