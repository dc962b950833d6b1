"""``my-agent status``: is the daemon alive, what is queued, is the index consistent.

Everything is read from outside the daemon, so it works whether the daemon runs or not:

- daemon health from ``/readyz`` on the web channel when it is enabled, and from the
  status file the daemon's :class:`bot.notify.Notifier` rewrites on every heartbeat
  (``data_dir/daemon.json``: pid, state, last beat);
- counts from ``conversations.db`` (opened read-only) and the outbox from ``state.db``;
- index consistency: turn lines in every transcript against ``turns`` rows per
  conversation, FTS documents against ``turns``, bytes not yet indexed, and FTS5's own
  ``integrity-check`` (which compares the index with its content table).

The exit status is 0 when healthy, 1 when a problem is listed, 73/74 when the data
directory or a database cannot be read at all.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.config.model import AppConfig
from bot.db import select_driver
from bot.exitcodes import EX_DATABASE, EX_DATADIR
from bot.notify import STATUS_FILE_NAME, read_status_file
from bot.recovery import PENDING_REPLIES
from bot.status_reads import connect_readonly, stored_channel_problems

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.healthcheck")

# A heartbeat older than this many intervals means the loop is stuck or the process died.
STALE_INTERVALS = 3.0


# Less free space than this in the data directory's file system: it counts as full (a
# message, its journal record and its index rows no longer fit for long).
FULL_BYTES = 1 << 20


def disk_space(path: Path) -> dict[str, Any]:
    """Free and total bytes of the file system holding ``path`` (as the daemon's
    unprivileged user sees it: without the blocks reserved for root)."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"error": str(exc), "full": False}
    free = st.f_bavail * st.f_frsize
    return {"free_bytes": free, "total_bytes": st.f_blocks * st.f_frsize, "full": free < FULL_BYTES}


def _pid_alive(pid: int, started_at: float | None = None) -> bool:
    """Whether ``pid`` is still the daemon that wrote its status file at ``started_at``.

    ``os.kill(pid, 0)`` alone also succeeds for a daemon killed (``kill -9``) but not yet
    reaped by its parent (a zombie), and for another process that got the pid later:
    both were reported as a ready daemon.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user (the service's DynamicUser)
    proc = _proc_state(pid)
    if proc is None:
        return True  # no /proc to ask: trust the signal check
    state, started = proc
    if state == "Z":
        return False
    # The daemon wrote started_at after it started; a process started later is another.
    return not (started_at and started > started_at + 2.0)


def _proc_state(pid: int) -> tuple[str, float] | None:
    """(state letter, start time as a Unix time) of ``pid`` from /proc, None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold ")"
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def daemon_from_status_file(data_dir: Path, now: float | None = None) -> dict[str, Any]:
    """Interpret ``daemon.json``: running / stale / stopped / unknown."""
    data = read_status_file(data_dir / STATUS_FILE_NAME)
    if data is None:
        return {"state": "unknown", "source": "none", "detail": "no status file"}
    now = time.time() if now is None else now
    pid = int(data.get("pid") or 0)
    age = now - float(data.get("updated_at") or 0)
    interval = data.get("heartbeat_interval")
    out: dict[str, Any] = {
        "source": "status-file",
        "pid": pid,
        "reported_state": data.get("state"),
        "status": data.get("status", ""),
        "heartbeat_age_seconds": round(age, 1),
        "uptime_seconds": round(now - float(data.get("started_at") or now), 1),
        "systemd": bool(data.get("systemd")),
    }
    started_at = data.get("started_at")
    started = float(started_at) if isinstance(started_at, int | float) else None
    if data.get("state") == "stopped" or not pid or not _pid_alive(pid, started):
        out["state"] = "stopped"
    elif isinstance(interval, int | float) and age > STALE_INTERVALS * interval + 2:
        out["state"] = "stale"  # alive but no heartbeat: the event loop is stuck
    else:
        out["state"] = str(data.get("state") or "unknown")
    return out


def _fetch_readyz(url: str, timeout: float) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read(65536)
            status = resp.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(65536), exc.code
    except (OSError, ValueError) as exc:
        return {"url": url, "ok": False, "error": str(exc)}
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = body.decode("utf-8", "replace")[:200]
    return {"url": url, "ok": status == 200, "http_status": status, "body": payload}


def check_readyz(config: AppConfig, timeout: float = 2.0) -> dict[str, Any] | None:
    """GET ``/readyz`` of the web channel (None when the web channel is disabled)."""
    web = config.channels.web
    if not web.enabled or not web.port:
        return None
    host = "127.0.0.1" if web.host in ("0.0.0.0", "", "::") else web.host
    host = f"[{host}]" if ":" in host else host
    return _fetch_readyz(f"http://{host}:{web.port}/readyz", timeout)


def _connect_ro(path: Path) -> Any:
    return connect_readonly(path)  # also on a full disk (bot.status_reads)


def _scalar(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> int:
    row = conn.execute(sql, params).fetchone()
    return int(row[0] or 0) if row else 0


def index_counts(conn: Any) -> dict[str, Any]:
    """Counts from ``conversations.db``."""
    by_channel = dict(
        conn.execute("SELECT channel, count(*) FROM conversations GROUP BY channel").fetchall()
    )
    return {
        "conversations": _scalar(conn, "SELECT count(*) FROM conversations"),
        "by_channel": by_channel,
        "turns": _scalar(conn, "SELECT count(*) FROM turns"),
        # Notes missing or behind the last turn: what the daemon will write (at the idle
        # timeout, or at its next start), as bot.lifecycle.records.pending_abbreviations
        # selects them. The flag alone missed conversations left before their timeout.
        "pending_abbreviations": _scalar(
            conn,
            "SELECT count(*) FROM conversations WHERE turn_count > 0 AND "
            "(needs_abbreviation = 1 OR abbreviated_turn < turn_count)",
        ),
        # of those, flagged by a failed or unfinished pass: retried by the sweep
        "abbreviations_to_retry": _scalar(
            conn, "SELECT count(*) FROM conversations WHERE needs_abbreviation = 1"
        ),
        # Owner messages with no reply yet (bot.recovery.pending_replies): in flight
        # while the daemon runs; after a stop or during an outage, answered later.
        "replies_pending": _scalar(conn, f"SELECT count(*) FROM ({PENDING_REPLIES})"),
        "external_parties": _scalar(conn, "SELECT count(*) FROM external_parties"),
        "pending_escalations": _scalar(
            conn, "SELECT count(*) FROM escalations WHERE status = 'pending'"
        ),
    }


def outbox_counts(state_path: Path, now: float | None = None) -> dict[str, Any]:
    """Outbox sizes from ``state.db`` (pending, failed, oldest pending age)."""
    conn = _connect_ro(state_path)
    try:
        rows = dict(conn.execute("SELECT status, count(*) FROM outbox GROUP BY status").fetchall())
        oldest = conn.execute(
            "SELECT min(created) FROM outbox WHERE status = 'pending'"
        ).fetchone()[0]
    finally:
        conn.close()
    return {
        "pending": int(rows.get("pending", 0)),
        "failed": int(rows.get("failed", 0)),
        "sent": int(rows.get("sent", 0)),
        "oldest_pending": oldest,
    }


def _valid_turn(line: dict[str, Any]) -> bool:
    # The same acceptance rule as bot.index.apply_line: what the index should contain.
    return (
        line.get("type") == "turn"
        and line.get("role") in ("user", "assistant")
        and isinstance(line.get("content"), str)
        and isinstance(line.get("turnNumber"), int)
    )


def transcript_turns(conversations_dir: Path) -> dict[str, tuple[int, int]]:
    """conv id -> (turn lines, size of the complete-line prefix in bytes)."""
    out: dict[str, tuple[int, int]] = {}
    if not conversations_dir.is_dir():
        return out
    for path in sorted(conversations_dir.glob("conv-*.jsonl")):
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1  # a torn last line is not counted (nor indexed)
        count = 0
        for raw in data[:end].split(b"\n"):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(line, dict) and _valid_turn(line):
                count += 1
        out[path.stem] = (count, end)
    return out


def index_consistency(conn: Any, conversations_dir: Path) -> dict[str, Any]:
    """Compare the index with the transcripts; ``problems`` lists every mismatch found."""
    problems: list[str] = []
    files = transcript_turns(conversations_dir)
    rows = {
        cid: (int(turns), int(indexed))
        for cid, turns, indexed in conn.execute(
            "SELECT c.id, (SELECT count(*) FROM turns t WHERE t.conversation_id = c.id),"
            " c.indexed_bytes FROM conversations c"
        ).fetchall()
    }
    missing = sorted(set(files) - set(rows))
    orphans = sorted(set(rows) - set(files))
    mismatched = []
    lag_bytes = 0
    for cid, (count, size) in files.items():
        if cid not in rows:
            continue
        indexed_turns, indexed_bytes = rows[cid]
        if indexed_bytes < size:
            lag_bytes += size - indexed_bytes
        elif indexed_turns != count:
            mismatched.append({"id": cid, "transcript": count, "index": indexed_turns})
    if missing:
        problems.append(f"{len(missing)} transcript(s) not in the index")
    if orphans:
        problems.append(f"{len(orphans)} indexed conversation(s) without a transcript")
    if mismatched:
        problems.append(f"{len(mismatched)} conversation(s) with a different turn count")
    turns = _scalar(conn, "SELECT count(*) FROM turns")
    fts_docs = _scalar(conn, "SELECT count(*) FROM turns_fts_docsize")
    searchable = turns
    if any(row[1] == "recall" for row in conn.execute("PRAGMA table_info(turns)")):
        # readouts are not searchable; an index from before version 5 has no such column
        searchable = _scalar(conn, "SELECT count(*) FROM turns WHERE recall = 1")
    if fts_docs != searchable:
        problems.append(f"FTS holds {fts_docs} documents for {searchable} searchable turns")
    return {
        "ok": not problems,
        "transcripts": len(files),
        "transcript_turns": sum(c for c, _ in files.values()),
        "index_turns": turns,
        "searchable_turns": searchable,
        "fts_documents": fts_docs,
        "fts_integrity": "skipped",
        "unindexed_bytes": lag_bytes,
        "missing_from_index": missing[:20],
        "without_transcript": orphans[:20],
        "mismatched": mismatched[:20],
        "problems": problems,
    }


def fts_integrity(index_path: Path) -> str:
    """FTS5 ``integrity-check`` of ``turns_fts``: "ok", "read-only" or the error."""
    # rank=1 also compares an external-content index with its content table (`turns`).
    # It is spelled as an INSERT but changes nothing; it needs a writable connection.
    try:
        conn = select_driver().module.connect(str(index_path), timeout=10.0)
    except Exception as exc:  # sqlite3 and pysqlite3 raise their own classes
        return str(exc)
    try:
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("INSERT INTO turns_fts(turns_fts, rank) VALUES ('integrity-check', 1)")
    except Exception as exc:
        msg = str(exc)
        if "readonly" in msg.replace(" ", "").lower() or disk_space(index_path.parent)["full"]:
            return "read-only"  # a full disk cannot take the -shm file it needs either
        return msg
    finally:
        conn.close()
    return "ok"


def collect(config: AppConfig, *, deep: bool = True, readyz_timeout: float = 2.0) -> dict[str, Any]:
    """The whole report as a JSON-able dict (``exit_code`` included)."""
    data_dir = config.data_dir
    report: dict[str, Any] = {"data_dir": str(data_dir), "problems": []}
    problems: list[str] = report["problems"]
    if not data_dir.is_dir():
        report["daemon"] = {"state": "unknown", "detail": "no data directory"}
        problems.append(f"data directory {data_dir} does not exist")
        report["exit_code"] = EX_DATADIR
        return report
    daemon = daemon_from_status_file(data_dir)
    readyz = check_readyz(config, readyz_timeout)
    if readyz is not None:
        daemon["readyz"] = readyz
        if daemon["state"] in ("unknown", "stopped") and readyz["ok"]:
            daemon["state"] = "ready"  # a daemon without a status file (older build)
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
        problems.append(f"daemon is not running ({daemon['state']})")
    elif readyz is not None and not readyz["ok"]:
        problems.append(f"/readyz is not ok: {readyz.get('error') or readyz.get('http_status')}")

    exit_code = 0
    if config.index_path.is_file():
        try:
            conn = _connect_ro(config.index_path)
            try:
                report["counts"] = index_counts(conn)
                report["index"] = index_consistency(conn, config.conversations_dir)
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
    if config.state_path.is_file():
        try:
            report["outbox"] = outbox_counts(config.state_path)
            # while the daemon runs, its status line says these
            stored = (
                stored_channel_problems(config.state_path)
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


def format_text(report: dict[str, Any]) -> str:
    """Human-readable summary of :func:`collect`'s report."""
    daemon = report.get("daemon", {})
    lines = [f"data dir:     {report['data_dir']}"]
    state = daemon.get("state", "unknown")
    extra = f" pid {daemon['pid']}" if daemon.get("pid") else ""
    if daemon.get("status"):
        extra += f" — {daemon['status']}"
    lines.append(f"daemon:       {state}{extra}")
    if "readyz" in daemon:
        rz = daemon["readyz"]
        lines.append(f"readyz:       {'ok' if rz['ok'] else 'FAIL'} ({rz['url']})")
    disk = report.get("disk") or {}
    if "free_bytes" in disk:
        lines.append(
            f"disk:         {'FULL — ' if disk['full'] else ''}"
            f"{disk['free_bytes'] / 2**20:.1f} MiB free of {disk['total_bytes'] / 2**20:.1f} MiB"
        )
    counts = report.get("counts")
    if counts:
        chans = ", ".join(f"{k} {v}" for k, v in sorted(counts["by_channel"].items()))
        lines.append(
            f"conversations: {counts['conversations']} ({chans or 'none'}), {counts['turns']} turns"
        )
        lines.append(
            f"abbreviations pending: {counts['pending_abbreviations']} "
            f"({counts['abbreviations_to_retry']} to retry)"
        )
        lines.append(f"replies pending:  {counts.get('replies_pending', 0)}")
        lines.append(
            f"external:     {counts['external_parties']} parties, "
            f"{counts['pending_escalations']} escalations pending"
        )
    outbox = report.get("outbox")
    if outbox:
        lines.append(f"outbox:       {outbox['pending']} pending, {outbox['failed']} failed")
    index = report.get("index")
    if index:
        lines.append(
            f"index:        {'consistent' if index['ok'] else 'INCONSISTENT'} — "
            f"{index['transcripts']} transcripts, {index['transcript_turns']} turn lines, "
            f"{index['index_turns']} indexed, FTS {index['fts_documents']} "
            f"(integrity {index['fts_integrity']}), {index['unindexed_bytes']} bytes to index"
        )
    for problem in report.get("problems", []):
        lines.append(f"problem:      {problem}")
    return "\n".join(lines)


async def live_status(services: Services) -> str:
    """The daemon's one-line state for ``systemctl status`` (``STATUS=``)."""
    conversations = await services.index.count()
    pending = await services.outbox.pending_count()
    abbreviations = len(await services.index.needing_abbreviation())
    health = services.health()
    channels = health.get("channels") or {}
    up = [name for name, started in channels.items() if started]
    down = [name for name, started in channels.items() if not started]
    parts = [
        f"channels {', '.join(up) or 'none'}" + (f" (down: {', '.join(down)})" if down else ""),
        f"{conversations} conversations",
        f"outbox {pending} pending",
        f"{abbreviations} abbreviations pending",
    ]
    if health.get("spooled"):
        parts.append(f"{health['spooled']} messages held in memory (storage failing)")
    if health.get("repliesWaitingForStorage"):
        parts.append(
            f"{health['repliesWaitingForStorage']} replies waiting to be written (storage failing)"
        )
    for name, problems in (health.get("channelProblems") or {}).items():
        parts.extend(f"{name}: {problem}" for problem in problems)
    return "ready: " + "; ".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``my-agent status`` (the CLI adds --config)."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--quick", action="store_true", help="skip FTS5's integrity-check (large indexes)"
    )


def main(args: argparse.Namespace, config: AppConfig) -> int:
    """``my-agent status``: print the report, return its exit status."""
    report = collect(config, deep=not getattr(args, "quick", False))
    if getattr(args, "json", False):
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_text(report))
    return int(report["exit_code"])
