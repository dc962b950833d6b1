"""Whether ``state.db`` is older than ``conversations.db``: a generation both record.

The start's re-queue of replies a crash kept from the outbox
(:func:`bot.resume.requeue_unsent_replies`) takes a reply turn without an outbox row for
one a crash cut from its row. That holds while ``state.db`` is as new as the index. An
older ``state.db`` put back under newer transcripts (restored from a backup: the daemon's
own advice for a damaged one) lacks the rows of every reply written since it was saved,
and before session 40 every one of them was sent to the owner a second time.

So each start (once the re-queue has decided) and each clean stop advance a number kept
in both: ``state.db`` first (``channel_cursors`` row ``outbox`` / ``generation``, a synced
commit), then the index (``index_meta`` row ``state_generation``). A crash between the two
leaves ``state.db`` ahead, never behind; so ``state.db`` behind the index means it was
put back from an earlier time (or made anew). An index rebuilt since (``reindex``, a
corrupt one set aside) holds none, and nothing is concluded from it.

What such a start does not send again gets an outbox row set aside (:data:`UNCHECKED`,
never sent): the owner's replies (:mod:`bot.resume`) and the known parties' answers
(:mod:`bot.party_resume`); the owner is told how many once the channels are up
(:func:`tell_unchecked`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.db import Database, SyncConn
from bot.events import iso, utcnow

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.services")

STATE_CURSOR = ("outbox", "generation")  # (channel, key) in state.db's channel_cursors
INDEX_KEY = "state_generation"  # its key in conversations.db's index_meta


@dataclass(frozen=True)
class Generations:
    """The generation each store recorded: ``state`` 0 when none (a state.db made anew,
    or saved before session 40), ``index`` None when none (an index rebuilt since)."""

    state: int
    index: int | None

    @property
    def state_older(self) -> bool:
        """Whether ``state.db`` was saved before the index was last marked: put back
        from a backup (its outbox lacks the rows of what was sent since)."""
        return self.index is not None and self.state < self.index


async def read_generations(state: Database, index_db: Database) -> Generations:
    """The generations ``state`` and ``index_db`` recorded."""
    row = await state.fetchone(
        "SELECT value FROM channel_cursors WHERE channel = ? AND key = ?", STATE_CURSOR
    )
    found = await index_db.fetchone("SELECT value FROM index_meta WHERE key = ?", (INDEX_KEY,))
    return Generations(_number(row) or 0, _number(found))


async def advance_generations(state: Database, index_db: Database) -> int | None:
    """Record a generation past both in ``state.db``, then in the index; returns it, or
    None when a store refused the write (logged: a start or a stop goes on; ``state.db``
    written alone is ahead, which concludes nothing)."""
    try:
        now = await read_generations(state, index_db)
        number = max(now.state, now.index or 0) + 1

        def _state(conn: SyncConn) -> None:
            conn.execute(
                "INSERT INTO channel_cursors (channel, key, value, updated) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(channel, key) DO UPDATE SET value = excluded.value,"
                " updated = excluded.updated",
                (*STATE_CURSOR, str(number), iso(utcnow())),
            )

        def _index(conn: SyncConn) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
                (INDEX_KEY, str(number)),
            )

        await state.run(_state)  # first: never behind the index but when put back
        await index_db.run(_index)
    except Exception as exc:  # a full disk, a damaged store: the start or stop goes on
        log.warning("cannot record the stores' generation: %s", exc)
        return None
    return number


# The error of a reply row set aside at a start that found state.db older than the index.
UNCHECKED = "not checked: state.db is older than the transcripts (put back from a backup?)"


async def tell_unchecked(services: Services) -> None:
    """Tell the owner, once the channels are up, how many replies (and answers to known
    parties: :mod:`bot.party_resume`) this start did not send again because
    ``state.db`` is older than the index (their rows are set aside, so the next start
    does not tell it again)."""
    count = services.recovery.unchecked_replies if services.recovery else 0
    answers = services.recovery.unchecked_answers if services.recovery else 0
    told: list[str] = []
    if count:
        told.append(
            "Replies not sent again at start: state.db is older than the conversations (put "
            f"back from a backup?), so whether the {count} "
            f"{'reply' if count == 1 else 'replies'} written since it was saved reached their"
            " chats is not known. They are in the conversations; none was sent a second time."
        )
    if answers:
        these = "the answer" if answers == 1 else f"the {answers} answers"
        told.append(
            f"Nor {'was' if answers == 1 else 'were'} {these} to known contacts written since"
            f" then: whether {'it' if answers == 1 else 'they'} reached them is not known."
            if count
            else "Answers to known contacts not sent again at start: state.db is older than"
            " the conversations (put back from a backup?), so whether"
            f" {these} written since it was saved reached them is not known."
        )
        told[-1] += (
            f" {'It is' if answers == 1 else 'They are'} in the contacts' records; none was"
            " sent a second time."
        )
    if told:
        await services.alert_owner("\n".join(told))


def _number(row: tuple[object, ...] | None) -> int | None:
    try:
        return int(str(row[0])) if row is not None else None
    except ValueError:
        return None
