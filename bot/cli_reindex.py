"""``my-agent reindex``: replace ``conversations.db`` with one rebuilt from the transcripts
(recovery rebuilds the rows), and say what was rebuilt and how many vectors the new index
owes. The old index is set aside until the rows are rebuilt, and put back if that fails;
its vectors still valid (the same model, the same text) are copied into the new one
before it goes (:mod:`bot.reindex_carry`). The others are the daemon's to embed, in the
background at its start; ``--vectors`` embeds them here, after the store is given back
(:mod:`bot.reindex_vectors`).

The report is a few lines for the owner by default (it printed the raw JSON, as the
other commands do only with ``--json``), the JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from typing import Any

from bot import exitcodes, store_lock
from bot.cli_common import command_config, command_log_level, print_json, setup_logging
from bot.cli_store import _with_services
from bot.reindex_vectors import (
    NO_VECTORS,
    counted,
    embed_now,
    kept_line,
    owed_line,
    owed_vectors,
    vectors_line,
)
from bot.transcript_lines import SKIPPED_LINE_WARNINGS

log = logging.getLogger("my_agent.cli")


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild the index; the exit status (75 while the store is in use)."""
    from bot.health_daemon import data_dir_unreadable
    from bot.index_files import aside_path, delete_index, restore_index, set_index_aside
    from bot.journal import journal_in_use
    from bot.recovery_reindex import save_before_reindex
    from bot.reindex_carry import carry_vectors
    from bot.service_data_dir import DataDirError, check_data_dir
    from bot.service_databases import DatabaseOpenError, check_state

    config = command_config(args, secrets=False)
    setup_logging(command_log_level(config.logging.level))
    unreadable = data_dir_unreadable(config.data_dir)
    if unreadable:  # before anything is deleted (an unlink denied was a traceback)
        print(f"my-agent: {unreadable}", file=sys.stderr)
        return exitcodes.EX_DATADIR
    try:
        # Held from before the old index is set aside until the rows are rebuilt (shared
        # from then on): a daemon starting meanwhile waits for it (bot.store_lock) instead
        # of opening the index about to be set aside, or taking the journal before the
        # rebuild could.
        lock = store_lock.try_lock(config.data_dir, exclusive=True)
    except OSError as exc:
        print(f"my-agent: cannot lock {config.data_dir} for the reindex: {exc}", file=sys.stderr)
        return exitcodes.EX_DATADIR
    # (the journal too: a daemon of a version that did not take the maintenance lock)
    if lock is None or journal_in_use(config.conversations_dir):
        store_lock.release(lock)
        # deleting the index under a running daemon would break its searches and writes
        log.error(
            "my-agent is running on %s (the daemon, or a conversations or search command): "
            "stop it before reindexing",
            config.data_dir,
        )
        return exitcodes.EX_TEMPFAIL
    try:
        # before anything is deleted: a read-only file system, or a file where the
        # conversations folder belongs, failed in the delete as "internal error" (exit 70)
        check_data_dir(config)
    except DataDirError as exc:
        store_lock.release(lock)
        print(f"my-agent: {exc}", file=sys.stderr)
        return exitcodes.EX_DATADIR
    try:
        # state.db opened (and migrated) before the index is deleted: one the services
        # then refused (a newer version's, damaged) left the index deleted (session 39)
        asyncio.run(check_state(config))
    except DatabaseOpenError as exc:
        store_lock.release(lock)
        print(f"my-agent: {exc}; {config.index_path} is left as it is", file=sys.stderr)
        return exitcodes.EX_DATABASE
    started = time.monotonic()
    try:
        # What the old index holds of a deleted transcript or party record is all that is
        # left of it: saved before the index goes (a copy that cannot be written: nothing
        # is deleted)
        saved = save_before_reindex(
            config.index_path, config.conversations_dir, config.external_dir
        )
    except OSError as exc:
        store_lock.release(lock)
        print(
            f"my-agent: {exc}: what the index holds of a deleted transcript or party record"
            f" cannot be saved, so {config.index_path} is left as it is (free space, or fix"
            " the permissions, and run the reindex again)",
            file=sys.stderr,
        )
        return exitcodes.EX_DATADIR

    skipped = SkippedLines()
    aside = aside_path(config.index_path)
    rebuilt = False  # the rows are rebuilt and committed: the old index never comes back

    def store_given_back() -> None:
        delete_index(aside)
        # the daemon and the reading commands may use the store from now on (a daemon
        # starting meanwhile waits for this process's journal, held while it closes)
        store_lock.share(lock)

    async def _rebuild(s: Any) -> int:
        as_json = getattr(args, "json", False)
        now = getattr(args, "vectors", False)
        nonlocal rebuilt
        report = await rebuild(s)
        report["skippedLines"] = skipped.where
        report["warnings"][:0] = saved
        if skipped.where:
            report["warnings"].append(skipped.warning())
        # The rows are rebuilt and committed (recovery's transactions): the rebuild is
        # complete, the old index never put back from here. Before session 41 the vectors
        # were embedded here first, under the exclusive lock (30 minutes on a large store,
        # the daemon kept out), and a Ctrl-C meanwhile put the old index back over the
        # rebuilt rows.
        rebuilt = True
        # What the old index holds of the same texts by the same model is copied before it
        # goes (a copy: seconds, the lock held so that no daemon embeds meanwhile); before
        # session 42 every vector was embedded again (~30 minutes at 105,000 turns).
        try:
            report["vectorsKept"] = await carry_vectors(s, aside, report["warnings"])
        except asyncio.CancelledError:
            # (said, as --vectors' Ctrl-C says it: before session 42 it exited 130 silent,
            # and the owner could not tell which index was left)
            print(
                "my-agent reindex: interrupted while the old index's vectors were copied:"
                " the rebuilt index is kept, with what was copied; the daemon embeds the"
                " rest at its start",
                file=sys.stderr,
                flush=True,
            )
            raise
        report["vectorsOwed"] = await owed_vectors(s)  # (once, after the copy)
        report["seconds"] = round(time.monotonic() - started, 2)
        store_given_back()
        if not as_json:  # (flushed: a pipe kept it until the end)
            print(format_report(report, str(config.index_path), now), flush=True)
        if now:
            said = len(report["warnings"])
            await embed_now(s, report)
            if not as_json:
                # (no model: the warning says what the daemon does)
                left = owed_line(report) if report["vectors"] is not None else None
                lines = [vectors_line(report), left]
                lines += [f"Warning: {w}" for w in report["warnings"][said:]]
                print("\n".join(line for line in lines if line), flush=True)
        if as_json:
            print_json(report)
        return 0

    # the model's absence is said once, in the report's warning, with the reason; set
    # back after (a process that goes on, the tests, kept the embedding's warnings muted)
    embedding_log = logging.getLogger("my_agent.embedding")
    level = embedding_log.level
    embedding_log.setLevel(logging.ERROR)
    transcript_log = logging.getLogger("my_agent.transcript")
    transcript_log.addHandler(skipped)
    # The old index is set aside, not deleted, until the rows are rebuilt: a rebuild that
    # failed (a migration, a full disk, Ctrl-C) left no index at all, its vectors and the
    # rows of deleted files with it (before session 40); now the old one is put back.
    set_index_aside(config.index_path)
    try:
        return int(asyncio.run(_with_services(config, _rebuild, maintenance=False)))
    finally:
        if not rebuilt and aside.exists():
            restore_index(config.index_path, aside)
            print(
                f"my-agent: the rebuild did not complete: {config.index_path} is back as it"
                " was before the reindex",
                file=sys.stderr,
            )
        elif rebuilt:
            delete_index(aside)  # (a Ctrl-C while the vectors were kept: the copy is done)
        transcript_log.removeHandler(skipped)
        embedding_log.setLevel(level)
        store_lock.release(lock)


class SkippedLines(logging.Handler):
    """The transcript lines the rebuild skipped (``conv-....jsonl:LINE``), from the
    warnings :func:`bot.transcript_lines.parse_lines` logs for them. Before session 27
    the report counted the turns indexed and said nothing of a message left out: only a
    log line among the others on stderr named it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.where: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if record.msg in SKIPPED_LINE_WARNINGS and isinstance(args, tuple) and len(args) > 1:
            self.where.append(f"{args[0]}:{args[1]}")

    def warning(self) -> str:
        shown = ", ".join(self.where[:10]) + (", ..." if len(self.where) > 10 else "")
        return (
            f"{len(self.where)} transcript line(s) could not be read and are not in the index"
            f" (the file is left as it is; repair the line by hand and reindex): {shown}"
        )


async def rebuild(s: Any) -> dict[str, Any]:
    """``reindex``'s report once the old index is set aside and the services opened
    (recovery has rebuilt the rows): the recovery's counts, ``turns`` indexed,
    ``vectors`` (None: none embedded here; :func:`bot.reindex_vectors.embed_now` with
    ``--vectors``), ``warnings``; ``vectorsOwed`` is the caller's, once the old index's
    vectors are copied (:func:`bot.reindex_vectors.owed_vectors`)."""
    report: dict[str, Any] = s.recovery.to_dict() if s.recovery else {}
    report["turns"] = await s.index.turn_rows()
    warnings: list[str] = []
    if report.get("removed"):
        warnings.append(f"{report['removed']} conversations had no transcript any more: left out")
    report["vectors"] = None
    if not s.config.embedding.enabled:
        warnings.append(NO_VECTORS.format(why="embedding.enabled is false (keyword search)"))
    elif not s.index_db.vec_available:
        warnings.append(NO_VECTORS.format(why="the sqlite-vec extension cannot be loaded"))
    report["warnings"] = warnings
    return report


def format_report(report: dict[str, Any], index_path: str, embedding_now: bool = False) -> str:
    """The owner's lines of a reindex ``report`` (:func:`rebuild` plus ``vectorsKept``,
    ``vectorsOwed``, ``seconds``); ``embedding_now``: ``--vectors`` embeds the vectors
    owed next."""
    lines = [
        f"Rebuilt {index_path} from the transcripts in {report.get('seconds', 0):.1f} s:",
        f"  {counted(int(report.get('conversations', 0)), 'conversation')}, "
        # messages: "turns" are what /status and the dashboard count, a question and its
        # reply sharing one (this said "N turns" of the messages before session 40)
        f"{counted(int(report.get('turns', 0)), 'message')} indexed",
        f"  {counted(int(report.get('parties', 0)), 'third party', 'third parties')} kept",
    ]
    kept = kept_line(report)
    lines += [
        line for line in (kept, vectors_line(report), owed_line(report, embedding_now)) if line
    ]
    waiting = int(report.get("pendingReplies", 0))
    if waiting:
        lines.append(f"  {counted(waiting, 'reply', 'replies')} to be written by the daemon")
    lines += [f"Warning: {w}" for w in report.get("warnings", [])]
    return "\n".join(lines)
