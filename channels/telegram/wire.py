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
from typing import TYPE_CHECKING

from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.exceptions import ClientDecodeError, DetailedAiogramError
from aiogram.methods import TelegramMethod
from aiogram.methods.base import TelegramType
from aiohttp import (
    ClientSession,
    TraceConfig,
    TraceRequestHeadersSentParams,
    TraceRequestStartParams,
)

from bot.redaction import MASK, token_forms

if TYPE_CHECKING:
    from aiogram import Bot


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
    """aiogram's session, its requests traced for :func:`watch`, its errors without the
    bot token (:func:`without_token`)."""

    async def create_session(self) -> ClientSession:
        session = await super().create_session()
        if _TRACE not in session.trace_configs:
            # aiogram makes the ClientSession itself; its trace list is read per request
            session.trace_configs.append(_TRACE)
        return session

    async def make_request(
        self, bot: Bot, method: TelegramMethod[TelegramType], timeout: int | None = None
    ) -> TelegramType:
        try:
            return await super().make_request(bot, method, timeout)
        except Exception as exc:
            without_token(exc, bot.token)
            raise


_TRACE = _trace()


def _masked(text: str, token: str) -> str:
    for form in token_forms(token):  # the whole token first, then its secret part
        text = text.replace(form, MASK)
    return text


def _names(exc: BaseException | None, token: str, depth: int = 0) -> bool:
    """Whether ``exc``, or an exception it was raised from, says the token."""
    forms = token_forms(token)
    if exc is None or depth > 10 or not forms:
        return False
    secret = forms[-1]
    if secret in str(exc) or secret in repr(exc.args):
        return True
    return _names(exc.__cause__ or exc.__context__, token, depth + 1)


def without_token(exc: BaseException, token: str) -> None:
    """``exc`` with the bot token taken out of its text, in place (its type kept: the
    retries tell errors apart by it), and cut from the exceptions it was raised from
    when they say the token (a traceback prints them).

    aiohttp's error text names the request's URL, ``.../bot<token>/<method>`` (an
    ``api_base`` that answers no HTTP, "Bad status line"; a proxy's redirect loop), and
    aiogram copies it into ``TelegramNetworkError.message``: before session 40 the token
    was in the log's WARNINGs and tracebacks, in ``outbox.last_error`` and in the
    owner's alert. A connect that failed (``ClientConnectorError``, read by
    :func:`channels.telegram.retries.unconfirmed`) names the host only, and is kept."""
    if not _names(exc, token):
        return
    if isinstance(exc, DetailedAiogramError):
        exc.message = _masked(exc.message, token)
    if isinstance(exc, ClientDecodeError):  # a proxy's error page may quote the URL
        exc.message = _masked(exc.message, token)
        if isinstance(exc.data, str):
            exc.data = _masked(exc.data, token)
        if _names(exc.original, token):
            exc.original = ValueError(_masked(str(exc.original), token))
    exc.args = tuple(_masked(a, token) if isinstance(a, str) else a for a in exc.args)
    if _names(exc.__cause__ or exc.__context__, token):
        exc.__cause__ = exc.__context__ = None
        exc.__suppress_context__ = True


def never_sent(mark: Written | None) -> bool | None:
    """True: the request failed before it was written; False: it was written; None:
    unknown (the session is not traced)."""
    if mark is None or not mark.traced:
        return None
    return not mark.sent
