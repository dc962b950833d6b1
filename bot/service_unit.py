"""``my-agent install-service``: write the systemd unit for this installation.

The unit is rendered from the running environment: ``ExecStart`` is the ``my-agent``
executable beside the current interpreter (a venv's ``bin/``), or ``python -m bot.cli``
when no script is installed. The data directory is systemd's ``StateDirectory``
(``/var/lib/my-agent``, or ``~/.local/state/my-agent`` for ``--user``), handed to the
daemon through ``MY_AGENT_DATA_DIR``; secrets come from an ``EnvironmentFile``.

``systemd/my-agent.service`` in the repository is this renderer's output for the default
layout (``/opt/my-agent/venv``); a test keeps the two identical.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bot.exitcodes import EX_DATADIR, EX_USAGE

UNIT_NAME = "my-agent.service"
SYSTEM_CONFIG = Path("/etc/my-agent/config.yaml")
SYSTEM_ENV_FILE = "/etc/my-agent/env"
USER_ENV_FILE = "%E/my-agent/env"  # %E: $XDG_CONFIG_HOME in the user manager
DEFAULT_EXECUTABLE = "/opt/my-agent/venv/bin/my-agent"
# The daemon finishes or persists in-flight work within this bound after SIGTERM;
# systemd waits longer than that before it sends SIGKILL.
DRAIN_SECONDS = 30
WATCHDOG_SECONDS = 30
HOME_PREFIXES = ("/home/", "/root/", "/run/user/")


@dataclass
class InstallResult:
    """What ``install_service`` did: the unit written and what the user runs next."""

    path: Path
    text: str
    next_commands: list[str]
    warnings: list[str] = field(default_factory=list)


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


def _quote(arg: str) -> str:
    """One ExecStart word, escaped for systemd (specifiers, variables, spaces)."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if any(c in arg for c in " \t\"'\\;"):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def _under_home(paths: list[str]) -> bool:
    return any(p.startswith(HOME_PREFIXES) or p in ("/root", "/home") for p in paths)


def runtime_paths(exe: list[str]) -> list[str]:
    """The files the service reads to start: the command (and absolute arguments), the
    interpreter a script's first line names, each also with its symlinks resolved.

    A venv's ``bin/python`` links to its base interpreter, and that may live in a home
    directory (pyenv, uv: ``/root/.pyenv/...``) while the venv does not: judged by the
    script's path alone, the unit got ``ProtectHome=yes`` and could not start."""
    words = exe[:1] + [w for w in exe[1:] if w.startswith("/")]
    try:
        with open(exe[0], "rb") as script:
            first = script.readline(512)
        if first.startswith(b"#!") and first[2:].split():
            words.append(first[2:].split()[0].decode())
    except (OSError, UnicodeDecodeError):
        pass  # not a readable script (a binary, or not installed here yet)
    return list(dict.fromkeys(p for w in words for p in (w, os.path.realpath(w))))


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


def render_unit(
    *,
    user: bool = False,
    executable: list[str] | None = None,
    config: Path | None = None,
    run_as: str | None = None,
    working_directory: Path | None = None,
) -> str:
    """The unit file text. ``config`` None: the daemon's built-in defaults."""
    exe = executable or [DEFAULT_EXECUTABLE]
    argv = [*exe, "run"] + (["--config", str(config)] if config is not None else [])
    exec_start = " ".join(_quote(a) for a in argv)
    env_file = USER_ENV_FILE if user else SYSTEM_ENV_FILE
    lines = [
        "# my-agent: personal AI assistant daemon. Written by `my-agent install-service`;",
        "# run it again after moving the installation. docs/operations.md explains each line.",
        "[Unit]",
        "Description=my-agent personal AI assistant",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=300",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
    ]
    if config is None:
        lines.append("# No config file at install time: built-in defaults (web on 127.0.0.1:4321).")
    lines += [
        f"ExecStart={exec_start}",
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"WatchdogSec={WATCHDOG_SECONDS}",
        "Restart=on-failure",
        "RestartSec=5",
        "# 78 = invalid configuration: restarting cannot fix it.",
        "RestartPreventExitStatus=78",
        "TimeoutStartSec=180",
        f"TimeoutStopSec={DRAIN_SECONDS + 15}",
        "",
        "StateDirectory=my-agent",
        "StateDirectoryMode=0700",
        "WorkingDirectory=%S/my-agent"
        if working_directory is None
        else f"WorkingDirectory={working_directory}",
        "Environment=MY_AGENT_DATA_DIR=%S/my-agent",
        "Environment=PYTHONUNBUFFERED=1",
        "# Secrets (ANTHROPIC_API_KEY, TELEGRAM_BOT_TOKEN, EMAIL_PASSWORD), mode 0600.",
        f"EnvironmentFile=-{env_file}",
        "SyslogIdentifier=my-agent",
        "",
        "# Hardening (systemd-analyze security my-agent.service)",
    ]
    paths = runtime_paths(exe) + ([str(config)] if config is not None else [])
    if not user:
        # A dynamic user owns nothing outside the state directory; --run-as picks a real one.
        lines.append(f"User={run_as}" if run_as else "DynamicUser=yes")
        lines += [
            "ProtectSystem=strict",
            # The code or config may live in a home directory: keep it readable then.
            f"ProtectHome={'read-only' if _under_home(paths) else 'yes'}",
            "PrivateTmp=yes",
            "PrivateDevices=yes",
            "ReadWritePaths=%S/my-agent",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "ProtectProc=invisible",
            "CapabilityBoundingSet=",
            "AmbientCapabilities=",
            "RemoveIPC=yes",
            "KeyringMode=private",
        ]
    else:
        # Mount-namespace options need unprivileged user namespaces in the user manager,
        # which some distributions restrict; the seccomp-based ones below always work.
        lines.append("# User unit: no ProtectSystem/ProtectHome/PrivateTmp (need user namespaces).")
    lines += [
        "NoNewPrivileges=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "RestrictRealtime=yes",
        "RestrictNamespaces=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        "SystemCallFilter=~@privileged",
        "SystemCallErrorNumber=EPERM",
        "# onnxruntime, sqlite-vec and numpy were checked to run without W+X memory.",
        "MemoryDenyWriteExecute=yes",
        "UMask=0077",
        "",
        "[Install]",
        f"WantedBy={'default.target' if user else 'multi-user.target'}",
        "",
    ]
    return "\n".join(lines)


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
    if not user and chosen is not None and str(chosen).startswith(("/tmp/", "/var/tmp/")):
        warnings.append(
            f"{chosen} is in a temporary directory, which the service does not see "
            "(PrivateTmp=yes): it would exit with status 78. Use /etc/my-agent/config.yaml."
        )
    if chosen is not None and not chosen.is_file():
        warnings.append(f"{chosen} does not exist yet: the service exits with status 78.")

    sudo = "" if user or os.geteuid() == 0 else "sudo "
    ctl = "systemctl --user" if user else f"{sudo}systemctl"
    cfg_dir = expected.parent
    env_file = cfg_dir / "env"
    cmds: list[str] = []
    if output is not None and output.resolve() != default_unit_path(user):
        cmds.append(f"{sudo}install -m 0644 {output} {default_unit_path(user)}")
    if chosen is None:
        cmds += [
            f"{sudo}install -d -m 0755 {cfg_dir}",
            f"{sudo}cp config.example.yaml {expected}   # edit it, then run install-service again",
        ]
    elif chosen.parent != cfg_dir:
        # the env file's directory: with --config elsewhere, nothing had created it, and
        # the `install ... /etc/my-agent/env` below failed "No such file or directory"
        cmds.append(f"{sudo}install -d -m 0755 {cfg_dir}")
    cmds += [
        f"{sudo}install -m 0600 /dev/null {env_file}   # then add ANTHROPIC_API_KEY=...",
        f"{ctl} daemon-reload",
        f"{ctl} enable --now {UNIT_NAME}",
        f"{ctl} status {UNIT_NAME}",
        f"journalctl {'--user ' if user else ''}-u {UNIT_NAME} -f",
    ]
    state = "~/.local/state/my-agent" if user else "/var/lib/my-agent"
    # status reads the service's config too: without it, it probed the default web port
    # (a false "/readyz is not ok" when the config moves the dashboard) and showed UTC
    status = [*exe, "status"] + (["--config", str(chosen)] if chosen is not None else [])
    cmds.append(f"{sudo}MY_AGENT_DATA_DIR={state} {' '.join(status)}")
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
