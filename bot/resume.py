"""Replies a restart owes: resumed, or queued again from their transcript.

At start (bot/daemon.py, before the channels, so that what they deliver first queues
behind them and joins their debounce), the user turns that recovery found unanswered
are answered now (:func:`resume_pending_replies`), and replies that reached a
transcript without reaching the outbox (a crash between the two writes) are queued again
(:func:`requeue_unsent_replies`). Apart from :class:`~bot.services.Services`, which only
opens and holds the core: this is work done once with it, from what the transcripts
record.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot.events import OutboundMessage, iso
from bot.moments import require_moment
from bot.outbox_withdrawals import WITHDRAWN
from bot.replies import ReplyTarget
from bot.state_new import born_at
from bot.store_generations import (
    UNCHECKED,
    Generations,
    advance_generations,
    read_generations,
)
from bot.transcript_lines import Line
from bot.turn_recorder import recipients

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.services")


async def resume_pending_replies(
    services: Services,
    stop: asyncio.Event | None = None,
    generations: Generations | None = None,
) -> int:
    """Answer user turns left unanswered by a crash, a stop or an outage; returns how
    many were resumed.

    ``stop`` set (the daemon's SIGTERM during its start) ends it between two
    conversations: a turn not resumed has still no reply in its transcript, so the next
    start finds it again; so with :func:`requeue_unsent_replies`, which ``generations``
    is handed to."""
    pending = services.recovery.pending_replies if services.recovery else []
    by_conv: dict[str, list[int]] = {}
    for conv_id, turn in pending:
        by_conv.setdefault(conv_id, []).append(turn)
    resumed = 0
    for conv_id, turns in by_conv.items():
        if stop is not None and stop.is_set():
            log.info(
                "stop asked for: %d conversations' replies left for the next start",
                len(by_conv) - resumed,
            )
            break
        resumed += 1
        rec = await services.conversations.get(conv_id)
        if rec is None:
            continue
        lines = {
            line.get("turnNumber"): line
            for line in services.store.read_lines(conv_id)
            if line.get("type") == "turn" and line.get("role") == "user"
        }
        for turn in turns:
            line = lines.get(turn)
            if line is None:
                continue
            target = _target_from_turn(line, rec)
            log.info("resuming reply to %s turn %d", conv_id, turn)
            owner = line.get("fromOwner")
            services.replies.submit(
                conv_id,
                turn,
                line.get("content", ""),
                target,
                sender=line.get("sender"),
                owner=owner if isinstance(owner, bool) else None,
                album=(line.get("metadata") or {}).get("media_group"),
            )
    if services.recovery:
        services.recovery.pending_replies = []
    await requeue_unsent_replies(services, stop=stop, generations=generations)
    return sum(len(turns) for turns in list(by_conv.values())[:resumed])


# How many of the newest reply rows left in the outbox anchor the re-queue scan: more
# than the replies a crash can catch between their transcript turn and their row (one
# in flight per conversation; the unsynced rows a power cut drops are newer than every
# row that survived).
ANCHOR_ROWS = 50


async def requeue_unsent_replies(
    services: Services,
    window_seconds: float = 600.0,
    stop: asyncio.Event | None = None,
    generations: Generations | None = None,
) -> int:
    """Replies made durable in a transcript whose outbox row was never written (a
    crash between the two): queue them now under their usual dedup key.

    The reply turns looked at are those the index holds from the oldest reply turn of the
    :data:`ANCHOR_ROWS` newest reply rows left in the outbox on (the index's row order is
    the order the turns were written, and what recovery caught up at this start comes
    last), and, for an index rebuilt from nothing (its order is then per conversation),
    those stamped ``window_seconds`` before the newest outbox row or later. Order
    decides, not the wall clock alone: after the clock was set back, the replies written
    since looked older than the rows before them and a scan by time missed them (before
    session 20).

    An empty outbox re-sends nothing written before ``state.db`` was first opened
    (:func:`bot.state_new.mark_born`): a state.db made anew after a loss, or one an
    upgrade first marked, has none of the rows of the history before it. What was
    written since is owed as above, with the time window taken back from the newest
    such reply: before session 42 an empty outbox re-sent nothing at all, and the first
    reply of a new store (or of a state.db made anew), cut from its row by a kill, was
    never sent.

    A ``state.db`` older than the index (put back from a backup,
    :mod:`bot.store_generations`) re-sends nothing either: its outbox lacks the rows of
    every reply written since it was saved, sent or not, and before session 40 each of
    them was queued as "cut by a crash" and sent again (a week-old backup, a week of
    replies). Those replies get rows set aside (failed, :data:`UNCHECKED`, never sent), so
    the next start finds them queued, and the owner is told how many
    (:func:`bot.store_generations.tell_unchecked`). The generations are advanced once the
    scan is done; the daemon reads them before anything of its start (``generations``):
    the known parties' answers are looked at first (:mod:`bot.party_resume`), by the same
    verdict.

    Of those, a reply in a conversation none of whose replies has a row is queued only
    inside the time window (:func:`_cut_by_a_crash`): a transcript copied into the store
    while the daemon was stopped (another machine's, a backup's) is caught up after the
    anchor, and before session 35 every reply in it was sent again. Where the
    conversation has rows, any reply without one is queued: replies of one conversation
    are not written strictly in turn order (a kill -9 under load left turn 26's reply
    without its row and turn 27's with one), so "older than its last queued reply" says
    nothing.

    ``stop`` set ends it between two replies (thousands took 80 s after a SIGTERM before
    session 27): they are queued in the index's order, so the newest rows then anchor
    the next start's scan before every reply still unqueued.
    """
    if generations is None:
        generations = await read_generations(services.state, services.index_db)
    stale = generations.state_older
    if stale:
        log.warning(
            "state.db is older than conversations.db (generation %d, the index's %s: put "
            "back from a backup?): the replies written since it was saved are not sent again",
            generations.state,
            generations.index,
        )
    found = await newest_row(services)
    if found is None:
        since = await _since_born(services, window_seconds)
        if since is None:
            await _advance(services, stale, stop)
            return 0
        anchor = _PAST_EVERY_ROW  # no row: the time window alone
    else:
        newest = require_moment(found)
        since = iso(newest - timedelta(seconds=window_seconds))
        anchor = await _anchor_turn_id(services)
    rows = await services.index_db.fetchall(
        "SELECT conversation_id, turn_number, content, channel, recall, timestamp FROM turns "
        "WHERE role = 'assistant' AND (id >= ? OR timestamp >= ?) ORDER BY id",
        (anchor, since),
    )
    queued = 0
    unchecked: list[tuple[OutboundMessage, str]] = []
    has_rows: dict[str, bool] = {}
    users: dict[str, dict[Any, Line]] = {}  # conversation -> its user turns by number
    for conv_id, turn, content, channel, recall, stamp in rows:
        if stop is not None and stop.is_set():
            log.info("stop asked for: the replies never queued are left for the next start")
            if stale:  # the next start finds state.db older still, and sets them aside
                return queued
            break
        key = f"{conv_id}:{turn}:reply"
        if await services.outbox.has_key(key):
            continue
        if conv_id not in has_rows:
            has_rows[conv_id] = await _has_reply_rows(services, conv_id)
        if not _cut_by_a_crash(str(stamp), has_rows[conv_id], since):
            log.info(
                "reply to %s turn %d has no outbox row, nor has any reply of its "
                "conversation, and is older than the last run (a transcript copied in): "
                "not sent again",
                conv_id,
                turn,
            )
            continue
        rec = await services.conversations.get(conv_id)
        if rec is None:
            continue
        if conv_id not in users:
            # read once per conversation: a restored state.db's week of replies read
            # the whole transcript again for each
            users[conv_id] = {
                line.get("turnNumber"): line
                for line in await services.store.aread_lines(conv_id)
                if line.get("type") == "turn" and line.get("role") == "user"
            }
        target = _target_from_turn(users[conv_id].get(turn) or {}, rec, channel)
        # a readout (recall = 0) stays plain text, as when it was first queued
        reply = target.reply(content, conv_id, plain=not recall)
        # marked: a row queued here says nothing of the conversation's rows when the
        # reply was written (_has_reply_rows)
        reply = replace(reply, metadata={**reply.metadata, REQUEUED: True})
        if stale:
            unchecked.append((reply, key))
            continue
        await services.outbox.enqueue(reply, dedup_key=key)
        log.warning("reply to %s turn %d was never queued (crash): queued now", conv_id, turn)
        queued += 1
    if unchecked:
        # Rows of their own, never sent: the next start (the generations equal again)
        # finds each reply with its row, and the owner is told once
        # (bot.store_generations.tell_unchecked).
        await services.outbox.set_aside(unchecked, UNCHECKED)
        log.warning(
            "%d replies written since state.db was saved were not sent again: "
            "whether they reached their chats is not known",
            len(unchecked),
        )
        if services.recovery is not None:
            services.recovery.unchecked_replies += len(unchecked)
    await _advance(services, stale, stop)
    return queued


async def _advance(services: Services, stale: bool, stop: asyncio.Event | None) -> None:
    """Advance the generations, unless a stop cut this start short while ``state.db`` is
    older: the known parties' answers may not have been set aside yet
    (:mod:`bot.party_resume`), and the next start must find it older still."""
    if stale and stop is not None and stop.is_set():
        return
    await advance_generations(services.state, services.index_db)


async def newest_row(services: Services) -> str | None:
    """The newest outbox row's time, the re-queue scans' reference for "the last run"
    (None for an empty outbox). A row set aside as :data:`UNCHECKED` is left out: made by
    a start, not by the run before it (the known parties' are made before the owner's
    scan, and made it look at the last ten minutes only)."""
    row = await services.state.fetchone(
        "SELECT max(created) FROM outbox WHERE last_error IS NOT ?", (WITHDRAWN + UNCHECKED,)
    )
    return None if row is None or row[0] is None else str(row[0])


async def _since_born(services: Services, window_seconds: float) -> str | None:
    """For an empty outbox: the time from which a reply without a row is owed, the
    later of ``state.db``'s first open and ``window_seconds`` before the newest reply
    written since (None when there is none, or no first open was recorded). Only the
    replies in flight when the first row was due can have been cut: a transcript
    copied in has at most that window of its replies sent, as with rows."""
    born = await services.state.run(born_at, write=False)
    if born is None:
        return None
    row = await services.index_db.fetchone(
        "SELECT max(timestamp) FROM turns WHERE role = 'assistant' AND timestamp >= ?", (born,)
    )
    if row is None or row[0] is None:
        return None
    newest = require_moment(str(row[0]))
    return max(born, iso(newest - timedelta(seconds=window_seconds)))


def _cut_by_a_crash(stamp: str, has_rows: bool, since: str) -> bool:
    """Whether a reply turn without an outbox row can be one a crash cut from its row:
    any, in a conversation some of whose replies have rows; else one stamped inside
    the window (``since`` on)."""
    return has_rows or stamp >= since


REQUEUED = "requeued"
"""Metadata of a reply row queued by :func:`requeue_unsent_replies`."""


async def _has_reply_rows(services: Services, conv_id: str) -> bool:
    """Whether some reply of ``conv_id`` has an outbox row made when it was written. One
    this scan queued does not count: a transcript copied in had the replies inside the
    window queued at one start, and those rows then made every older reply of it "cut
    by a crash" at the next, a batch sent again at each restart (session 38)."""
    row = await services.state.fetchone(
        # the unique index on dedup_key: the keys that start with "<conv_id>:"
        "SELECT 1 FROM outbox WHERE dedup_key > ? AND dedup_key < ? AND dedup_key LIKE ?"
        " AND json_extract(payload, '$.metadata.requeued') IS NULL LIMIT 1",
        (f"{conv_id}:", f"{conv_id};", "%:reply"),
    )
    return row is not None


# No anchor: past every index row, so that only the time window applies.
_PAST_EVERY_ROW = 2**63 - 1


async def _anchor_turn_id(services: Services) -> int:
    """The index row of the oldest reply turn among the newest reply rows in the outbox
    (:data:`_PAST_EVERY_ROW` when none of them is in the index)."""
    keys = await services.state.fetchall(
        "SELECT dedup_key FROM outbox WHERE conversation_id IS NOT NULL"
        " AND dedup_key LIKE '%:reply' ORDER BY id DESC LIMIT ?",
        (ANCHOR_ROWS,),
    )
    pairs: list[tuple[str, int]] = []
    for (key,) in keys:
        conv_id, _, rest = str(key).removesuffix(":reply").rpartition(":")
        if conv_id and rest.isdigit():
            pairs.append((conv_id, int(rest)))
    if not pairs:
        return _PAST_EVERY_ROW
    values = ", ".join("(?, ?)" for _ in pairs)
    found = await services.index_db.fetchone(
        f"SELECT min(t.id) FROM turns t JOIN (VALUES {values}) AS v"
        " ON t.conversation_id = v.column1 AND t.turn_number = v.column2"
        " WHERE t.role = 'assistant'",
        [x for pair in pairs for x in pair],
    )
    return _PAST_EVERY_ROW if found is None or found[0] is None else int(found[0])


def _target_from_turn(line: dict[str, Any], rec: Any, channel: str | None = None) -> ReplyTarget:
    """Where the reply to a recorded user turn goes (its channel metadata)."""
    meta = line.get("metadata") or {}
    chat = meta.get("chatId") or rec.channel_meta.get("chatId") or "dashboard"
    ref = meta.get("messageRef") or meta.get("messageId")
    refs = tuple(reversed(meta.get("threadRefs") or ()))
    return ReplyTarget(
        channel=channel or line.get("channel") or rec.channel,
        chat_id=str(chat),
        in_reply_to=ref,
        thread_refs=tuple(dict.fromkeys((*refs, ref) if ref else refs)),
        subject=meta.get("subject"),
        metadata=recipients(meta),
    )
