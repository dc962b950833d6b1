"""Recovery of the lifecycle: what a previous run left unfinished, queued at the start
(Flow 6), and the periodic sweep that retries what failed since (abbreviations, stale
vectors, namings), backing off while the model keeps failing. A part of
:class:`bot.lifecycle.Lifecycle` (its base, like
:class:`~bot.lifecycle.passes.AbbreviationPasses` and
:class:`~bot.lifecycle.naming_runs.NamingRuns`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.config.model import AppConfig
from bot.events import iso
from bot.extractive import HEADER
from bot.lifecycle.queue import AbbreviationQueue
from bot.lifecycle.records import VectorIndex, backlog
from bot.lifecycle.timers import Backoff, Clock, IdleTimers
from bot.tasks import spawn

if TYPE_CHECKING:
    from bot.lifecycle.abbreviation import Abbreviator

log = logging.getLogger("my_agent.lifecycle")

ENQUEUE_SLICE = 500  # conversations queued between two turns of the event loop
# The conversations noted offline (no key when they went idle) that one sweep hands to
# the model once it is configured: a store of 10,000 such conversations made 10,000
# calls in a burst otherwise. At the default sweep (300 s), 120 an hour at most.
OFFLINE_REWRITES_PER_SWEEP = 10
# Only those active in the last this many days: older ones keep their offline notes and
# keyword titles (searchable all the same) until they get a message, which re-notes them.
OFFLINE_REWRITE_DAYS = 90
# Failed passes over offline notes the sweep handed to the model (Recovery._offline_noted)
# before it stops asking for them this run: their offline notes and keyword title stand.
RETITLE_ATTEMPTS = 3
# Offline notes not owed yet, newest activity first (the flag unset: flagged, the
# backlog has them already).
_OFFLINE_NOTED = (
    "SELECT id FROM conversations WHERE turn_count > 0 AND needs_abbreviation = 0 AND "
    "substr(abbreviation, 1, ?) = ? AND updated >= ? AND id NOT IN "
    "(SELECT value FROM json_each(?)) ORDER BY updated DESC LIMIT ?"
)


class Recovery:
    """The recovery and the sweep of :class:`~bot.lifecycle.Lifecycle`."""

    config: AppConfig
    clock: Clock
    timers: IdleTimers
    queue: AbbreviationQueue
    counters: Counter[str]
    _owed_naming: asyncio.Task[None] | None
    _vector_retry: asyncio.Task[None] | None
    _vector_backoff: Backoff
    # Set by the daemon (bot.daemon_vectors.load_late_model): loads an embedding model
    # that was not there at start, given whether a download's backoff has passed.
    load_late_model: Callable[[bool], Awaitable[bool | None]] | None
    _model_retry: asyncio.Task[None] | None
    _model_backoff: Backoff
    abbreviator: Abbreviator  # (AbbreviationPasses')
    _model_down_until: datetime | None
    # Conversations whose offline notes the model is rewriting: their keyword title is
    # owed to it too, once the notes are written (AbbreviationPasses._process).
    _retitle: set[str]
    _retitle_failures: Counter[str]  # failed passes of those in _retitle
    # Offline notes the model was asked to replace this run and left (a refusal): final.
    # Only those (session 41): its pass's outcome adds or discards each.
    _offline_asked: set[str]

    if TYPE_CHECKING:  # Lifecycle's own, AbbreviationPasses' and NamingRuns'

        @property
        def conversations(self) -> Any: ...

        @property
        def vectors(self) -> VectorIndex | None: ...

        def enqueue(self, conv_id: str, reason: str = "idle") -> bool: ...

        async def _owed_names(self) -> list[Any]: ...

        async def _name_owed(self, conv_ids: list[str]) -> None: ...

        async def _retry_naming(self, pending: set[str]) -> None: ...

    async def recover(self) -> int:
        """Flow 6: queue failed passes and idle conversations with new turns; re-arm the
        timers of conversations still inside their idle period. Returns how many queued."""
        idle = timedelta(seconds=self.config.conversations.idle_timeout_seconds)
        owed = await backlog(self.conversations, self.clock.now(), idle)
        queued = await self._enqueue_all(owed.due, "recovery")
        for conv_id, last in owed.waiting:
            self.timers.touch(conv_id, last)
        # A naming owed by the last run (killed after the notes that precede it, or
        # during the turn-5 naming, or the model down then): nothing else records it once
        # the notes cover every turn. Those with notes to write are named after them
        # (_process).
        unnamed = [rec.id for rec in await self._owed_names() if rec.id not in owed.owed]
        if unnamed:
            log.info("naming %d conversation(s) a previous run left unnamed", len(unnamed))
            self._owed_naming = spawn(self._name_owed(unnamed), name="naming-recovery")
        return queued

    async def sweep(self) -> int:
        """The periodic retry: failed passes, and idle conversations with new turns that
        have no timer (e.g. a timer lost to an error). Returns how many were queued."""
        idle = timedelta(seconds=self.config.conversations.idle_timeout_seconds)
        try:
            owed = await backlog(
                self.conversations,
                self.clock.now(),
                idle,
                timers=self.timers.ids(),  # (their timers queue them)
                busy=self.queue.current,  # being written right now
            )
        except Exception:
            log.exception("abbreviation sweep failed")
            return 0
        due = owed.due or await self._offline_noted()
        queued = await self._enqueue_all(due, "sweep")
        if queued:
            log.info("abbreviation sweep queued %d conversation(s)", queued)
        self._retry_vectors()
        self._retry_model()
        await self._retry_naming(owed.owed)
        return queued

    async def _offline_noted(self) -> list[str]:
        """A few of the conversations noted offline, now owed to the model (flagged):
        their notes and keyword titles were written while no key was set, and are
        stored without the flag an outage's stand-ins keep, so before session 40 a key
        set later never brought the model to them (only a new message did).

        Paced: only when nothing else is owed (the backlog comes first), at most
        :data:`OFFLINE_REWRITES_PER_SWEEP` a sweep, the most recently active first and
        none idle longer than :data:`OFFLINE_REWRITE_DAYS`; never while the model is
        failing (its outage's own stand-ins wait for it). Each once a run: offline notes
        the model leaves in place (it refused that conversation's, or answered nothing)
        are final, as they are after an outage; a restart asks once more."""
        if self.abbreviator.method != "llm" or self.queue.pending():
            return []
        now = self.clock.now()
        if self._model_down_until is not None and now < self._model_down_until:
            return []
        since = iso(now - timedelta(days=OFFLINE_REWRITE_DAYS))
        try:
            asked = json.dumps(sorted(self._offline_asked))
            rows = await self.conversations.index.db.fetchall(
                _OFFLINE_NOTED,
                (len(HEADER), HEADER, since, asked, OFFLINE_REWRITES_PER_SWEEP),
            )
            ids = [str(row[0]) for row in rows]
            await self.conversations.flag_needs_abbreviation(ids)
        except Exception:
            log.exception("reading the conversations noted offline failed")
            return []
        if ids:
            log.info("%d conversation(s) noted offline: the model writes them now", len(ids))
            self._retitle.update(ids)  # (flagged now: the query skips them until their pass)
        return ids

    async def _retitle_failed(self, conv_id: str) -> None:
        """A pass over offline notes handed to the model (:meth:`_offline_noted`) failed.
        After :data:`RETITLE_ATTEMPTS` of them the model is not asked again this run:
        they are unflagged (their offline notes and keyword title stand, as for a
        refusal) and left out of the next sweeps. Before session 42 one the model kept
        failing on (its prompt, not an outage) stayed flagged and in ``_retitle``, and
        every sweep asked again, for the life of the daemon."""
        self._retitle_failures[conv_id] += 1
        failures = self._retitle_failures[conv_id]
        if failures < RETITLE_ATTEMPTS:
            return
        del self._retitle_failures[conv_id]
        self._retitle.discard(conv_id)
        self._offline_asked.add(conv_id)
        log.warning(
            "the model failed %d passes over the offline notes of %s: they and its title "
            "stay as they are (asked again after a restart or its next message)",
            failures,
            conv_id,
        )
        try:
            await self.conversations.unflag_needs_abbreviation([conv_id])
        except asyncio.CancelledError:
            raise
        except Exception:  # the sweep asks again: as before, no worse
            log.exception("could not unflag %s", conv_id)

    async def _enqueue_all(self, conv_ids: list[str], reason: str) -> int:
        """Queue ``conv_ids``, letting the event loop run between slices (15,000 queued
        in one go held it some 20 ms, more on a loaded machine)."""
        queued = 0
        for start in range(0, len(conv_ids), ENQUEUE_SLICE):
            if start:
                await asyncio.sleep(0)
            for conv_id in conv_ids[start : start + ENQUEUE_SLICE]:
                queued += self.enqueue(conv_id, reason)
        return queued

    def _retry_vectors(self) -> None:
        """Start re-embedding what a failed embedding left stale (in the background),
        unless one runs or the backoff after a failed retry has not passed."""
        vectors = self.vectors
        retry = getattr(vectors, "retry_unfinished", None)
        if retry is None or not getattr(vectors, "stale", False):
            return
        if self._vector_retry is not None and not self._vector_retry.done():
            return
        if not self._vector_backoff.ready(self.clock.now()):
            return
        self._vector_retry = spawn(self._run_vector_retry(retry), name="retry-vectors")

    async def _run_vector_retry(self, retry: Callable[[], Any]) -> None:
        try:
            complete = await retry()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("retrying the stale vectors failed")
            complete = False
        if complete is False:
            wait = self._vector_backoff.failed(self.clock.now())
            self.counters["vectors_retry_failed"] += 1
            log.warning("some vectors are still missing; retrying in %d s", wait.total_seconds())
        elif complete:
            self._vector_backoff.succeeded()
            self.counters["vectors_retried"] += 1

    def _retry_model(self) -> None:
        """Load an embedding model missing at start (search keyword-only) once it may be
        there (:func:`bot.daemon_vectors.load_late_model`), unless a try is running."""
        load = self.load_late_model
        if load is None or (self._model_retry is not None and not self._model_retry.done()):
            return
        self._model_retry = spawn(self._run_model_retry(load), name="load-model")

    async def _run_model_retry(self, load: Callable[[bool], Awaitable[bool | None]]) -> None:
        try:
            loaded = await load(self._model_backoff.ready(self.clock.now()))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading the embedding model failed")
            loaded = False
        if loaded is False:  # a download that keeps failing is tried less and less often
            self._model_backoff.failed(self.clock.now())
            self.counters["model_load_failed"] += 1
        elif loaded:
            self._model_backoff.succeeded()
            self.counters["model_loaded_late"] += 1
