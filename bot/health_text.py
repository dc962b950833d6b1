"""The text form of ``my-agent status``'s report (:func:`bot.healthcheck.collect`).

One ``label: value`` row per part of the report, the labels in one column; why
``/readyz`` did not answer ready in words (the checks its answer says failed), for the
report's problems as well as its ``readyz`` row.
"""

from __future__ import annotations

from typing import Any

from bot.state_new import made_new_text


def not_ready_because(readyz: dict[str, Any]) -> str:
    """Why ``/readyz`` did not answer ready, in words: the checks its body says failed.

    "/readyz is not ok: 503" alone sent the owner looking for what was wrong, while the
    answer named it (``"channels": {"telegram": false}``: a refused bot token, say)."""
    if readyz.get("error"):
        return str(readyz["error"])
    checks = (readyz.get("body") or {}).get("checks") or {}
    why: list[str] = []
    if checks.get("core") is False:
        why.append("the daemon is still starting")
    down = [name for name, up in (checks.get("channels") or {}).items() if not up]
    if down:
        kept = readyz.get("channel_problems") or []
        causes = [p for p in kept if p.split(":", 1)[0] in down]
        said = "; ".join(["the daemon's log says why", *causes])
        why.append(f"not connected: {', '.join(down)} ({said})")
    if checks.get("accepting") is False:
        why.append("not accepting messages (stopping)")
    if checks.get("storage") is False:
        why.append("storage failing: messages held in memory")
    status = f"HTTP {readyz.get('http_status')}"
    return f"{status}, {'; '.join(why)}" if why else status


# From this age (seconds) on, the daemon's status line is shown with it.
STATUS_AGE_SHOWN = 5.0
# What the offline brain (no language model configured) answers with, as the status
# line and the report's brain row say it.
OFFLINE_STATE = "replies recall-only"


def _count(n: int, one: str, many: str = "") -> str:
    """``1 party``, ``2 parties`` (it said "1 parties, 1 escalations pending")."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _pending_notes(counts: dict[str, Any]) -> str:
    """``3 (1 failed, to retry; 2 not yet written)``, with how many of the failed the
    offline stand-in summarises until the model writes their notes (they read as noted,
    and the model still owes them). Right after ``my-agent reindex`` every idle
    conversation without notes read "to retry", as if its notes had failed: they are
    queued, never tried (``abbreviations_to_retry`` counts the failures alone)."""
    pending = int(counts["pending_abbreviations"])
    failed = int(counts["abbreviations_to_retry"])
    if not pending:
        return "0"
    parts = []
    if failed:
        retry = f"{failed} failed, to retry"
        stand_ins = int(counts.get("offline_stand_ins") or 0)
        if stand_ins:
            retry += f", {_count(stand_ins, 'offline stand-in')} owed to the model"
        parts.append(retry)
    if pending > failed:
        parts.append(f"{pending - failed} not yet written")
    return f"{pending} ({'; '.join(parts)})"


def _messages(counts: dict[str, Any]) -> str:
    """``46 messages in 23 turns``: stored messages, and the turns they make (a question
    and its replies share one), the figure /status and the dashboard call turns."""
    return f"{_count(counts['turns'], 'message')} in {_count(counts['turn_numbers'], 'turn')}"


def _vectors(counts: dict[str, Any]) -> str:
    """``46 of 46 messages, 2 of 2 notes (model …)``: a model change drops every vector
    and the daemon embeds them again, searching by keyword meanwhile; this shows how far."""
    model = counts.get("embedding_model")
    if not model:
        return "none (keyword-only search until an embedding model loads)"
    messages = counts.get("recall_turns", counts["turns"])  # the messages recall reads
    return (
        f"{counts['turn_vectors']} of {_count(messages, 'message')}, "
        f"{counts['note_vectors']} of {_count(counts['notes'], 'note')} (model {model})"
    )


def _pages(index: dict[str, Any]) -> str:
    """The last check of every page of the index: by the daemon once a day (reading
    them all took 41 s for a 640 MB store, so status no longer does unless asked)."""
    checked = index.get("pages_checked")
    if not checked:
        return f"{index['pages']} (the daemon checks every page once a day; --pages checks now)"
    when = str(checked)[:16].replace("T", " ") + " UTC"
    return f"{index['pages']} (every page checked {when}; --pages checks now)"


def ended_text(daemon: dict[str, Any]) -> str:
    """How a daemon that recorded its error exit ended: "its start was refused (exit
    74): ..." or "it ended with exit 70: ..."."""
    code = daemon["exit_code"]
    head = (
        f"its start was refused (exit {code})"
        if daemon.get("refused")
        else f"it ended with exit {code}"
    )
    reason = daemon.get("exit_reason")
    return f"{head}: {reason}" if reason else head


def format_text(report: dict[str, Any]) -> str:
    """Human-readable summary of :func:`collect`'s report, one ``label:`` column wide
    enough for the longest label (the values started in three different columns)."""
    daemon = report.get("daemon", {})
    rows: list[tuple[str, str]] = [("data dir", str(report["data_dir"]))]
    state = daemon.get("state", "unknown")
    extra = f" pid {daemon['pid']}" if daemon.get("pid") else ""
    if daemon.get("unclean"):
        # "stopped pid 7 — ready: channels web; 2 conversations" read as a live daemon's
        extra += " — it ended without stopping (killed or crashed)"
        if daemon.get("status"):
            extra += f"; its last status: {daemon['status']}"
    elif daemon.get("exit_code"):
        # a refused start said "it ended without stopping (killed or crashed)" before
        # session 42: its daemon.json still said "starting"
        extra += f" — {ended_text(daemon)}"
    elif daemon.get("status") and daemon["status"] != state:  # not "stopped pid 7 — stopped"
        extra += f" — {daemon['status']}"
        age = daemon.get("status_age_seconds") or 0
        if age >= STATUS_AGE_SHOWN and state != "stopped":
            # "1 abbreviations pending" there, "abbreviations pending: 0" below: the line
            # is the daemon's of up to 30 s ago, the rows are read now
            extra += f" (as of {age:.0f} s ago)"
    rows.append(("daemon", f"{state}{extra}"))
    if daemon.get("brain"):
        brain = str(daemon["brain"])
        said = f" (no API key: {OFFLINE_STATE}, no model answers)" if brain == "offline" else ""
        rows.append(("brain", f"{brain}{said}"))
    if "readyz" in daemon:
        rz = daemon["readyz"]
        if rz["ok"]:
            rows.append(("readyz", f"ok ({rz['url']})"))
        else:
            # why, not a bare "FAIL": nothing listening (a stopped daemon) is not a
            # daemon answering 503, which names its failed checks
            why = not_ready_because(rz)
            if rz.get("error"):
                rows.append(("readyz", f"no ready answer from {rz['url']}: {why}"))
            else:
                rows.append(("readyz", f"not ready ({rz['url']}): {why}"))
    disk = report.get("disk") or {}
    if "free_bytes" in disk:
        rows.append(
            (
                "disk",
                f"{'FULL — ' if disk['full'] else ''}{disk['free_bytes'] / 2**20:.1f} MiB free "
                f"of {disk['total_bytes'] / 2**20:.1f} MiB",
            )
        )
    counts = report.get("counts")
    if counts:
        chans = ", ".join(f"{k} {v}" for k, v in sorted(counts["by_channel"].items()))
        rows += [
            (
                "conversations",
                f"{counts['conversations']} ({chans or 'none'}), {_messages(counts)}",
            ),
            ("abbreviations pending", _pending_notes(counts)),
            ("vectors", _vectors(counts)),
            ("replies pending", str(counts.get("replies_pending", 0))),
            (
                "external",
                f"{_count(counts['external_parties'], 'party', 'parties')}, "
                f"{_count(counts['pending_escalations'], 'escalation')} pending",
            ),
        ]
    outbox = report.get("outbox")
    if outbox:
        # the oldest's time: a backlog held through an outage shows how long it waits
        oldest = f" (the oldest queued {outbox['oldest_pending']})" if outbox["pending"] else ""
        rows.append(("outbox", f"{outbox['pending']} pending{oldest}, {outbox['failed']} failed"))
    if report.get("state_new"):
        rows.append(("state.db", made_new_text(report["state_new"])))
    index = report.get("index")
    if index:
        lines_counted = index["transcript_turns"]
        if lines_counted is None:
            lines_counted = "uncounted (--quick)"
        rows.append(
            (
                "index",
                f"{'consistent' if index['ok'] else 'INCONSISTENT'} — "
                f"{index['transcripts']} transcripts, {lines_counted} turn lines, "
                f"{index['index_turns']} indexed, FTS {index['fts_documents']} "
                f"(integrity {index['fts_integrity']}), {index['unindexed_bytes']} bytes to index",
            )
        )
        if index.get("pages", "skipped") != "skipped":
            rows.append(("pages", _pages(index)))
    rows += [("problem", problem) for problem in report.get("problems", [])]
    width = max(len(label) for label, _ in rows) + 2
    return "\n".join(f"{label + ':':<{width}}{value}" for label, value in rows)
