"""Answers aiogram cannot read, told on one line.

Telegram, or a proxy in front of it, sometimes answers with something that is not the Bot
API's JSON: an HTML "502 Bad Gateway" page, a load balancer's notice. aiogram raises
``ClientDecodeError``, whose text spans three lines and ends with the whole body; every
log line that names the error ("Telegram polling failed (...)", a send's failure in the
outbox) then ran over a page of HTML. The request middleware below raises the same error
as :class:`ShortDecodeError` instead: a ``ClientDecodeError`` still (what it carries is
kept, :func:`channels.telegram.polling.salvage` reads ``data``), told on one line with the
body cut to an escaped excerpt.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from aiogram.client.session.middlewares.base import BaseRequestMiddleware
from aiogram.exceptions import ClientDecodeError

if TYPE_CHECKING:
    from aiogram import Bot
    from aiogram.client.session.middlewares.base import NextRequestMiddlewareType
    from aiogram.methods.base import Response, TelegramMethod, TelegramType

EXCERPT_CHARS = 200  # of an unreadable answer, in the log
# Line breaks and other controls (C0, DEL, C1, the Unicode line separators): escaped, so
# that an excerpt stays on its log line and writes no terminal sequence.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    return _NAMED.get(match[0]) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line: its first ``limit`` characters with controls escaped
    (``\\n``, ``\\x1b``), and how many more there were."""
    shown = _CONTROLS.sub(_escaped, text[:limit])
    more = len(text) - limit
    return f"{shown}… ({more} more characters)" if more > 0 else shown


class ShortDecodeError(ClientDecodeError):
    """``ClientDecodeError`` whose text is one line: the cause and a body excerpt."""

    def __str__(self) -> str:
        cause = f"{type(self.original).__name__}: {excerpt(str(self.original))}"
        return f"{self.message} ({cause}); the answer began: {excerpt(str(self.data))}"


class ShortDecodeErrors(BaseRequestMiddleware):
    """Request middleware: a ``ClientDecodeError`` raised again as :class:`ShortDecodeError`."""

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        try:
            return await make_request(bot, method)
        except ShortDecodeError:
            raise
        except ClientDecodeError as exc:
            # Chained to the cause, not to aiogram's error: a traceback logged of it
            # would print the whole body again.
            raise ShortDecodeError(exc.message, exc.original, exc.data) from exc.original
