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

A secret is also masked in the forms a protocol gives it (:func:`encoded_forms`): base64
(SMTP ``AUTH LOGIN`` sends the password so; ``AUTH PLAIN`` sends ``\\0user\\0password``
and HTTP Basic ``user:password`` base64-encoded, an encoding in which the password's
characters depend on where it starts: every alignment is masked) and percent-encoded (a
URL). Before session 41 only the value as written was: an SMTP library's debug output or
an error quoting the exchange showed the mail password to anyone who decodes base64. The
forms are made once, when the values are set: the filter runs on every log line.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_plus

if TYPE_CHECKING:
    from bot.config import AppConfig

MASK = "***"

# A shorter value is not masked: every "abc" in the log replaced would garble it while
# hiding next to nothing (a secret that short is guessed anyway).
MIN_LENGTH = 4
# The shortest base64 run masked where a secret sits inside a longer encoded string
# (:func:`encoded_forms`): a shorter run is a few random letters that ordinary text
# holds by chance, and the secret it hides is that short.
MIN_ENCODED = 8
_URLSAFE = str.maketrans("+/", "-_")

_Trie = dict[str, "_Trie"]  # a character to the words' rest ("": a word ends here)


def encoded_forms(value: str) -> list[str]:
    """``value`` as base64 (standard and URL-safe) and percent-encoded. Base64 codes 3
    bytes as 4 characters, so a value inside a longer encoded string (``\\0user\\0pass``)
    is coded differently for each of the 3 byte offsets it may start at: for each, the
    characters that depend on the value's bytes alone (at least :data:`MIN_ENCODED`;
    the one or two at its edges mix in its neighbours' bits and are left)."""
    raw = value.encode()
    forms = {base64.b64encode(raw).decode().rstrip("=")}
    for offset in range(3):
        coded = base64.b64encode(b"\0" * offset + raw).decode()
        core = coded[(8 * offset + 5) // 6 : 8 * (offset + len(raw)) // 6]
        if len(core) >= MIN_ENCODED:
            forms.add(core)
    forms |= {form.translate(_URLSAFE) for form in forms}
    forms |= {quote(value, safe=""), quote_plus(value, safe="")}
    forms.discard(value)
    return sorted(forms)


def trie_pattern(words: Iterable[str]) -> str:
    """A regular expression matching any of ``words``, the longest of those starting at
    a place (a token's secret part is also a part of the whole token), written as their
    trie: a list of alternatives was tried one by one at every character of every log
    line, and each secret brings a dozen encoded forms (session 41)."""
    root: _Trie = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def alternatives(node: _Trie) -> str:
        branches = []
        for char, child in node.items():
            if not char:
                continue
            run = [char]
            while len(child) == 1 and "" not in child:  # no recursion along a chain
                char, child = next(iter(child.items()))
                run.append(char)
            branches.append(re.escape("".join(run)) + alternatives(child))
        body = "|".join(branches)
        if "" in node and branches:
            return f"(?:{body})?"  # greedy: the longer word first
        return body if len(branches) <= 1 else f"(?:{body})"

    return alternatives(root)


class Secrets:
    """The values to mask; empty until :meth:`use` (then :meth:`mask` changes nothing)."""

    def __init__(self) -> None:
        self._pattern: re.Pattern[str] | None = None
        self.values: frozenset[str] = frozenset()

    def use(self, values: Iterable[str | None]) -> None:
        """Mask ``values`` from now on, and their :func:`encoded_forms` (those shorter
        than :data:`MIN_LENGTH` excepted)."""
        kept = frozenset(v for v in values if v and len(v) >= MIN_LENGTH)
        self.values = kept
        forms = set(kept).union(*(encoded_forms(v) for v in kept))
        self._pattern = re.compile(trie_pattern(forms)) if forms else None

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


def login_forms(user: str | None, password: str | None) -> list[str]:
    """What a login sends, encoded (:func:`encoded_forms` masks them whole, the user
    too): SMTP and IMAP ``AUTH PLAIN``'s ``\\0user\\0password`` (or with the user as the
    authorisation identity too) and HTTP Basic's ``user:password``."""
    if not user or not password:
        return []
    return [f"\0{user}\0{password}", f"{user}\0{user}\0{password}", f"{user}:{password}"]


def config_secrets(config: AppConfig) -> list[str]:
    """The secrets ``config`` holds (from its file or the environment), and the mail
    password's logins (:func:`login_forms`) as the mail servers get them."""
    email = config.channels.email
    found = token_forms(config.channels.telegram.token)
    found += [v for v in (config.brain.api_key, email.password) if v]
    for user in dict.fromkeys((email.smtp.username, email.imap.username, email.address)):
        found += login_forms(user, email.password)
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
