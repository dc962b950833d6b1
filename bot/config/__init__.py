"""Loading and validating configuration.

Order of precedence: the YAML file (or the embedded default when there is none), then
secrets and overrides from the environment. Errors name the dotted key that is wrong,
and ``my-agent check-config`` turns them into exit status 78 (EX_CONFIG).

The file itself is read by :mod:`bot.config.file`; what is wrong in a configuration is
put in words by :mod:`bot.config.problems`; the sections are :mod:`bot.config.model`.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.config.file import default_config_path, key_lines, line_of, read_config_file
from bot.config.model import AppConfig
from bot.config.problems import ConfigError, consistency_problems, validation_problem

__all__ = ["AppConfig", "ConfigError", "default_config_path", "load_config"]

EX_CONFIG = 78

# Values in config.example.yaml that a user must replace. Any string still containing
# one of these markers is rejected, so a copied example never runs half-configured.
PLACEHOLDER_MARKERS = ("CHANGE_ME", "REPLACE_ME", "<your", "example.invalid", "your-domain.example")

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


# A hint of config.example.yaml's commented keys taken as the value when uncommented:
# before session 41 "api_key: from ANTHROPIC_API_KEY (keep it out of this file)" chose
# the Anthropic brain with those words as its key (every reply a 401), and "username:
# defaults to the address" logged in as that. The example's hints are comments now;
# these catch a file copied from an older one, and the like.
_DEFAULT_HINT = re.compile(r"\s*defaults?\s+to\b", re.IGNORECASE)


def _hint_problem(text: str) -> str | None:
    """Why ``text`` reads as a hint about a value rather than the value; None if not."""
    for var in ENV_OVERRIDES:
        if re.search(rf"\b{var}\b", text):
            return (
                f"holds a hint ({text!r}), not a value: set {var} in the environment "
                "(the secrets file), or leave the key out"
            )
    if _DEFAULT_HINT.match(text):
        return f"holds a hint ({text!r}), not a value: leave the key out for that default"
    return None


def _find_hints(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted.key, problem)`` for every value that is hint text, in file order."""
    if isinstance(node, Mapping):
        return [
            found
            for key, value in node.items()
            for found in _find_hints(value, f"{prefix}.{key}" if prefix else str(key))
        ]
    if isinstance(node, list):
        return [
            found for i, value in enumerate(node) for found in _find_hints(value, f"{prefix}.{i}")
        ]
    if isinstance(node, str) and (problem := _hint_problem(node)):
        return [(prefix, problem)]
    return []


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
    problems += [found for found in _find_hints(tree) if found[0] not in dict(problems)]
    written = _secrets_written(tree)  # before the environment's values are merged in
    environ = os.environ if env is None else env
    from_env: dict[str, str] = {}  # dotted key -> the variable its value came from
    for var, dotted in ENV_OVERRIDES.items():
        # Empty or blank is unset: an EnvironmentFile line `ANTHROPIC_API_KEY= ` chose the
        # Anthropic brain with a key of one space, and `EMAIL_PASSWORD= ` passed as given.
        value = (environ.get(var) or "").strip()
        if value and _is_placeholder(value):  # an environment file copied unedited
            problems.append((dotted, f"{var} still holds a placeholder"))
        elif value:
            _set_dotted(tree, dotted, value)
            from_env[dotted] = var
    try:
        cfg = AppConfig.model_validate(tree)
    except ValidationError as exc:
        problems += [validation_problem(e) for e in exc.errors()]
        problems += _consistency_without(tree, exc.errors(), secrets, {k for k, _ in problems})
        problems = _named_by_variable(problems, from_env)
        raise ConfigError(*problems[0], more=problems[1:]) from exc
    if problems:
        raise ConfigError(*problems[0], more=problems[1:])
    problems = _named_by_variable(list(consistency_problems(cfg, secrets)), from_env)
    if problems:
        raise ConfigError(*problems[0], more=problems[1:])
    cfg._secrets_in_file = written
    return cfg


def _consistency_without(
    tree: dict[str, Any], errors: list[Any], secrets: bool, known: set[str]
) -> list[tuple[str, str]]:
    """The consistency problems of ``tree`` with its invalid values left out (their
    defaults in their place), so that every problem is listed at once: Telegram enabled
    without a token was said only once a bad port and time zone beside it were fixed.
    Nothing when the tree does not validate even so."""
    pruned = copy.deepcopy(tree)
    for error in errors:
        node: Any = pruned
        *path, last = tuple(error["loc"]) or ("",)
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            return []  # a list item or a whole section: nothing sensible to leave out
        del node[last]
    try:
        cfg = AppConfig.model_validate(pruned)
    except ValidationError:
        return []
    return [(key, msg) for key, msg in consistency_problems(cfg, secrets) if key not in known]


def _named_by_variable(
    problems: list[tuple[str, str]], from_env: dict[str, str]
) -> list[tuple[str, str]]:
    """Each problem of a value the environment gave, saying which variable gave it:
    ``TELEGRAM_BOT_TOKEN=abc`` was reported against the file's ``telegram:`` line, and
    the file holds no token."""
    return [
        (key, f"{message} (from {from_env[key]})" if key in from_env else message)
        for key, message in problems
    ]


def load_config(
    path: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    secrets: bool = True,
) -> AppConfig:
    """Load ``path`` (or the default location, or the embedded default) and validate it."""
    chosen = Path(path) if path is not None else default_config_path()
    raw = read_config_file(chosen) if chosen is not None else None
    try:
        return build_config(raw, env, secrets=secrets)
    except ConfigError as exc:
        if chosen is None:
            raise
        raise _with_lines(exc, chosen) from exc


def _with_lines(exc: ConfigError, path: Path) -> ConfigError:
    """``exc`` with the file line of each problem's key (or of its section, for a key
    left out): in a long file, ``brain.max_tokens`` alone left the owner searching which
    of the ``max_tokens`` was meant. A problem of an environment variable's value is not
    the file's, and keeps no line."""
    try:
        lines = key_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):  # read a moment ago; gone since: no lines
        return exc
    problems = []
    for key, message in exc.problems:
        env = message.startswith(tuple(ENV_OVERRIDES)) or message.endswith(
            tuple(f"(from {var})" for var in ENV_OVERRIDES)
        )
        line = None if env else line_of(key, lines)
        problems.append((key, f"{message} ({path}, line {line})" if line else message))
    return ConfigError(*problems[0], more=problems[1:])
