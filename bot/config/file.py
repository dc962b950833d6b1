"""The configuration file read: where it is, its text, its YAML.

What reaches validation (:func:`bot.config.build_config`) is a mapping, or None for a
file that means the defaults. A file that cannot be the one the owner meant is refused
here with its own :class:`~bot.config.problems.ConfigError`: unreadable, not UTF-8, empty,
not YAML, not a mapping, a key given twice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from bot.config.problems import ConfigError


def default_config_path() -> Path | None:
    """The config file used when none is given: $MY_AGENT_CONFIG, then .my_agent/config.yaml."""
    env = os.environ.get("MY_AGENT_CONFIG")
    if env:
        return Path(env)
    candidate = Path(".my_agent") / "config.yaml"
    return candidate if candidate.is_file() else None


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


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, on one line: `` at line 2, column 1: expected the node content,
    but found '<stream end>'``. ``str(exc)`` spread over four lines (the parser's
    context, a copy of the line and a caret), though check-config promises one line per
    error."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return f"{where}: {' '.join(str(problem).split())}"


def key_lines(text: str) -> dict[str, int]:
    """The line (1-based) of every key and list item of the YAML ``text``, by dotted
    path as the errors name them (``channels.web.port``, ``owner.identities.telegram.0``);
    {} for text that is not YAML."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    walked: set[int] = set()  # an alias is walked once (and an endless one ends)
    todo: list[tuple[str, yaml.Node | None]] = [("", root)]
    while todo:
        prefix, node = todo.pop()
        if node is None or id(node) in walked:
            continue
        walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            items = [
                (str(k.value) if isinstance(k, yaml.ScalarNode) else "", k, v)
                for k, v in node.value
            ]
        elif isinstance(node, yaml.SequenceNode):
            items = [(str(i), item, item) for i, item in enumerate(node.value)]
        else:
            continue
        for key, where, value in items:
            dotted = f"{prefix}.{key}" if prefix else key
            lines.setdefault(dotted, where.start_mark.line + 1)
            todo.append((dotted, value))
    return lines


def line_of(key: str, lines: dict[str, int]) -> int | None:
    """The line of ``key`` in the file, else of the nearest section holding it (a key
    left out, ``channels.telegram.token``: the ``telegram:`` line); None when neither
    is written in the file."""
    while key:
        if key in lines:
            return lines[key]
        key = key.rpartition(".")[0]
    return None


def read_config_file(path: Path) -> Any:
    """The mapping (or None) the YAML file at ``path`` holds, checked as described above."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError("", f"config file not found: {path}") from exc
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:  # saved in Latin-1, or not a text file at all
        raise ConfigError("", f"{path} is not UTF-8 text: {exc}") from exc
    if not text.strip():
        # Zero bytes (a full disk, an editor that died, `>` for `>>`) ran the embedded
        # default: every configured channel silently off. A file of comments only, or
        # `{}`, is written on purpose and still means the defaults.
        raise ConfigError(
            "",
            f"{path} is empty (write `{{}}` in it to run on the built-in defaults)",
        )
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{path} is not valid YAML{_yaml_problem(exc)}") from exc
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError("", f"{path} must hold a mapping at top level")
    duplicate = _duplicate_key(yaml.compose(text, Loader=yaml.SafeLoader))
    if duplicate:
        key, _, message = duplicate.partition(": ")
        raise ConfigError(key, message)
    return raw
