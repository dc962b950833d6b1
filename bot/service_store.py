"""``install-service``: the store the owner has used so far, which the unit will not use.

The unit hands the daemon systemd's state directory (``Environment=MY_AGENT_DATA_DIR=
%S/my-agent``), and the variable wins over the config file's ``data_dir``. Before
session 41 an owner whose conversations were in another directory (the config's
``data_dir``, or ``./.my_agent``) got a service on an empty store (a new web token, a
new ``state.db``, no conversations) without a word. :func:`store_warnings` names such a
store and the commands that copy it into the state directory.

Warned, not followed: using the configured directory instead would need the sandbox
opened (``ProtectSystem=strict`` and ``ProtectHome`` hide or freeze it, a
``DynamicUser`` cannot write files its owner made, and systemd gives only the state
directory to the service's user), and the owner's own shell would then share one store
with the service under two users. One copy in the state directory keeps both safe.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from bot.config import AppConfig, ConfigError, build_config, load_config


def unit_data_dir(user: bool) -> Path:
    """The directory ``%S/my-agent`` is for the system (or a ``user``) unit."""
    if not user:
        return Path("/var/lib/my-agent")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "my-agent"


def holds_store(path: Path) -> bool:
    """Whether ``path`` holds a my-agent store: transcripts, or the outbox's state.db."""
    try:
        if (path / "state.db").is_file():
            return True
        return any((path / "conversations").glob("conv-*.jsonl"))
    except OSError:  # not ours to read: nothing can be said of it
        return False


def _configured(config: Path | None) -> tuple[AppConfig | None, str | None]:
    """The configuration as the owner's commands read it (the environment's
    ``MY_AGENT_DATA_DIR`` too), or why it cannot be read."""
    try:
        if config is None:
            return build_config(None, secrets=False), None
        return load_config(config, secrets=False), None
    except ConfigError as exc:
        return None, exc.lines()[0]


def store_warnings(config: Path | None, user: bool) -> list[str]:
    """A warning for each existing store the unit will not use, with how to move it;
    one for a config file that does not validate (the service would exit 78)."""
    found: list[str] = []
    cfg, problem = _configured(config if config is not None and config.is_file() else None)
    if problem is not None:
        found.append(
            f"{config}: {problem}: the service would exit with status 78 "
            f"(my-agent check-config --config {shlex.quote(str(config))})."
        )
    candidates = [Path(".my_agent")] + ([cfg.data_dir] if cfg is not None else [])
    target = unit_data_dir(user)
    seen = {target.resolve()}
    for candidate in candidates:
        place = candidate.resolve()
        if place in seen or not holds_store(place):
            continue
        seen.add(place)
        found.append(_move_warning(place, target, user))
    return found


def _move_warning(store: Path, target: Path, user: bool) -> str:
    sudo = "" if user or os.geteuid() == 0 else "sudo "
    ctl = "systemctl --user" if user else f"{sudo}systemctl"
    src, dst = shlex.quote(f"{store}/."), shlex.quote(f"{target}/")
    steps = [
        f"{sudo}install -d -m 0700 {shlex.quote(str(target))}",
        f"{sudo}cp -a {src} {dst}",
    ]
    if not user:
        # systemd gives the state directory to the service's user (DynamicUser or
        # --run-as) at the start when its owner differs: root's is made to differ.
        steps.append(f"{sudo}chown -R root:root {dst}")
    already = " (it holds a store already: keep one)" if holds_store(target) else ""
    return (
        f"{store} holds a store (conversations, state.db, the web token) that the service "
        f"will not use: the unit sets MY_AGENT_DATA_DIR={target}{already}, which wins over "
        "data_dir, so the service would start on an empty store. To move it there, with no "
        f"my-agent running on it ({ctl} stop my-agent.service if the service runs): "
        f"{' && '.join(steps)} (docs/operations.md, "
        '"Moving an existing store").'
    )
