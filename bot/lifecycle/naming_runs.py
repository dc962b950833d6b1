"""Naming runs of the lifecycle: the turn-5 naming, re-naming after an idle pass, and
the namings still owed (a previous run cut short, the model down), retried by the sweep
with a backoff. A part of :class:`bot.lifecycle.Lifecycle` (its base): the rules are
in :meth:`NamingRuns._name_locked`, the model call and the offline titles in
:mod:`bot.lifecycle.naming`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from bot.brain.cost import Spending, tracking
from bot.config.model import AppConfig
from bot.lifecycle.naming import Namer, Naming
from bot.lifecycle.prompts import SPLIT_NOTE
from bot.lifecycle.records import unnamed
from bot.lifecycle.timers import Backoff, Clock
from bot.record_cache import RecordCache
from bot.tasks import spawn

log = logging.getLogger("my_agent.lifecycle")

# The field of the event that says a reply offered to split the conversation
# (:meth:`NamingRuns.split_delivered`); before session 37 the naming event's, written
# when the offer was only queued for the next reply, which could fail or never come.
SPLIT_OFFERED = "splitOffered"
# The field of the naming event that queued the offer (its subject).
SPLIT_SUGGESTED = "splitSuggested"


class NamingRuns:
    """The naming half of :class:`~bot.lifecycle.Lifecycle`."""

    config: AppConfig
    clock: Clock
    namer: Namer
    counters: Counter[str]
    _naming_tasks: dict[str, asyncio.Task[Naming | None]]
    _naming_locks: MutableMapping[str, asyncio.Lock]
    _split_noted: RecordCache[bool]  # conversations offered a split (else: read)
    _split_notes: RecordCache[str]  # conversation -> its queued split offer, until a reply
    _owed_naming: asyncio.Task[None] | None
    _naming_backoff: Backoff
    _naming_failures: Counter[str]

    if TYPE_CHECKING:  # Lifecycle's own

        @property
        def conversations(self) -> Any: ...

    def _spawn_naming(self, conv_id: str) -> None:
        task = self._naming_tasks.get(conv_id)
        if task is not None and not task.done():
            return
        task = spawn(self._name(conv_id, initial=True), name=f"naming-{conv_id}")
        self._naming_tasks[conv_id] = task
        task.add_done_callback(functools.partial(self._forget_naming, conv_id))

    def _forget_naming(self, conv_id: str, task: asyncio.Task[Naming | None]) -> None:
        if self._naming_tasks.get(conv_id) is task:
            del self._naming_tasks[conv_id]

    async def _name(self, conv_id: str, *, initial: bool, retitle: bool = False) -> Naming | None:
        """Name (``initial``) or re-name a conversation unless the rules say not to;
        ``retitle``: re-name it now (a keyword title made offline, owed to the model)."""
        lock = self._naming_locks.setdefault(conv_id, asyncio.Lock())
        async with lock:
            try:
                return await self._name_locked(conv_id, initial=initial, retitle=retitle)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("naming %s failed", conv_id)
                self.counters["naming_failed"] += 1
                return None

    async def _name_locked(
        self, conv_id: str, *, initial: bool, retitle: bool = False
    ) -> Naming | None:
        cfg = self.config.conversations
        rec = await self.conversations.get(conv_id)
        if rec is None or rec.manually_named or rec.turn_count < cfg.naming_turn:
            return None
        # A title given before any turn (an escalation's, bot.strangers) is a placeholder:
        # it has no named turn, and the turn-5 naming still replaces it.
        never_named = rec.last_named_turn == 0
        if initial and not never_named:
            return None  # named once already: later names come from idle passes
        stale = rec.turn_count - rec.last_named_turn >= cfg.renaming_interval_turns
        if not initial and not (never_named or stale or retitle):
            # (An idle pass also names a conversation whose turn-5 naming never ran,
            # e.g. because the daemon was down at that message.)
            return None
        if never_named and rec.title and not self._naming_backoff.ready(self.clock.now()):
            # It holds a stand-in title (keywords from an outage, an escalation's) and
            # the model failed moments ago: the sweep asks again after the backoff.
            return None
        first = max(1, rec.turn_count - cfg.naming_context_turns + 1)
        turns = await self.conversations.read_turns(conv_id, first, readouts=False)
        with tracking() as spent:
            naming = await self.namer.name(
                rec, turns, abbreviation=None if initial else rec.abbreviation
            )
        fresh = await self.conversations.get(conv_id)
        if fresh is None or fresh.manually_named:
            log.info("naming %s dropped: renamed by hand meanwhile", conv_id)
            await self._paid_for_nothing(conv_id, spent)
            return None
        # The turns it was named from: messages that arrived during the model call were
        # counted as named (through 7 for a title made of turns 1-5), and the re-naming
        # after renaming_interval_turns came that many turns late.
        through = max((int(t.get("turnNumber") or 0) for t in turns), default=rec.turn_count)
        if naming.method != "llm" and self.namer.model is not None:
            wait = self._naming_backoff.failed(self.clock.now())
            self.counters["naming_model_failed"] += 1
            if fresh.title:
                # The model could not (re-)name it (down, no usable answer): the offline
                # keywords would replace its title. Keep it; the model is asked again
                # (idle pass, sweep) after the backoff.
                log.info(
                    "naming %s skipped: no answer from the model (again in %d s)",
                    conv_id,
                    wait.total_seconds(),
                )
                await self._paid_for_nothing(conv_id, spent)
                return None
            # A first title from keywords: a stand-in, stored as named through turn 0 so
            # the naming stays owed (asked again on the sweep, at the next message or
            # idle pass, and after a restart or a reindex, since the transcript says so).
            through = 0
        elif naming.method == "llm":
            self._naming_backoff.succeeded()
        event = "title_assigned" if naming.title != fresh.title else "meta_update"
        offer = naming.suggest_split and not await self._split_offered(conv_id)
        await self.conversations.set_title_topics(
            conv_id,
            naming.title,
            # an answer without topics keeps those the conversation has (they were wiped)
            naming.topics or list(fresh.topics or ()),
            through,
            event=event,
            # what was queued; the transcript says "offered" once a reply delivered it
            # (split_delivered): a reply that failed, or a restart first, offers it at
            # the next naming that suggests it again
            **({SPLIT_SUGGESTED: naming.split_topic or True} if offer else {}),
            **spent.fields(),
        )
        self.counters["named" if initial else "renamed"] += 1
        # One "named" line per conversation: a re-naming (idle pass, every
        # renaming_interval_turns) said "named" again, word for word when the title stayed.
        if never_named:
            done = "named"
        elif event == "title_assigned":
            done = "renamed"
        else:
            done = "re-named, title kept:"
        log.info("%s %s %r %s (%s)", done, conv_id, naming.title, naming.topics, naming.method)
        if offer:
            self._split_noted[conv_id] = True
            topics = ", ".join(naming.topics) or "several subjects"
            split = naming.split_topic or "one of them"
            note = SPLIT_NOTE.format(topics=topics, split=split)
            self._split_notes[conv_id] = note
            self.conversations.add_note(conv_id, note)
        return naming

    async def _paid_for_nothing(self, conv_id: str, spent: Spending) -> None:
        """The cost of a naming call whose answer is not used (no usable answer, a rename
        by hand meanwhile), on a ``naming_failed`` event: it was recorded nowhere, and
        /status left those calls out of the conversation's cost (before session 39)."""
        if not spent.calls:
            return
        try:
            await self.conversations.append_event(conv_id, "naming_failed", **spent.fields())
        except asyncio.CancelledError:
            raise
        except Exception:  # (only the cost's record is lost)
            log.exception("cannot record the cost of naming %s", conv_id)

    async def split_delivered(self, conversation_id: str, notes: tuple[str, ...]) -> None:
        """A reply delivered ``notes`` (bus ``notes_delivered``): when the split offer was
        among them, the transcript says it was made."""
        if self._split_notes.get(conversation_id) in notes:
            self._split_notes.pop(conversation_id)
            await self.conversations.record_split_offered(conversation_id)

    async def _split_offered(self, conv_id: str) -> bool:
        """Whether a split of the conversation was offered already, in this run or an
        earlier one (a naming event with :data:`SPLIT_OFFERED`): kept in memory only, the
        offer came again after every restart, at the next re-naming that saw two subjects.
        Read only when a naming suggests a split (rare), off the event loop."""
        if conv_id in self._split_noted:
            return True
        lines = await asyncio.to_thread(self.conversations.read_lines, conv_id)
        if any(line.get("type") == "event" and line.get(SPLIT_OFFERED) for line in lines):
            self._split_noted[conv_id] = True
            return True
        return False

    async def _name_owed(self, conv_ids: list[str]) -> None:
        for conv_id in conv_ids:  # one at a time: a model call each
            if not self._naming_backoff.ready(self.clock.now()):
                return  # the model failed on the one before: the sweep goes on later
            before = self.counters["naming_model_failed"]
            # As an idle pass names: a first name, or a re-name once enough turns passed.
            await self._name(conv_id, initial=False)
            if self.counters["naming_model_failed"] > before:
                self._naming_failures[conv_id] += 1
            else:  # named (or nothing to do): its failures no longer order anything
                self._naming_failures.pop(conv_id, None)

    async def _owed_names(self) -> list[Any]:
        """Conversations owed a naming or a re-naming (:func:`unnamed`)."""
        cfg = self.config.conversations
        return await unnamed(self.conversations, cfg.naming_turn, cfg.renaming_interval_turns)

    async def _retry_naming(self, pending: set[str]) -> None:
        """Name, in the background, the conversations still owed a naming (the model
        failed at their naming, or at the start's), once the backoff after the last
        failure passed; those in ``pending`` are named after their notes (_process)."""
        if not self._naming_backoff.ready(self.clock.now()):
            return
        if self._owed_naming is not None and not self._owed_naming.done():
            return
        try:
            records = await self._owed_names()
        except Exception:
            log.exception("listing the conversations owed a naming failed")
            return
        owed = [rec.id for rec in records if rec.id not in pending]
        # Only those still owed are counted: before session 41 a conversation failed once
        # kept its count for the life of the daemon, named since or deleted.
        listed = {rec.id for rec in records}
        for conv_id in [c for c in self._naming_failures if c not in listed]:
            del self._naming_failures[conv_id]
        # Those the model failed on most go last: one it always refuses (its prompt, not
        # an outage) would otherwise stop every retry at the first conversation.
        owed.sort(key=lambda conv_id: self._naming_failures[conv_id])
        if owed:
            log.info("naming sweep: %d conversation(s) still owed a naming", len(owed))
            self._owed_naming = spawn(self._name_owed(owed), name="naming-retry")
