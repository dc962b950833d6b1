"""Loading and validating configuration.

Order of precedence: the YAML file (or the embedded default when there is none), then
secrets and overrides from the environment. Errors name the dotted key that is wrong,
and ``my-agent check-config`` turns them into exit status 78 (EX_CONFIG).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bot.config.model import AppConfig

__all__ = ["AppConfig", "ConfigError", "default_config_path", "load_config"]

EX_CONFIG = 78

# Values in config.example.yaml that a user must replace. Any string still containing
# one of these markers is rejected, so a copied example never runs half-configured.
PLACEHOLDER_MARKERS = ("CHANGE_ME", "REPLACE_ME", "<your", "example.invalid")

# Environment variable -> dotted key. Secrets never need to be in the file.
ENV_OVERRIDES = {
    "ANTHROPIC_API_KEY": "brain.api_key",
    "ANTHROPIC_BASE_URL": "brain.base_url",
    "TELEGRAM_BOT_TOKEN": "channels.telegram.token",
    "EMAIL_PASSWORD": "channels.email.password",
    "MY_AGENT_EMBEDDING_MODEL_PATH": "embedding.model_path",
    "MY_AGENT_DATA_DIR": "data_dir",
}
# The secrets among them: the config file is readable by every user (mode 0644), the
# environment file is not (0600), so a secret written in the file is warned about.
SECRET_VARS = {
    "brain.api_key": "ANTHROPIC_API_KEY",
    "channels.telegram.token": "TELEGRAM_BOT_TOKEN",
    "channels.email.password": "EMAIL_PASSWORD",
}


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


def default_config_path() -> Path | None:
    """The config file used when none is given: $MY_AGENT_CONFIG, then .my_agent/config.yaml."""
    env = os.environ.get("MY_AGENT_CONFIG")
    if env:
        return Path(env)
    candidate = Path(".my_agent") / "config.yaml"
    return candidate if candidate.is_file() else None


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _is_placeholder(text: str) -> bool:
    return any(m.lower() in text.lower() for m in PLACEHOLDER_MARKERS)


def _find_placeholders(node: Any, prefix: str = "") -> list[str]:
    """The dotted keys of every value, or key of the owner's own (``trust.contacts``'
    addresses), still holding a placeholder, in file order."""
    if isinstance(node, Mapping):
        return [
            found
            for key, value in node.items()
            for found in (
                [f"{prefix}.{key}" if prefix else str(key)]
                if isinstance(key, str) and _is_placeholder(key)
                else _find_placeholders(value, f"{prefix}.{key}" if prefix else str(key))
            )
        ]
    if isinstance(node, list):
        return [
            found
            for i, value in enumerate(node)
            for found in _find_placeholders(value, f"{prefix}.{i}")
        ]
    if isinstance(node, str) and _is_placeholder(node):
        return [prefix]
    return []


def _duplicate_key(
    node: yaml.Node | None,
    prefix: str = "",
    seen: set[int] | None = None,
    ancestors: frozenset[int] = frozenset(),
) -> str | None:
    """``dotted.key: what is wrong`` for the first mapping key given twice (with both
    lines), or an alias inside its own anchor; None when there is neither.

    YAML loaders keep the last value silently: a second ``channels:`` block pasted below
    the first switched off every channel the first one enabled, and check-config said OK.
    A self-containing alias (``a: &x [*x]``) loads as a cyclic value, on which validation
    ended in a RecursionError: exit 1, which systemd restarts forever, not 78.
    """
    if id(node) in ancestors:
        return f"{prefix}: a YAML alias inside its own anchor (an endless value)"
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias of a node already walked
        return None
    seen.add(id(node))
    children: list[tuple[str, yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else ""
            dotted = f"{prefix}.{key}" if prefix else key
            line = key_node.start_mark.line + 1
            if key and key != "<<" and key in lines:
                return f"{dotted}: given twice (lines {lines[key]} and {line}); only one may stay"
            lines[key] = line
            children.append((dotted, value_node))
    elif isinstance(node, yaml.SequenceNode):
        children = [(f"{prefix}.{i}", item) for i, item in enumerate(node.value)]
    within = ancestors | {id(node)}
    for dotted, child in children:
        found = _duplicate_key(child, dotted, seen, within)
        if found:
            return found
    return None


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


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, on one line: `` at line 2, column 1: expected the node content,
    but found '<stream end>'``. ``str(exc)`` spread over four lines (the parser's
    context, a copy of the line and a caret), though check-config promises one line per
    error."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return f"{where}: {' '.join(str(problem).split())}"


def _problem(error: Any) -> tuple[str, str]:
    """``(dotted.key, message)`` for one pydantic error. A key the section does not have
    was "Extra inputs are not permitted", which did not say the key itself is wrong, nor
    which one was meant."""
    loc = tuple(error["loc"])
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


# A numeric user id, or an @username: what a Telegram sender can be matched by.
_TELEGRAM_IDENTITY = re.compile(r"\+?\d+|@\w{1,32}")


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


def _check_consistency(cfg: AppConfig, secrets: bool = True) -> Iterator[tuple[str, str]]:
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


def _secrets_written(tree: Mapping[str, Any]) -> tuple[str, ...]:
    """The dotted keys of :data:`SECRET_VARS` that hold a value in ``tree`` itself."""
    found = []
    for dotted in SECRET_VARS:
        node: Any = tree
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, str) and node.strip():
            found.append(dotted)
    return tuple(found)


def build_config(
    raw: Mapping[str, Any] | None, env: Mapping[str, str] | None = None, *, secrets: bool = True
) -> AppConfig:
    """Validate a raw mapping (as read from YAML) plus environment overrides.

    ``secrets=False`` (commands that only read the store: ``conversations``, ``search``,
    ``status``, ``reindex``): the secrets the daemon needs (API key, bot token, mail
    password) may be absent; they live in the service's environment file, which an
    operator's shell does not have."""
    if not isinstance(raw, Mapping | None):
        raise ConfigError("", "the configuration must be a mapping at top level")
    # A deep copy: environment overrides (secrets) must not be written into the caller's
    # mapping, which may be reused or dumped.
    tree: dict[str, Any] = copy.deepcopy(dict(raw or {}))
    # Every problem of the file at once: reported one per run, a copied example took
    # a check-config run per placeholder and per wrong key to fix.
    problems = [
        (key, "still holds a placeholder from config.example.yaml")
        for key in _find_placeholders(tree)
    ]
    written = _secrets_written(tree)  # before the environment's values are merged in
    environ = os.environ if env is None else env
    for var, dotted in ENV_OVERRIDES.items():
        # Empty or blank is unset: an EnvironmentFile line `ANTHROPIC_API_KEY= ` chose the
        # Anthropic brain with a key of one space, and `EMAIL_PASSWORD= ` passed as given.
        value = (environ.get(var) or "").strip()
        if value and _is_placeholder(value):  # an environment file copied unedited
            problems.append((dotted, f"{var} still holds a placeholder"))
        elif value:
            _set_dotted(tree, dotted, value)
    try:
        cfg = AppConfig.model_validate(tree)
    except ValidationError as exc:
        problems += [_problem(e) for e in exc.errors()]
        raise ConfigError(*problems[0], more=problems[1:]) from exc
    if problems:
        raise ConfigError(*problems[0], more=problems[1:])
    problems = list(_check_consistency(cfg, secrets))
    if problems:
        raise ConfigError(*problems[0], more=problems[1:])
    cfg._secrets_in_file = written
    return cfg


def load_config(
    path: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    secrets: bool = True,
) -> AppConfig:
    """Load ``path`` (or the default location, or the embedded default) and validate it."""
    chosen = Path(path) if path is not None else default_config_path()
    raw: Any = None
    if chosen is not None:
        try:
            text = chosen.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ConfigError("", f"config file not found: {chosen}") from exc
        except OSError as exc:
            raise ConfigError("", f"cannot read config file {chosen}: {exc}") from exc
        except UnicodeDecodeError as exc:  # saved in Latin-1, or not a text file at all
            raise ConfigError("", f"{chosen} is not UTF-8 text: {exc}") from exc
        if not text.strip():
            # Zero bytes (a full disk, an editor that died, `>` for `>>`) ran the embedded
            # default: every configured channel silently off. A file of comments only, or
            # `{}`, is written on purpose and still means the defaults.
            raise ConfigError(
                "",
                f"{chosen} is empty (write `{{}}` in it to run on the built-in defaults)",
            )
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError("", f"{chosen} is not valid YAML{_yaml_problem(exc)}") from exc
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError("", f"{chosen} must hold a mapping at top level")
        duplicate = _duplicate_key(yaml.compose(text, Loader=yaml.SafeLoader))
        if duplicate:
            key, _, message = duplicate.partition(": ")
            raise ConfigError(key, message)
    return build_config(raw, env, secrets=secrets)
