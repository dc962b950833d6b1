"""Secrets kept out of the log and the store: the Telegram bot token, the Anthropic API
key, the mail password.

A library's error text may hold one: aiohttp's names the request's URL, and a Bot API
URL holds the token (``/bot<token>/getMe``). Before session 40, an ``api_base`` that
answered something other than HTTP (a TLS port, a proxy's redirect loop) put the token
in the log's WARNINGs and tracebacks, in ``outbox.last_error`` and in the owner's alert.
The Telegram channel takes it out of its errors where they are made
(:mod:`channels.telegram.wire`); this is the second line: :class:`MaskingFilter`, on the
daemon's log handler, masks the values in every record's message and traceback, and
what is stored or sent to the owner (an outbox row's last error, an alert, a channel's
kept problem) goes through :func:`mask` first.

The values are the process's (:data:`SECRETS`): set from the configuration when the
daemon starts, and again at a reload (SIGHUP), which may bring new ones.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.config import AppConfig

MASK = "***"

# A shorter value is not masked: every "abc" in the log replaced would garble it while
# hiding next to nothing (a secret that short is guessed anyway).
MIN_LENGTH = 4


class Secrets:
    """The values to mask; empty until :meth:`use` (then :meth:`mask` changes nothing)."""

    def __init__(self) -> None:
        self._pattern: re.Pattern[str] | None = None
        self.values: frozenset[str] = frozenset()

    def use(self, values: Iterable[str | None]) -> None:
        """Mask ``values`` from now on (those shorter than :data:`MIN_LENGTH` excepted)."""
        kept = frozenset(v for v in values if v and len(v) >= MIN_LENGTH)
        self.values = kept
        # The longest first: a token's secret part is also a part of the whole token.
        ordered = sorted(kept, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def mask(self, text: str) -> str:
        """``text`` with every value replaced by :data:`MASK`."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)


SECRETS = Secrets()


def mask(text: str) -> str:
    """``text`` with the process's secrets (:data:`SECRETS`) replaced by ``***``."""
    return SECRETS.mask(text)


def token_forms(token: str | None) -> list[str]:
    """A bot token and its secret part (after ``id:``): the part alone is masked too, in
    case a URL shows the token's colon escaped (``%3A``). Neither when shorter than
    :data:`MIN_LENGTH`."""
    forms = [token, token.split(":", 1)[-1]] if token else []
    return [form for form in forms if len(form) >= MIN_LENGTH]


def config_secrets(config: AppConfig) -> list[str]:
    """The secrets ``config`` holds (from its file or the environment)."""
    found = token_forms(config.channels.telegram.token)
    found += [v for v in (config.brain.api_key, config.channels.email.password) if v]
    return found


def use_config(*configs: AppConfig) -> None:
    """Mask the secrets of ``configs`` (at a reload: the running one and the file's)."""
    SECRETS.use(value for config in configs for value in config_secrets(config))


class MaskingFilter(logging.Filter):
    """A handler's filter that masks :data:`SECRETS` in a record's message, traceback
    and stack (the record is changed: every handler after it sees it masked)."""

    def __init__(self, secrets: Secrets = SECRETS) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets.values:
            return True
        message = record.getMessage()
        masked = self.secrets.mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            # What the handler's Formatter would make of it (it keeps exc_text as is).
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.secrets.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.secrets.mask(record.stack_info)
        return True


def install(handlers: Iterable[logging.Handler]) -> None:
    """Put a :class:`MaskingFilter` on each of ``handlers`` (once)."""
    for handler in handlers:
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter())
