"""What the lifecycle needs from the core, and small helpers over it.

The lifecycle reads conversation records and writes only through the
:class:`~bot.conversations.ConversationManager` (transcript first, then index); the
queries here are read-only.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from bot.hooks import EventBus
from bot.index import NOTES_OWED
from bot.moments import parse_moment

if TYPE_CHECKING:
    from bot.conversations import ConversationManager


class VectorIndex(Protocol):
    """The embedding side of abbreviations (``services.vectors``, the recall subsystem)."""

    async def index_abbreviation(self, conv_id: str, text: str) -> Any: ...


class LifecycleServices(Protocol):
    """The parts of :class:`bot.services.Services` the lifecycle uses.

    ``vectors`` (a :class:`VectorIndex`) is optional and read with ``getattr``.
    """

    @property
    def bus(self) -> EventBus: ...
    @property
    def conversations(self) -> ConversationManager: ...
    @property
    def brain(self) -> Any: ...  # a Brain; a UtilityModel when a model is configured


class Owed(NamedTuple):
    """A conversation owing work (notes, a naming): the columns the lifecycle reads to
    schedule it, not the whole record (a backlog of 20,000 loaded whole at every start
    and sweep took some 60 MB)."""

    id: str
    updated: str
    needs_abbreviation: bool


_OWED_NOTES = (
    f"SELECT id, updated, needs_abbreviation FROM conversations WHERE {NOTES_OWED} ORDER BY updated"
)


async def pending_abbreviations(manager: ConversationManager) -> list[Owed]:
    """Conversations with turns whose notes are missing, stale or not embedded.

    ``needs_abbreviation = 1`` (a failed pass) or ``abbreviated_turn < turn_count`` (new
    turns since the last notes), oldest activity first.
    """
    rows = await manager.index.db.fetchall(_OWED_NOTES)
    return [Owed(row[0], row[1], bool(row[2])) for row in rows]


class Backlog(NamedTuple):
    """The conversations owing notes, sorted for the start or a sweep (:func:`backlog`)."""

    due: list[str]  # to queue now: flagged (a failed pass), or idle past the idle time
    waiting: list[tuple[str, datetime]]  # still inside their idle period: last activity
    owed: set[str]  # every conversation owing notes


async def backlog(
    manager: ConversationManager,
    now: datetime,
    idle: timedelta,
    *,
    timers: Collection[str] = (),
    busy: str | None = None,
) -> Backlog:
    """The conversations owing notes (:data:`NOTES_OWED`), oldest activity first, sorted
    into those due for a pass and those still inside their idle period, in one read.

    ``timers``: conversations with an idle timer pending (due only when flagged: the
    timer queues the rest); ``busy``: the one being written (never due). The read and
    the sorting run on the reader thread: 15,000 records parsed on the event loop held
    it up to 0.4 s at every sweep.
    """

    def read(conn: Any) -> Backlog:
        out = Backlog([], [], set())
        for conv_id, updated, flagged in conn.execute(_OWED_NOTES):
            out.owed.add(conv_id)
            if conv_id == busy:
                continue
            last = parse_moment(updated) or now
            if flagged or (last + idle <= now and conv_id not in timers):
                out.due.append(conv_id)
            else:
                out.waiting.append((conv_id, last))
        return out

    return await manager.index.db.run(read, write=False)


async def unnamed(
    manager: ConversationManager, naming_turn: int, renaming_interval: int | None = None
) -> list[Owed]:
    """Conversations past the naming turn that were never named from their turns (no
    title, or one given before any turn) and not renamed by hand, oldest activity first;
    with ``renaming_interval``, also those named that many turns ago or more (a re-naming
    owed: the idle pass that should have made it failed or was cut short)."""
    stale = "" if renaming_interval is None else " OR turn_count - last_named_turn >= ?"
    args = (naming_turn,) if renaming_interval is None else (naming_turn, renaming_interval)
    rows = await manager.index.db.fetchall(
        "SELECT id, updated, needs_abbreviation FROM conversations WHERE turn_count >= ? AND "
        f"(last_named_turn = 0{stale}) AND manually_named = 0 ORDER BY updated",
        args,
    )
    return [Owed(row[0], row[1], bool(row[2])) for row in rows]
