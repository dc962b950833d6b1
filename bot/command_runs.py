"""Commands with effects run at most once per received message, across a crash.

A command's answer in the outbox (``channel:message:command``) records that it ran,
but the answer is queued after the effect: a process killed in between (``/new`` has
created the fresh conversation, its answer is not queued yet) got the same message
again from its channel after the restart, and the command ran a second time (a second
empty conversation). So before a command with effects runs, its *claim* is committed to
``state.db`` (``command_runs``, state migration 2) with what the effect needs to be
recognised afterwards (``/new``: the id the fresh conversation will get, and the one it
was run in, which it may have unpinned before the crash). A redelivery
that finds the claim but no answer resumes the command: each command checks whether its
effect is there already and only completes what is missing, then answers. The claim is
deleted in the transaction that queues the answer, so the table holds only commands
interrupted by a crash.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.db import Database, SyncConn
from bot.events import iso, utcnow

log = logging.getLogger("my_agent.commands")

# The owner commands that change something (``/model`` only with an argument). The
# others (/help, /status, /search, /model alone) only read and may simply run again.
EFFECT_COMMANDS = frozenset({"new", "rename", "trust", "block", "reply", "replyall", "model"})


def has_effects(name: str, args: str) -> bool:
    """Whether ``/name args`` changes something, so it must not run twice."""
    if name == "model":
        return bool(args.strip())
    return name in EFFECT_COMMANDS


@dataclass
class CommandRun:
    """The claim of one received command: ``resumed`` when it was found, not made (the
    command was claimed before a crash and its answer never queued)."""

    channel: str
    message_id: str
    command: str
    effect: dict[str, Any] = field(default_factory=dict)
    resumed: bool = False


class CommandRuns:
    """The ``command_runs`` table of ``state.db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def find(self, channel: str, message_id: str) -> CommandRun | None:
        """The claim of message ``message_id``'s command, if one was left by a crash."""
        row = await self.db.fetchone(
            "SELECT command, effect FROM command_runs WHERE channel = ? AND message_id = ?",
            (channel, message_id),
        )
        if row is None:
            return None
        return CommandRun(channel, message_id, str(row[0]), json.loads(row[1]), True)

    async def claim(
        self, channel: str, message_id: str, command: str, effect: dict[str, Any]
    ) -> CommandRun:
        """Claim ``/command`` of message ``message_id`` (synced before it returns);
        a claim made before a crash is returned instead, ``resumed``."""

        def _claim(conn: SyncConn) -> CommandRun:
            row = conn.execute(
                "SELECT command, effect FROM command_runs WHERE channel = ? AND message_id = ?",
                (channel, message_id),
            ).fetchone()
            if row is not None:
                return CommandRun(channel, message_id, str(row[0]), json.loads(row[1]), True)
            conn.execute(
                "INSERT INTO command_runs (channel, message_id, command, effect, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (channel, message_id, command, json.dumps(effect), iso(utcnow())),
            )
            return CommandRun(channel, message_id, command, dict(effect))

        run = await self.db.run(_claim)
        if run.resumed:
            log.warning(
                "%s command /%s %s was interrupted before its answer: completing it",
                channel,
                run.command,
                message_id,
            )
        return run

    @staticmethod
    def release_unit(run: CommandRun, then: Callable[[SyncConn], Any]) -> Callable[[SyncConn], Any]:
        """``then`` (the unit queueing the answer) and the claim's deletion, in one
        transaction: either the answer records that the command ran, or the claim does."""

        def _unit(conn: SyncConn) -> Any:
            result = then(conn)
            conn.execute(
                "DELETE FROM command_runs WHERE channel = ? AND message_id = ?",
                (run.channel, run.message_id),
            )
            return result

        return _unit
