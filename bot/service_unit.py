"""``my-agent install-service``: write the systemd unit for this installation.

The unit is rendered from the running environment: ``ExecStart`` is the ``my-agent``
executable beside the current interpreter (a venv's ``bin/``), or ``python -m bot.cli``
when no script is installed. The data directory is systemd's ``StateDirectory``
(``/var/lib/my-agent``, or ``~/.local/state/my-agent`` for ``--user``), handed to the
daemon through ``MY_AGENT_DATA_DIR``; secrets come from an ``EnvironmentFile``.

The unit's text is rendered by :mod:`bot.service_unit_text` (re-exported here).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bot.exitcodes import EX_DATADIR, EX_USAGE
from bot.service_store import store_warnings
from bot.service_unit_text import (
    DEFAULT_EXECUTABLE,
    DRAIN_SECONDS,
    _under_home,
    render_unit,
    runtime_paths,
)

UNIT_NAME = "my-agent.service"
SYSTEM_CONFIG = Path("/etc/my-agent/config.yaml")

# what the tests and the CLI import from here (the renderer's, re-exported)
__all__ = [
    "DEFAULT_EXECUTABLE",
    "DRAIN_SECONDS",
    "SYSTEM_CONFIG",
    "UNIT_NAME",
    "InstallResult",
    "add_arguments",
    "default_unit_path",
    "find_executable",
    "install_service",
    "main",
    "render_unit",
    "runtime_paths",
]


@dataclass
class InstallResult:
    """What ``install_service`` did: the unit written and what the user runs next."""

    path: Path
    text: str
    next_commands: list[str]
    warnings: list[str] = field(default_factory=list)


TEMP_DIRS = ("/tmp/", "/var/tmp/")  # hidden from the system unit by PrivateTmp=yes


def find_executable() -> list[str]:
    """argv that starts my-agent in the current environment."""
    beside = Path(sys.executable).parent / "my-agent"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("my-agent")
    if found:
        return [str(Path(found).resolve())]
    # Not installed as a script (a source checkout): the module entry point.
    return [sys.executable, "-m", "bot.cli"]


def _user_exists(name: str) -> bool:
    """Whether ``name`` (or a numeric uid) is a user of this machine, as ``User=`` needs."""
    try:
        if name.isdigit():
            pwd.getpwuid(int(name))
        else:
            pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def default_unit_path(user: bool) -> Path:
    """Where systemd looks for an administrator's (or a user's) own units."""
    if not user:
        return Path("/etc/systemd/system") / UNIT_NAME
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / UNIT_NAME


def _user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "my-agent" / "config.yaml"


def install_service(
    user: bool,
    *,
    output: Path | None = None,
    config: Path | None = None,
    run_as: str | None = None,
    executable: list[str] | None = None,
) -> InstallResult:
    """Write the system (or ``user``) unit and return the commands the user runs next.

    ``config`` defaults to ``/etc/my-agent/config.yaml`` (``~/.config/my-agent/config.yaml``
    with ``user``) when that file exists; otherwise the unit runs on built-in defaults.
    ``output`` writes elsewhere (to review it, or for packaging).
    """
    exe = executable or find_executable()
    expected = _user_config_path() if user else SYSTEM_CONFIG
    chosen = config.resolve() if config is not None else (expected if expected.is_file() else None)
    text = render_unit(user=user, executable=exe, config=chosen, run_as=run_as)
    path = output or default_unit_path(user)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)

    warnings: list[str] = []
    homed = [p for p in runtime_paths(exe) if _under_home([p])]
    if not user and run_as is None and homed:
        warnings.append(
            f"{homed[-1]} is inside a home directory that a DynamicUser may not be able "
            "to read: install into /opt/my-agent/venv (with a Python outside any home "
            "directory) or pass --run-as USER."
        )
    if not user and run_as is not None and not _user_exists(run_as):
        # systemd fails the start with status 217/USER, long after this said "wrote"
        warnings.append(
            f"there is no user {run_as!r} on this machine: the service cannot start "
            f"(status 217/USER) until it exists (useradd --system {run_as})."
        )
    temporary = [p for p in runtime_paths(exe) if p.startswith(TEMP_DIRS)]
    if not user and temporary:
        # it said nothing, and the service failed to start (status 203/EXEC)
        warnings.append(
            f"{temporary[0]} is in a temporary directory, which the service does not see "
            "(PrivateTmp=yes): it cannot start (status 203/EXEC). Install into "
            "/opt/my-agent/venv (with a Python outside /tmp) and run install-service from there."
        )
    if not user and chosen is not None and str(chosen).startswith(TEMP_DIRS):
        warnings.append(
            f"{chosen} is in a temporary directory, which the service does not see "
            "(PrivateTmp=yes): it would exit with status 78. Use /etc/my-agent/config.yaml."
        )
    if chosen is not None and not chosen.is_file():
        warnings.append(f"{chosen} does not exist yet: the service exits with status 78.")
    # the store the owner has used so far, which MY_AGENT_DATA_DIR=%S/my-agent overrides
    warnings += store_warnings(chosen, user)

    sudo = "" if user or os.geteuid() == 0 else "sudo "
    ctl = "systemctl --user" if user else f"{sudo}systemctl"
    cfg_dir = expected.parent
    env_file = cfg_dir / "env"

    # quoted for the shell they are pasted into: a space in a path (the venv, $HOME,
    # --output) split the command
    def q(path: Path | str) -> str:
        return shlex.quote(str(path))

    cmds: list[str] = []
    if output is not None and output.resolve() != default_unit_path(user):
        cmds.append(f"{sudo}install -m 0644 {q(output)} {q(default_unit_path(user))}")
    if chosen is None:
        cmds += [
            f"{sudo}install -d -m 0755 {q(cfg_dir)}",
            f"{sudo}cp config.example.yaml {q(expected)}"
            "   # edit it, then run install-service again",
        ]
    elif chosen.parent != cfg_dir:
        # the env file's directory: with --config elsewhere, nothing had created it, and
        # the `install ... /etc/my-agent/env` below failed "No such file or directory"
        cmds.append(f"{sudo}install -d -m 0755 {q(cfg_dir)}")
    cmds += [
        f"{sudo}install -m 0600 /dev/null {q(env_file)}   # then add ANTHROPIC_API_KEY=...",
        f"{ctl} daemon-reload",
        f"{ctl} enable --now {UNIT_NAME}",
        f"{ctl} status {UNIT_NAME}",
        f"journalctl {'--user ' if user else ''}-u {UNIT_NAME} -f",
    ]
    state = "~/.local/state/my-agent" if user else "/var/lib/my-agent"
    # status reads the service's config too: without it, it probed the default web port
    # (a false "/readyz is not ok" when the config moves the dashboard) and showed UTC
    status = [*exe, "status"] + (["--config", str(chosen)] if chosen is not None else [])
    cmds.append(f"{sudo}MY_AGENT_DATA_DIR={state} {shlex.join(status)}")
    if user:
        cmds.append("loginctl enable-linger $USER   # keep it running after you log out")
    return InstallResult(path=path, text=text, next_commands=cmds, warnings=warnings)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``my-agent install-service``."""
    parser.add_argument("--user", action="store_true", help="write a user unit (systemctl --user)")
    parser.add_argument("--output", type=Path, help="write the unit here instead")
    # SUPPRESS: keep a --config given before the subcommand (my-agent --config F ...).
    parser.add_argument(
        "--config", default=argparse.SUPPRESS, help="config file the service runs with"
    )
    parser.add_argument("--run-as", help="system unit: run as this user instead of DynamicUser")


def main(args: argparse.Namespace) -> int:
    """``my-agent install-service``: write the unit, print the next commands."""
    if args.user and args.run_as:
        # a user unit runs as the user who enables it: --run-as was silently ignored
        print(
            "my-agent install-service: --run-as is for the system unit (a --user unit runs as you)",
            file=sys.stderr,
        )
        return EX_USAGE
    try:
        result = install_service(
            args.user,
            output=args.output,
            config=Path(args.config) if getattr(args, "config", None) else None,
            run_as=args.run_as,
        )
    except OSError as exc:
        print(
            f"cannot write the unit: {exc} (run as root, or use --user or --output)",
            file=sys.stderr,
        )
        return EX_DATADIR  # EX_CANTCREAT
    print(f"wrote {result.path}")
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print("next:")
    for cmd in result.next_commands:
        print(f"  {cmd}")
    return 0
