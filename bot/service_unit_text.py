"""The text of the systemd unit: rendered from the command that starts my-agent, its
config file and the system or user manager it is for, with the hardening a system unit
gets (``ProtectHome`` relaxed when the code or config lives in a home directory).

``systemd/my-agent.service`` in the repository is this renderer's output for the default
layout (``/opt/my-agent/venv``); a test keeps the two identical. Writing it, and what the
user runs next, is :mod:`bot.service_unit` (``my-agent install-service``).
"""

from __future__ import annotations

import os
from pathlib import Path

SYSTEM_ENV_FILE = "/etc/my-agent/env"
USER_ENV_FILE = "%E/my-agent/env"  # %E: $XDG_CONFIG_HOME in the user manager
DEFAULT_EXECUTABLE = "/opt/my-agent/venv/bin/my-agent"
# The daemon finishes or persists in-flight work within this bound after SIGTERM;
# systemd waits longer than that before it sends SIGKILL.
DRAIN_SECONDS = 30
WATCHDOG_SECONDS = 30
HOME_PREFIXES = ("/home/", "/root/", "/run/user/")


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
        # time-sync: idle timers, budgets and "yesterday" read the wall clock; a clock set
        # back after the start made an hour's budget look spent (where a sync service
        # waits, e.g. systemd-time-wait-sync; elsewhere this orders nothing).
        "After=network-online.target time-sync.target",
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
        # 74: a database that cannot be used as it is (damaged, emptied, a newer
        # version's); a disk refusing writes or a file held locked is waited for in the
        # process, never exit 74. Restarted, it failed the same way 5 times (session 40).
        "# 74 = a database cannot be used as it is (the journal says which and what to do),",
        "# 78 = invalid configuration: restarting cannot fix either.",
        "RestartPreventExitStatus=74 78",
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
            # The options above already give the service its own mount namespace; this
            # also keeps mounts made inside it from reaching the host (security 1.5 -> 1.4).
            "PrivateMounts=yes",
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
