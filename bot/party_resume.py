"""A known party's messages a restart owes an answer.

A known party's message is recorded in their file (:mod:`bot.external`) before its
answer is queued (:mod:`bot.strangers`), and that queue lives in memory: a stop or a
crash before the answer, an outage of the model that outlasted the process, or an album
still being collected, left it unanswered, and nothing answered it after the restart
(the owner's turns have :mod:`bot.resume`). At start (bot/daemon.py, before the channels,
so that what they deliver queues behind it) :func:`resume_known_parties` answers them.

Owed is a message of a party known now (as the config has it now, :mod:`bot.party_tiers`)
and when it came, received within
:data:`RESUME_WINDOW_SECONDS`, that expected an answer (addressed or a photo of an album,
not a command), after the party's last ``/new`` and after their last answered message.
Answered is exact, per message: the answer is queued under ``{channel}:{ref}:reply`` of
the last message it answers, and its line in the party's file says ``answers: ref``; the
answers run one after another per party, so an answered message answers all before it.
A message the hourly budget refused (:mod:`bot.party_budget`) counts as answered: its
``refused`` event in the party's file says so, and a restart never answers it (it
answered them once the hour was over, the bill the budget bounds).
A party owed several messages gets one answer to them all, as an album does.

An untrusted party's message is recorded in their file before it is acknowledged and
escalated; an album is handled once it is complete (a second after its last photo), and
what they send meanwhile after it (:mod:`bot.strangers`). A stop or a crash in between
left it recorded and never escalated: the owner never heard of it.
:func:`escalate_cut_messages` makes that escalation at start, when their file ends in
such messages (within the window, with nothing of ours after them), with the rate limit
as it was then (a message the rate limit held back is held back again), for a party
untrusted when it came and not blocked now (one ``trust.contacts`` names since is still
escalated: they wrote as a stranger and the owner has not heard of it; one the config
blocks since is not).

An answer is written to the party's file before its outbox row: one whose row a crash
kept from being written counts as answered there, so it is queued again from the file
(:func:`requeue_unqueued_answers`, as :func:`bot.resume.requeue_unsent_replies` does
for the owner): those after the party's last answer that has its row, in the file's
order (the wall clock may have been set back meanwhile), or, when none has one, those
made in the ten minutes before the newest outbox row: a lost or replaced state.db never
re-sends old answers. An older ``state.db`` put back under newer files (a backup:
:mod:`bot.store_generations`) lacks the rows of every answer made since it was saved,
sent or not, and before session 40 each of them after the party's last answer it held
was sent to the contact a second time: those are set aside instead (rows never sent,
:data:`bot.store_generations.UNCHECKED`), and counted in the owner's notice
(:func:`bot.store_generations.tell_unchecked`), as the owner's replies are. The rest goes
by the files alone (what is owed an answer, what an untrusted party's escalation
missed): an older ``state.db`` changes nothing there.

Both take the daemon's ``stop`` (a SIGTERM during its start): set, they end between two
parties, and what is left is found again from the files at the next start.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.commands import COMMANDS, parse_command
from bot.events import InboundMessage, OutboundMessage, iso, utcnow
from bot.moments import parse_moment, require_moment
from bot.parties import PartyRecord
from bot.party_edits import EDIT_MARK
from bot.party_lines import answered_message
from bot.party_tiers import handles_of, tier_now
from bot.resume import newest_row
from bot.state_new import born_at
from bot.store_generations import UNCHECKED, Generations, read_generations
from bot.transcript_lines import Line
from bot.turn_recorder import reply_target

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

# A restart after a long outage does not answer what is older than this: by then the
# party has given up waiting, and an answer to last week's chatter is noise.
RESUME_WINDOW_SECONDS = 24 * 3600


async def _recent_parties(
    services: Services, tier: str, since: str, now_also: tuple[str, ...] = ()
) -> list[PartyRecord]:
    """The parties of ``tier`` who wrote since ``since`` and are of ``tier`` (or of one
    of ``now_also``) as the config has it now (one whose record changed between the query
    and its read is left out)."""
    # The window's messages (a range of external_messages_time), not every message
    # stored: SQLite read "SELECT DISTINCT ... JOIN" through every party's messages.
    rows = await services.external.db.fetchall(
        "SELECT p.id, json_extract(p.meta, '$.handles') FROM external_parties p"
        " WHERE p.tier = ? AND p.id IN"
        " (SELECT party_id FROM external_messages WHERE direction = 'in' AND timestamp >= ?)",
        (tier, since),
    )
    parties = []
    for party_id, handles in rows:
        party = await services.external.get(party_id)
        if party is None or party.tier != tier:
            continue
        # as the config has it now (the owner may have taken them off trust.contacts
        # since: a restart answered a contact no longer known)
        now, _ = tier_now(
            services.config,
            party.channel,
            party.party_key,
            party.tier,
            party.tier_source,
            handles_of(handles),
        )
        if now == tier or now in now_also:
            parties.append(party)
    return parties


async def resume_known_parties(
    services: Services,
    now: datetime | None = None,
    stop: asyncio.Event | None = None,
    generations: Generations | None = None,
) -> int:
    """Queue one answer per known party whose latest messages a stop or a crash left
    unanswered; returns how many parties are answered.

    ``generations``: the stores' as this start found them (bot/daemon.py reads them
    before anything it writes; read here when not given). It runs before the owner's
    re-queue, which records the next generation: read after that, an older ``state.db``
    would look as new as the index, and its missing rows as crashes."""
    if generations is None:
        generations = await read_generations(services.state, services.index_db)
    # an older state.db put back: the answers without a row are set aside, not sent
    unchecked: list[tuple[OutboundMessage, str]] | None = [] if generations.state_older else None
    since = iso((now or utcnow()) - timedelta(seconds=RESUME_WINDOW_SECONDS))
    resumed = 0
    newest = await newest_row(services)
    # An empty outbox: the answers written since state.db was first opened may be owed
    # (a kill between a first answer's file line and its row). Before session 42 none
    # was, and a contact's first answer on a new or remade state.db was lost so.
    born = await services.state.run(born_at, write=False) if newest is None else None
    stopped = False
    for party in await _recent_parties(services, "known", since):
        if _stopping(stop):
            stopped = True
            break
        lines = await services.external.read_lines(party.id)  # read once for both
        if newest is not None:
            await requeue_unqueued_answers(services, party, lines, newest, unchecked=unchecked)
        elif born is not None and (latest := _latest_answer(lines, born)) is not None:
            await requeue_unqueued_answers(
                services, party, lines, latest, unchecked=unchecked, not_before=born
            )
        said = await owed_messages(services, party, lines, since)
        if not said:
            continue
        log.info("answering %d message(s) of %s left unanswered", len(said), party.id)
        services.router.strangers.answer_owed(party, said, reply_target(said[-1]))
        resumed += 1
    if unchecked and not stopped:
        # Stopped, none is set aside: the generations are not advanced either
        # (bot.resume), so the next start finds them again, and tells the owner.
        await _set_aside(services, unchecked)
    return resumed


async def _set_aside(services: Services, unchecked: list[tuple[OutboundMessage, str]]) -> None:
    """Rows never sent for the answers an older ``state.db`` has none for: the next start
    (the generations equal again) finds each answer with its row."""
    await services.outbox.set_aside(unchecked, UNCHECKED)
    log.warning(
        "answers to known parties written since state.db was saved not sent again (%d): "
        "whether they reached them is not known",
        len(unchecked),
    )
    if services.recovery is not None:
        services.recovery.unchecked_answers += len(unchecked)


def _stopping(stop: asyncio.Event | None) -> bool:
    if stop is None or not stop.is_set():
        return False
    log.info("stop asked for: the parties' owed messages are left for the next start")
    return True


async def owed_messages(
    services: Services, party: PartyRecord, lines: list[Line], since: str
) -> list[InboundMessage]:
    """What ``party`` said since ``since`` that is owed an answer, oldest first
    (``lines``: their file)."""
    tier = "untrusted"
    answered: set[str] = set()  # the refs our answers in the file name
    recent: list[tuple[Line, bool]] = []  # their messages since the window: (line, owed)
    for line in lines:
        kind = line.get("type")
        if kind == "meta":
            tier = str(line.get("tier", tier))
        elif kind == "event" and line.get("event") == "tier":
            tier = str(line.get("tier", tier))
        elif kind == "event" and line.get("event") == "reset":
            recent = []  # they started afresh (/new): what came before is not owed
        elif kind == "message" and line.get("direction") == "out":
            if line.get("answers"):
                answered.add(str(line["answers"]))
        elif kind == "event" and line.get("event") == "refused" and line.get("ref"):
            # left unanswered on purpose (over the hourly budget): as good as answered
            answered.add(str(line["ref"]))
        elif kind == "message" and str(line.get("timestamp", "")) >= since:
            ref = line.get("messageRef")
            if ref:
                recent.append((line, tier == "known" and _expects_answer(line)))
    owed: list[Line] = []
    for line, expects in reversed(recent):
        ref = str(line["messageRef"])
        if ref in answered or await services.outbox.has_key(f"{party.channel}:{ref}:reply"):
            break  # answered: so is everything before it
        if expects:
            owed.append(line)
    return [answered_message(party, line) for line in reversed(owed)]


def _expects_answer(line: Line) -> bool:
    """Whether a known party's message got an answer from the model when it came, as
    :meth:`bot.strangers.StrangerFlow.handle` decides: an album's photos do, a message
    not addressed to us (a bounce, an out-of-office reply) and a command do not."""
    if line.get("kind", "message") != "message":
        return False
    if line.get("album"):
        return True
    if line.get("addressed") is False:
        return False
    command = parse_command(str(line.get("content", "")))
    return command is None or command[0] not in COMMANDS


async def requeue_unqueued_answers(
    services: Services,
    party: PartyRecord,
    lines: list[Line],
    newest: str,
    window_seconds: float = 600.0,
    unchecked: list[tuple[OutboundMessage, str]] | None = None,
    not_before: str | None = None,
) -> int:
    """Queue again the answers to ``party`` in their file (``lines``) whose outbox row a
    crash kept from being written (module docstring); ``newest``: the newest outbox
    row's time. Returns how many were queued.

    ``unchecked`` given (``state.db`` older than the index): each such answer is added
    to it (with its key) instead, to be set aside unsent; its missing row says nothing
    of a crash.

    The answers after the last one that has its row, in the file's order: they run one
    after another per party, so only those can have lost theirs, whatever the wall clock
    said when they were written (one set back hid them from a scan by time before
    session 20). A party none of whose answers has a row (a lost state.db, or a crash at
    their first answer) has those made ``window_seconds`` before ``newest`` or later,
    and not before ``not_before`` (an empty outbox: when state.db was first opened,
    ``newest`` the party's latest answer since; history before it is never sent)."""
    start = require_moment(newest)
    since = iso(start - timedelta(seconds=window_seconds))
    if not_before is not None:
        since = max(since, not_before)
    answers = [line for line in lines if _answer_line(line)]
    unqueued: list[Line] = []
    anchored = False
    for line in reversed(answers):
        if await services.outbox.has_key(f"{party.channel}:{line['answers']}:reply"):
            anchored = True
            break
        unqueued.append(line)
    if not anchored:
        unqueued = [line for line in unqueued if str(line.get("timestamp", "")) >= since]
    theirs = {str(line["messageRef"]): line for line in lines if _inbound_line(line)}
    flow = services.router.strangers
    for line in reversed(unqueued):
        ref = line["answers"]
        answered = theirs.get(str(ref))
        answering = answered_message(party, answered) if answered else None
        key = f"{party.channel}:{ref}:reply"
        text = str(line.get("content", ""))
        if unchecked is not None:
            unchecked.append((flow.message_to_party(party, text, answering=answering), key))
            continue
        log.warning("answer to %s's message %s was never queued: queuing it now", party.id, ref)
        await flow.queue_to_party(party, text, dedup=key, answering=answering)
    return 0 if unchecked is not None else len(unqueued)


def _answer_line(line: Line) -> bool:
    return bool(
        line.get("type") == "message" and line.get("direction") == "out" and line.get("answers")
    )


def _inbound_line(line: Line) -> bool:
    return bool(
        line.get("type") == "message" and line.get("direction") == "in" and line.get("messageRef")
    )


async def escalate_cut_messages(
    services: Services, now: datetime | None = None, stop: asyncio.Event | None = None
) -> int:
    """Acknowledge and escalate (as it would have been, rate limits included) what an
    untrusted party sent last when a stop or a crash came before it was handled (module
    docstring); returns for how many parties."""
    since = iso((now or utcnow()) - timedelta(seconds=RESUME_WINDOW_SECONDS))
    escalated = 0
    # One the owner has listed in trust.contacts since is still escalated (they wrote
    # as a stranger, and the owner has not heard of it: left alone, nothing answered or
    # told of it at all); one the config blocks since is not.
    for party in await _recent_parties(services, "untrusted", since, now_also=("known",)):
        if _stopping(stop):
            break
        cut, last_escalation = cut_messages(await services.external.read_lines(party.id))
        cut = [line for line in cut if str(line.get("timestamp", "")) >= since]
        if not cut:
            continue
        log.info("escalating %d message(s) of %s cut by a restart", len(cut), party.id)
        # the rate limit as it was when they came, not as it is now (as now for a time
        # their file does not hold as one: before session 42 it raised ValueError, and
        # the daemon did not start as long as the line was there)
        at = parse_moment(cut[-1].get("timestamp")) or now or utcnow()
        as_then = replace(party, last_escalation=last_escalation)
        said = [answered_message(party, line) for line in cut]
        await services.router.strangers.escalate_owed(as_then, said, at)
        escalated += 1
    return escalated


def cut_messages(lines: list[Line]) -> tuple[list[Line], str | None]:
    """The messages a party's file (``lines``) ends in with nothing of ours after them
    (no answer, acknowledgement or escalation, no tier set), among those that get an
    acknowledgement and an escalation (an album's photos, a message addressed to us
    that is not a command: :func:`_expects_answer`), and the time of their last
    escalation before them."""
    cut: list[Line] = []
    escalated: str | None = None  # their last escalation's time
    before: str | None = None  # ... as it was when the cut messages began
    for line in lines:
        kind = line.get("type")
        if kind == "message" and line.get("direction") == "in":
            if not cut:
                before = escalated
            cut.append(line)
            continue
        if kind == "event" and line.get("event") == "escalation" and not line.get(EDIT_MARK):
            escalated = str(line.get("timestamp") or "") or escalated
        if kind in ("message", "event"):
            cut = []  # handled (an escalation, an acknowledgement, a command's answer)
    return [line for line in cut if _expects_answer(line)], before


def _latest_answer(lines: list[Line], born: str) -> str | None:
    """The time of the latest answer in a party's file written since ``born`` (state.db's
    first open), or None."""
    stamps = (str(line.get("timestamp", "")) for line in lines if _answer_line(line))
    return max((stamp for stamp in stamps if stamp >= born), default=None)
