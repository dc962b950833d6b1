"""Typed config sections of the channels (``channels.web``, ``channels.telegram``,
``channels.email``). Their adapters live in ``channels/``; the schema lives here so that
``check-config`` validates everything without importing any transport library."""

from __future__ import annotations

import os
import re
import types
import typing
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)


def _blank_is_none(value: object) -> object:
    """Text trimmed, and left out when nothing remains: a secret written as ``"  "`` (or
    with the newline an editor adds) was taken as given, so ``api_key: " "`` chose the
    Anthropic brain and every reply failed with 401 instead of the labelled offline one,
    and ``password: " "`` passed check-config."""
    if isinstance(value, str):
        return value.strip() or None
    return value


# A secret or a path that may be left out (and may come from the environment).
OptionalText = Annotated[str | None, BeforeValidator(_blank_is_none)]


def _http_url(value: str | None) -> str | None:
    """An http(s) URL with a host and, if given, a numeric port: "not a url", "ftp://x"
    or "http://localhost:abc" passed check-config, and the brain then answered every
    message "I can't reach the language model", a config error read as an outage."""
    if value is None:
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a port that is no number)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    return value


def _home_expanded(value: str | None) -> str | None:
    return None if value is None else os.path.expanduser(value)


# A file that may be left out, a leading ~ the home directory (as data_dir's).
OptionalFile = Annotated[
    str | None, BeforeValidator(_blank_is_none), AfterValidator(_home_expanded)
]

# A server's address that may be left out (and may come from the environment).
OptionalUrl = Annotated[str | None, BeforeValidator(_blank_is_none), AfterValidator(_http_url)]


def _number_only(annotation: Any) -> bool:
    """True for a number that is no bool: ``int``, ``float``, ``float | None``."""
    if typing.get_origin(annotation) is Annotated:  # Annotated[float, Field(ge=0)]
        return _number_only(typing.get_args(annotation)[0])
    if annotation in (int, float):
        return True
    args = typing.get_args(annotation)
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return union and bool not in args and any(_number_only(a) for a in args)


def _bool_in(value: Any, annotation: Any) -> bool:
    """True when ``value`` holds a YAML true/false where ``annotation`` wants a number
    (itself, or a value of a ``dict[str, float]`` such as ``brain.debounce_seconds``)."""
    if isinstance(value, bool):
        return _number_only(annotation)
    if isinstance(value, dict) and typing.get_origin(annotation) is dict:
        inner = typing.get_args(annotation)[1]
        return any(_bool_in(v, inner) for v in value.values())
    return False


# Larger than any count, size or limit the config holds (the largest defaults are in
# the tens of thousands), and far inside SQLite's 64-bit integers.
INT_CEILING = 1_000_000_000


class _Section(BaseModel):
    # No .inf/.nan: YAML's ".inf" passed every bound ("gt=0") and the daemon then failed
    # at start (a timeout in seconds turned into an integer), far from the key.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads true as 1 and false as 0: ``port: true`` (``enabled: true``
        one line off) passed check-config as port 1, ``request_timeout: yes`` as one
        second."""
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _bool_in(value, field.annotation):
            raise ValueError("a number is needed here, not true/false")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _no_huge_integers(cls, value: Any) -> Any:
        """A count, a size or a limit past :data:`INT_CEILING` is a typo: such a number
        (``renaming_interval_turns: 99999999999999999999``) passed check-config, then
        stopped the daemon's start with "Python int too large to convert to SQLite
        INTEGER" (exit 70, restarted by systemd into the same error)."""
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_CEILING:
            raise ValueError(f"at most {INT_CEILING:,} here")
        return value


class WebChannelConfig(_Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=4321, ge=0, le=65535)
    # Origins allowed to open the WebSocket besides the server's own address.
    allowed_origins: list[str] = Field(default_factory=list)
    session_ttl_hours: int = Field(default=24 * 30, ge=1)
    login_attempts_per_minute: int = Field(default=5, ge=1)


class TelegramGroupConfig(_Section):
    id: str
    title: str | None = None
    respond: Literal["always", "mention"] = "mention"

    @field_validator("id", mode="before")
    @classmethod
    def _chat_id(cls, value: object) -> object:
        # YAML reads an unquoted -100... as a number; a title matches no chat at all.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str) and not re.fullmatch(r"-?\d+|@\w{1,32}", value.strip()):
            raise ValueError(f"{value!r} is not a chat id (-100...) nor a public @name")
        return value.strip() if isinstance(value, str) else value


class TelegramChannelConfig(_Section):
    enabled: bool = False
    token: OptionalText = None  # or TELEGRAM_BOT_TOKEN
    api_base: OptionalUrl = None  # a Bot API server other than api.telegram.org (tests)
    mode: Literal["polling", "webhook"] = "polling"
    polling_timeout: int = Field(default=30, ge=0, le=60)
    groups: list[TelegramGroupConfig] = Field(default_factory=list)
    send_retries: int = Field(default=8, ge=0)
    # Inside one send: network/5xx retries back off exponentially (with jitter) from
    # base to cap seconds; a 429 asking to wait longer than max_retry_after seconds is
    # handed back to the outbox, where only that chat waits (the sender's own wait holds
    # every chat: a group's 40 s flood wait delayed the owner's replies with it).
    retry_backoff_base: float = Field(default=0.5, gt=0)
    retry_backoff_cap: float = Field(default=30.0, gt=0)
    max_retry_after: float = Field(default=5.0, ge=0)
    # Long-polling reconnect backoff cap (seconds), reset after a successful poll.
    reconnect_backoff_cap: float = Field(default=60.0, gt=0)
    # The typing indicator is refreshed every ~4.5 s until the reply, at most this long.
    typing_max_seconds: float = Field(default=120.0, ge=0)


class ImapConfig(_Section):
    host: str = "localhost"
    port: int = Field(default=993, ge=1, le=65535)
    security: Literal["ssl", "starttls", "none"] = "ssl"
    username: str | None = None  # defaults to channels.email.address
    folder: str = "INBOX"
    processed_folder: str | None = None  # move here after recording instead of \Seen
    idle: bool = True
    poll_interval: float = Field(default=60.0, gt=0)  # also the longest IDLE before re-issuing
    timeout: float = Field(default=30.0, gt=0)  # per command and for the first connection
    reconnect_initial: float = Field(default=1.0, gt=0)  # backoff: doubles, with jitter
    # also the first pause before retrying a mail the server would not hand over
    reconnect_max: float = Field(default=300.0, gt=0)
    tls_ca_file: OptionalFile = None  # extra CA bundle to trust (a self-signed server)
    # First start (no cursor yet): "unseen" handles the unread mail already there,
    # "none" starts with the next mail to arrive.
    initial_sync: Literal["unseen", "none"] = "unseen"


class SmtpConfig(_Section):
    host: str = "localhost"
    port: int = Field(default=465, ge=1, le=65535)
    security: Literal["ssl", "starttls", "none"] = "ssl"
    username: str | None = None
    auth: bool = True  # false: send without logging in (a local relay that needs none)
    tls_ca_file: OptionalFile = None  # extra CA bundle to trust (a self-signed server)
    timeout: float = Field(default=30.0, gt=0)


AuthMethod = Literal["dkim", "spf", "dmarc"]


def _default_auth_methods() -> list[AuthMethod]:
    return ["dkim", "spf"]


class EmailChannelConfig(_Section):
    enabled: bool = False
    address: str | None = None
    display_name: str = "Assistant"
    password: OptionalText = None  # or EMAIL_PASSWORD
    imap: ImapConfig = Field(default_factory=ImapConfig)
    smtp: SmtpConfig = Field(default_factory=SmtpConfig)
    reply_all: bool = False
    # Authentication-Results checks a From address must pass to count as the owner.
    require_auth: list[AuthMethod] = Field(default_factory=_default_auth_methods)
    require_all: bool = False  # False: any one listed method passing is enough
    auth_serv_id: str | None = None  # only trust Authentication-Results from this host
    # A DKIM/SPF pass counts only for the From domain (DMARC-style relaxed alignment).
    auth_require_alignment: bool = True
    subject_thread_window_days: int = Field(default=14, ge=0)


class LoopbackChannelConfig(_Section):
    """A local HTTP ingress (127.0.0.1 only) for scripts, benchmarks and end-to-end tests."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)  # 0: pick a free port, written to data_dir
    # loopback-sent.jsonl past this size is cut to its latest lines (half of it, at least
    # the latest 1,024); 0: never cut (a reader that counts every send of a long run).
    sent_max_bytes: int = Field(default=16 * 1024 * 1024, ge=0)


class ChannelsConfig(_Section):
    web: WebChannelConfig = Field(default_factory=WebChannelConfig)
    telegram: TelegramChannelConfig = Field(default_factory=TelegramChannelConfig)
    email: EmailChannelConfig = Field(default_factory=EmailChannelConfig)
    loopback: LoopbackChannelConfig = Field(default_factory=LoopbackChannelConfig)

    def enabled(self) -> list[str]:
        """The names of the channels enabled, in the order they are declared."""
        return [name for name in type(self).model_fields if getattr(self, name).enabled]
