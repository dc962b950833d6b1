"""What is wrong with a configuration, as ``(dotted.key, message)`` pairs.

Two kinds, both errors (``check-config`` exits 78 on either): pydantic's validation
errors put in the owner's terms (:func:`validation_problem`), and problems between values
that are each valid alone (:func:`consistency_problems`: a channel enabled without its
secret, an alias that names no model). :class:`bot.config.ConfigError` carries them;
what the daemon accepts but the owner may not expect is :mod:`bot.config.checks`.
"""

from __future__ import annotations

import difflib
import re
import ssl
import typing
from collections.abc import Iterator, Sequence
from typing import Any

from bot.config.model import AppConfig


class ConfigError(Exception):
    """Invalid configuration; ``key`` is the dotted path of the offending setting.

    ``more``: further ``(key, message)`` problems found in the same pass, so that one
    ``check-config`` names every wrong key of a file instead of one per run."""

    def __init__(self, key: str, message: str, more: Sequence[tuple[str, str]] = ()) -> None:
        self.key = key
        self.message = message
        self.problems = [(key, message), *more]
        super().__init__("; ".join(self.lines()))

    def lines(self) -> list[str]:
        """One ``dotted.key: what is wrong`` per problem."""
        return [f"{key}: {message}" if key else message for key, message in self.problems]


# A numeric user id, or an @username: what a Telegram sender can be matched by.
_TELEGRAM_IDENTITY = re.compile(r"\+?\d+|@\w{1,32}")


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _section_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the section at ``loc`` accepts (``("channels", "web")``), [] when ``loc``
    is no section (a mapping of the owner's own keys, a list)."""
    model: Any = AppConfig
    for part in loc:
        if isinstance(part, int):  # an item of a list of sections (channels.telegram.groups)
            continue  # (the list's section, unwrapped below with its field)
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
        # a list of sections, or one that may be left out (``X | None``): its own keys
        model = next((a for a in typing.get_args(model) if hasattr(a, "model_fields")), model)
    return list(getattr(model, "model_fields", {}))


def validation_problem(error: Any) -> tuple[str, str]:
    """``(dotted.key, message)`` for one pydantic error. A key the section does not have
    was "Extra inputs are not permitted", which did not say the key itself is wrong, nor
    which one was meant."""
    loc = tuple(error["loc"])
    if error.get("input", ...) is None and error["type"] in ("model_type", "dict_type") and loc:
        # A section whose every key is commented out reads as null in YAML: it was
        # pydantic's "Input should be a valid dictionary or instance of OwnerConfig"
        # (before session 42), which named a class, not what to do.
        return _dotted(loc), (
            f"the section is empty (YAML reads `{loc[-1]}:` with nothing under it, e.g. "
            f"every key commented out, as null): give it a key, or remove the `{loc[-1]}:` "
            "line to take the defaults"
        )
    if error["type"] != "extra_forbidden" or not loc:
        # a validator's own message without pydantic's "Value error, " in front of it
        # ("owner.timezone: Value error, unknown time zone 'Mars/Olympus'")
        message = str(error["msg"])
        if error["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        return _dotted(loc), message
    keys = _section_keys(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return _dotted(loc), f"unknown key{hint}; config.example.yaml lists every key"


def _check_telegram_identities(cfg: AppConfig) -> Iterator[tuple[str, str]]:
    owner = cfg.owner.identities.get("telegram", [])
    contacts = cfg.trust.contacts.get("telegram", {})
    named = [(f"owner.identities.telegram.{i}", v) for i, v in enumerate(owner)]
    named += [(f"trust.contacts.telegram.{v}", v) for v in contacts]
    for key, identity in named:
        value = identity.strip()
        if not _TELEGRAM_IDENTITY.fullmatch(value):
            hint = f" (did you mean '@{value}'?)" if re.fullmatch(r"\w{1,32}", value) else ""
            yield (
                key,
                f"{identity!r} is neither a numeric user id nor an @username, so no one "
                f"would match it{hint}",
            )


def ca_file_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a ``tls_ca_file`` (it cannot be read, or holds no
    certificate); None when it loads. The channel's own TLS context loads it the same
    way (:func:`ssl.create_default_context`), so what passes here passes there."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError as exc:  # before OSError, of which it is a kind
        return f"{path} holds no PEM certificate the TLS library can read ({exc.reason or exc})"
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    return None


def _check_ca_files(cfg: AppConfig) -> Iterator[tuple[str, str]]:
    """A ``tls_ca_file`` the mail channel cannot load: before session 41 check-config
    said OK, and the daemon logged "IMAP session ended (FileNotFoundError ...);
    reconnecting" for good, naming neither the key nor the file (and SMTP retried
    every reply the same way)."""
    mail = cfg.channels.email
    for name, server in (("imap", mail.imap), ("smtp", mail.smtp)):
        if server.tls_ca_file and server.security != "none":
            if problem := ca_file_problem(server.tls_ca_file):
                yield (f"channels.email.{name}.tls_ca_file", problem)


def consistency_problems(cfg: AppConfig, secrets: bool = True) -> Iterator[tuple[str, str]]:
    """Every ``(dotted.key, message)`` problem between valid values, in order."""
    yield from _check_telegram_identities(cfg)
    tg = cfg.channels.telegram
    if secrets and tg.enabled and not tg.token:
        yield (
            "channels.telegram.token",
            "required when Telegram is enabled (or TELEGRAM_BOT_TOKEN)",
        )
    if tg.enabled and tg.token and ":" not in tg.token:
        yield ("channels.telegram.token", "does not look like a bot token (id:secret)")
    mail = cfg.channels.email
    if mail.enabled:
        if not mail.address or "@" not in mail.address:
            yield ("channels.email.address", "a mailbox address is required")
        if secrets and not mail.password:
            yield ("channels.email.password", "required (or EMAIL_PASSWORD)")
        if secrets:  # the daemon's: the reading commands (secrets=False) never use it
            yield from _check_ca_files(cfg)
    if secrets and cfg.brain.provider == "anthropic" and not cfg.brain.api_key:
        yield ("brain.api_key", "brain.provider is anthropic but no ANTHROPIC_API_KEY")
    if cfg.models.default not in cfg.models.aliases:
        yield ("models.default", f"{cfg.models.default!r} is not in models.aliases")
    for alias in ("opus", "sonnet", "haiku"):
        if alias not in cfg.models.aliases:
            yield (f"models.aliases.{alias}", "missing")
    for key in ("abbreviation_model", "naming_model"):
        # a typo was sent as the model id: every call refused (404), offline notes for good
        alias = getattr(cfg.conversations, key)
        if alias not in cfg.models.aliases:
            yield (f"conversations.{key}", f"{alias!r} is not in models.aliases")
    esc = cfg.trust.escalation_channel
    if esc and esc not in ("web", "telegram", "email"):
        yield ("trust.escalation_channel", f"unknown channel {esc!r}")
    elif esc and esc != "web" and not getattr(cfg.channels, esc).enabled:
        yield ("trust.escalation_channel", f"channel {esc!r} is not enabled")
    channels = {*type(cfg.channels).model_fields, "test"}  # every configurable channel
    for channel in cfg.owner.identities:
        # a misspelt channel ("telgram") matched no one: the owner's own messages were
        # handled as a stranger's, and check-config said OK
        if channel not in channels:
            yield (f"owner.identities.{channel}", "unknown channel")
    for channel, contacts in cfg.trust.contacts.items():
        if channel not in channels:
            yield (f"trust.contacts.{channel}", "unknown channel")
        del contacts
