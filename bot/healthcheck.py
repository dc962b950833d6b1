"""``my-agent status``: is the daemon alive, what is queued, is the index consistent.

Everything is read from outside the daemon, so it works whether the daemon runs or not:

- daemon health (:mod:`bot.health_daemon`): ``/readyz`` on the web channel when it is
  enabled, and the status file the daemon's :class:`bot.notify.Notifier` rewrites on
  every heartbeat (``data_dir/daemon.json``: pid, state, last beat);
- the stores (:mod:`bot.health_store`): counts from ``conversations.db`` (opened
  read-only) and the outbox from ``state.db``; index consistency: turn lines in every
  transcript against ``turns`` rows per conversation, FTS documents against ``turns``,
  bytes not yet indexed, and FTS5's own ``integrity-check``.

This module puts them together: the report (:func:`collect`), printed in its text form
(:mod:`bot.health_text`) or as JSON, and the daemon's own one-line ``STATUS=``
(:func:`live_status`).

The exit status is 0 when healthy, 1 when a problem is listed, 73/74 when the data
directory or a database cannot be read at all, or a database was written by a newer
my-agent (the daemon refuses it).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli_common import status_arguments
from bot.config.model import AppConfig
from bot.exitcodes import EX_DATABASE, EX_DATADIR
from bot.health_daemon import (
    check_readyz,
    daemon_from_status_file,
    data_dir_unreadable,
    disk_space,
)
from bot.health_store import (
    connect_ro,
    fts_integrity,
    index_consistency,
    index_counts,
    outbox_counts,
    unbuilt,
)
from bot.health_text import OFFLINE_STATE, ended_text, format_text, not_ready_because
from bot.schema import INDEX_MIGRATIONS, STATE_MIGRATIONS
from bot.service_databases import REBUILD_NEWER_INDEX
from bot.spool_file import SPOOL_NAME, read_held
from bot.state_new import read_made_new
from bot.status_reads import schema_too_new, stored_channel_problems

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.healthcheck")


def collect(
    config: AppConfig, *, deep: bool = True, pages: bool = False, readyz_timeout: float = 2.0
) -> dict[str, Any]:
    """The whole report as a JSON-able dict (``exit_code`` included). ``pages``: read
    every page of the index now (SQLite's quick check) instead of reporting the daemon's
    last check of them."""
    data_dir = config.data_dir
    # Absolute, as the daemon logs it ("data in /srv/.my_agent"): a relative ".my_agent"
    # says nothing of which store was checked when run from another directory.
    report: dict[str, Any] = {"data_dir": str(data_dir.resolve()), "problems": []}
    problems: list[str] = report["problems"]
    unreadable = data_dir_unreadable(data_dir)
    if unreadable:
        report["daemon"] = {"state": "unknown", "detail": "no data directory"}
        problems.append(unreadable)
        report["exit_code"] = EX_DATADIR
        return report
    daemon = daemon_from_status_file(data_dir)
    readyz = check_readyz(config, readyz_timeout)
    if readyz is not None:
        daemon["readyz"] = readyz
        # A daemon without a status file (an older build). One whose file says it
        # stopped, or whose pid is gone, is not brought back to life by a dashboard
        # answering on the same port: that is another daemon, on another data directory.
        if daemon["state"] == "unknown" and readyz["ok"]:
            daemon["state"] = "ready"
    report["daemon"] = daemon
    report["disk"] = disk = disk_space(data_dir)
    if disk["full"]:
        problems.append(
            f"the data directory's file system is full ({disk['free_bytes'] // 1024} KiB "
            "free): new messages cannot be stored"
        )
    if daemon["state"] == "stale" and disk["full"]:
        # Its status file cannot be written either: blaming the event loop sent the owner
        # looking for a deadlock while every message was refused for lack of space.
        problems.append("daemon heartbeat is stale: the disk is full, so it cannot be written")
    elif daemon["state"] == "stale":
        problems.append("daemon heartbeat is stale (event loop stuck?)")
    elif daemon["state"] == "stopping":
        # still running: finishing its replies and notes before it exits
        problems.append(f"daemon is {daemon.get('status') or 'stopping'}")
    elif daemon["state"] not in ("ready", "starting", "reloading"):
        other = (
            f"; {readyz['url']} answers for another daemon (another data directory?)"
            if readyz is not None and readyz["ok"]
            else ""
        )
        state = (
            "it ended without stopping: killed or crashed"
            if daemon.get("unclean")
            else daemon["state"]
        )
        if daemon.get("exit_code"):  # "killed or crashed" for a refused start (session 42)
            problems.append(f"daemon is not running: {ended_text(daemon)}{other}")
        else:
            problems.append(f"daemon is not running ({state}){other}")
    elif readyz is not None and not readyz["ok"]:
        readyz["channel_problems"] = _kept_problems(config.state_path)
        problems.append(f"/readyz is not ok: {not_ready_because(readyz)}")

    held = _held_messages(data_dir)
    if held:
        # written when the disk refused them; stored at the next start (bot/spool_file.py)
        problems.append(
            f"{held} message(s) the disk refused are held in {data_dir / SPOOL_NAME}: "
            "stored when the daemon runs and the disk has room"
        )

    exit_code = 0
    # A database from a newer my-agent: every command and the daemon refuse it (exit 74),
    # and status said nothing of it (before session 39). The same words as their refusal.
    newer_index = (
        schema_too_new(config.index_path, INDEX_MIGRATIONS) if config.index_path.is_file() else None
    )
    # An empty database (a start or reindex stopped right after making the file) was
    # "cannot read ...: no such table", exit 74; the next start builds it (session 38).
    if config.index_path.is_file() and unbuilt(config.index_path):
        problems.append(
            "conversations.db is empty (a start or reindex stopped early): built on the"
            " next start, or by `my-agent reindex`"
        )
    elif newer_index is not None:
        # the daemon refuses to start on it (exit 74): no count, and not "consistent"
        problems.append(newer_index + REBUILD_NEWER_INDEX)
        exit_code = EX_DATABASE
    elif config.index_path.is_file():
        try:
            conn = connect_ro(config.index_path)
            try:
                report["counts"] = index_counts(conn)
                report["index"] = index_consistency(conn, config.conversations_dir, deep, pages)
            finally:
                conn.close()
            if deep:
                report["index"]["fts_integrity"] = integrity = fts_integrity(config.index_path)
                if integrity not in ("ok", "read-only"):
                    report["index"]["problems"].append(f"FTS integrity-check: {integrity}")
                    report["index"]["ok"] = False
        except Exception as exc:
            problems.append(f"cannot read {config.index_path}: {exc}")
            exit_code = EX_DATABASE
        else:
            problems.extend(f"index: {p}" for p in report["index"]["problems"])
    else:
        problems.append("conversations.db is missing (rebuilt on start, or `my-agent reindex`)")
    newer_state = (
        schema_too_new(config.state_path, STATE_MIGRATIONS) if config.state_path.is_file() else None
    )
    if newer_state is not None:
        problems.append(newer_state)
        exit_code = EX_DATABASE
    elif config.state_path.is_file() and not unbuilt(config.state_path):
        try:
            report["outbox"] = outbox_counts(config.state_path)
            # made anew next to the transcripts: the replies its old outbox may have held
            report["state_new"] = read_made_new(config.state_path, connect_ro)
            # while the daemon runs, its status line says these
            enabled = [name for name, section in config.channels if section.enabled]
            stored = (
                stored_channel_problems(config.state_path, enabled)
                if daemon["state"] in ("stopped", "unknown")
                else []
            )
        except Exception as exc:
            problems.append(f"cannot read {config.state_path}: {exc}")
            exit_code = EX_DATABASE
        else:
            if report["outbox"]["failed"]:
                problems.append(f"{report['outbox']['failed']} outbox message(s) failed for good")
            problems.extend(stored)
    report["exit_code"] = exit_code or (1 if problems else 0)
    return report


def _held_messages(data_dir: Path) -> int:
    """How many messages the spool file holds (0: none, or it cannot be read)."""
    try:
        return len(read_held(data_dir))
    except OSError:
        return 0


def _kept_problems(state_path: Path) -> list[str]:
    """What the channels keep with their cursors (a refused bot token), for /readyz's
    line: "not connected: telegram" sent the owner to the log for the cause."""
    try:
        return stored_channel_problems(state_path) if state_path.is_file() else []
    except Exception:  # the report's state.db line says what is wrong with it
        return []


async def live_status(services: Services) -> str:
    """The daemon's one-line state for ``systemctl status`` (``STATUS=``)."""
    conversations = await services.index.count()
    pending = await services.outbox.undelivered_count()
    # owed as /status and `my-agent status` count them: the flag alone missed those
    # left before their idle timeout (and read every flagged id twice a minute)
    abbreviations = await services.index.notes_owed()
    health = services.health()
    channels = health.get("channels") or {}
    up = [name for name, started in channels.items() if started]
    down = [name for name, started in channels.items() if not started]
    parts = [
        # Before session 40 only the ready line named the brain: the first refresh (30 s
        # on) dropped it, and `systemctl status` / `my-agent status` never said again
        # that no model answers.
        brain_state(services.brain.name),
        f"channels {', '.join(up) or 'none'}" + (f" (down: {', '.join(down)})" if down else ""),
        f"{conversations} conversations",
        f"outbox {pending} pending",
        f"{abbreviations} abbreviations pending",
        search_state(services),
    ]
    if health.get("spooled"):
        parts.append(f"{health['spooled']} messages held in memory (storage failing)")
    if health.get("repliesWaitingForStorage"):
        parts.append(
            f"{health['repliesWaitingForStorage']} replies waiting to be written (storage failing)"
        )
    for name, problems in (health.get("channelProblems") or {}).items():
        parts.extend(f"{name}: {problem}" for problem in problems)
    parts.extend(health.get("unreadableTranscripts") or [])
    if health.get("indexDamage"):
        parts.append(str(health["indexDamage"]))
    return "ready: " + "; ".join(parts)


def brain_state(name: str) -> str:
    """The brain part of the daemon's status line: ``brain offline, replies
    recall-only`` without a model (the offline brain), else ``brain <name>``."""
    return f"brain {name}" + (f", {OFFLINE_STATE}" if name == "offline" else "")


def search_state(services: Services) -> str:
    """How search answers now (``/status`` says the same: its ``Search:`` line)."""
    # (imported here: `my-agent status` loads this module and not the brain's)
    from bot.command_status import vector_rebuild_state

    if not services.vector_search_available():
        return "search keyword-only"
    rebuild = vector_rebuild_state(services)
    return f"search hybrid, {rebuild}" if rebuild else "search hybrid"


def main(args: argparse.Namespace, config: AppConfig) -> int:
    """``my-agent status``: print the report, return its exit status."""
    report = collect(
        config, deep=not getattr(args, "quick", False), pages=getattr(args, "pages", False)
    )
    if getattr(args, "json", False):
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_text(report))
    return int(report["exit_code"])


# The checks stay importable from here (tests and callers use bot.healthcheck.*).
# the options stay importable from here, where they were (bot.cli_common keeps them)
add_arguments = status_arguments

__all__ = [
    "add_arguments",
    "check_readyz",
    "collect",
    "daemon_from_status_file",
    "disk_space",
    "format_text",
    "index_consistency",
    "live_status",
    "main",
    "not_ready_because",
]
