"""Producing replies: one at a time per conversation (or party), in arrival order.

A reply job runs after the user turn is durable. The brain's text is appended to the
transcript (durable) and only then queued in the outbox, under a dedup key, so a crash
at any point either leaves an unanswered user turn (answered after restart) or a
recorded reply (sent at most once). When the model is unreachable the user is told once
and the job waits and retries, holding back later messages of the same conversation so
order is kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from bot.brain.base import (
    BrainAccessRefused,
    BrainReply,
    BrainRequest,
    BrainUnavailable,
    HistoryTurn,
    Profile,
    Spend,
)
from bot.bursts import Bursts
from bot.events import OutboundMessage, StreamEvent
from bot.tasks import spawn
from bot.transcript import READOUT_MODELS

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.replies")

APOLOGY = "Sorry, something went wrong while answering. Your message is saved."
OUTAGE = (
    "I can't reach the language model right now. Your message is saved and I will "
    "answer as soon as it is back."
)
# The owner's notice when the service refuses the key (401), billing (402) or access
# (403): waiting cannot end that, so "can't reach" sent them looking for an outage.
ACCESS_REFUSED = (
    "The language model service refuses my access ({status}: {what}). Your message is "
    "saved and I will answer once that is fixed; the daemon's log has the details."
)
ACCESS_PROBLEMS = {
    401: "the API key is not accepted",
    402: "a billing problem",
    403: "permission denied",
}
STOPPED = "\n\n[generation stopped]"
# A reply that cannot be written (disk full) is tried again after 1, 2, 4 ... 30 s.
STORAGE_RETRY_FIRST = 1.0
STORAGE_RETRY_MAX = 30.0
# An album (photos sent together, one message each) is answered once no more of it has
# come for this long: its items arrive within milliseconds of each other.
ALBUM_SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class ReplyTarget:
    """Where a reply goes (normally where the message came from)."""

    channel: str
    chat_id: str
    in_reply_to: str | None = None
    thread_refs: tuple[str, ...] = ()
    subject: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def reply(self, text: str, conversation_id: str, *, plain: bool = False) -> OutboundMessage:
        """The outbound reply to this target. ``plain``: a readout (the offline brain's,
        an apology) that quotes stored text, so a channel must not read it as Markdown."""
        metadata = dict(self.metadata)
        if plain:
            metadata["plain"] = True
        return OutboundMessage(
            channel=self.channel,
            chat_id=self.chat_id,
            text=text,
            kind="reply",
            conversation_id=conversation_id,
            in_reply_to=self.in_reply_to,
            thread_refs=self.thread_refs,
            subject=self.subject,
            metadata=metadata,
        )

    def answer(self, reply: BrainReply, conversation_id: str) -> OutboundMessage:
        """The outbound message of ``reply`` (plain text when it is a readout)."""
        return self.reply(reply.text, conversation_id, plain=reply.model in READOUT_MODELS)


class KeyedSerialQueue:
    """Jobs run strictly one after another per key; different keys run concurrently."""

    def __init__(self, max_running: int = 0) -> None:
        self._queues: dict[str, deque[Callable[[], Awaitable[None]]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self.accepting = True
        # At most ``max_running`` jobs at once across keys (0: no limit). Replies wait
        # for a slot; storing incoming messages never does.
        self._slots = asyncio.Semaphore(max_running) if max_running > 0 else None

    def submit(self, key: str, job: Callable[[], Awaitable[None]]) -> None:
        self._queues.setdefault(key, deque()).append(job)
        if key not in self._workers:
            self._workers[key] = spawn(self._run(key), name=f"serial-{key}")

    def busy(self, key: str) -> bool:
        return key in self._workers

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values()) + len(self._workers)

    async def _run(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue and self.accepting:
                job = queue.popleft()
                try:
                    if self._slots is None:
                        await job()
                    else:
                        async with self._slots:
                            await job()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("job for %s failed", key)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def drain(self, timeout: float) -> bool:
        """Stop taking queued jobs, let running ones finish within ``timeout``."""
        self.accepting = False
        workers = list(self._workers.values())
        if workers:
            _done, pending = await asyncio.wait(workers, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2)
                return False
        return True


class ReplyEngine:
    """Runs the brain for owner conversations and restricted third-party exchanges."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self.queue = KeyedSerialQueue(services.config.brain.max_concurrent_replies)
        # the stoppable step of each reply: its brain call, or its wait between two
        # attempts while the model is unreachable
        self._generations: dict[str, asyncio.Future[Any]] = {}
        # conversations whose reply is written and waits for the storage to take it
        self.storage_waiting: set[str] = set()
        self._stop_requested: set[str] = set()
        self.retry_interval = services.config.brain.pending_retry_interval
        # conversation -> its latest user turn submitted: the debounce
        self._arrivals = Bursts()
        # (conversation, album) -> its latest turn submitted: an album's one reply
        self._albums = Bursts()

    # -- owner conversations --------------------------------------------------------
    def submit(
        self,
        conversation_id: str,
        turn_number: int,
        text: str,
        target: ReplyTarget,
        sender: str | None = None,
        owner: bool | None = None,
        album: str | None = None,
    ) -> None:
        """Queue the reply to a user turn. ``owner``: whether the sender is the owner, as
        the router established it (ids, aliases); None for a turn recorded without it.
        ``album``: the turn is one item of an album (Telegram's ``media_group_id``),
        which gets one reply, to its last item, with every caption in its context."""
        if self._debounce(target.channel) and owner is not False:
            self._arrivals.note(conversation_id, turn_number)
        if album:
            self._albums.note((conversation_id, album), turn_number)
        self.queue.submit(
            conversation_id,
            lambda: self._reply(conversation_id, turn_number, text, target, sender, owner, album),
        )

    def hold_bursts(self) -> None:
        """The channels are starting (bot/daemon.py): the replies resumed before them
        wait, however long that takes, so that what a channel delivers first (what came
        while we were down) can join their burst (the debounce, an album)."""
        self._arrivals.hold()
        self._albums.hold()

    def release_bursts(self) -> None:
        """The channels have started: held replies wait out their pause from now."""
        self._arrivals.release()
        self._albums.release()

    def cancel(self, conversation_id: str) -> bool:
        """Stop the generation in progress (dashboard "stop"); keeps what was produced."""
        task = self._generations.get(conversation_id)
        if task is None or task.done():
            return False
        self._stop_requested.add(conversation_id)
        task.cancel()
        return True

    async def _typing(self, target: ReplyTarget) -> None:
        channel = self.s.channels.get(target.channel)
        typing = getattr(channel, "typing", None)
        if typing is None:
            return
        try:
            await typing(target.chat_id)
        except Exception as exc:  # a typing indicator is cosmetic
            log.debug("typing indicator failed: %s", exc)

    async def _reply(
        self,
        conv_id: str,
        turn: int,
        text: str,
        target: ReplyTarget,
        sender: str | None,
        owner: bool | None = None,
        album: str | None = None,
    ) -> None:
        # An album is answered once no more of it has come, in groups too; before, at
        # its first photo, and the other captions reached only the next reply.
        if album and await self._merged(conv_id, turn, self._albums, (conv_id, album)):
            return
        rec = await self.s.conversations.require(conv_id)
        group = rec.identity_key is not None and ":group:" in rec.identity_key
        if owner is None:
            # A turn recorded before "fromOwner" was: the sender as stored is all there is.
            owner = sender is None or self.s.identities.match(target.channel, sender) is not None
        profile: Profile = "restricted" if group and not owner else "owner"
        if group:
            self._arrivals.forget(conv_id)  # a group is never merged (submit noted it)
        elif (
            profile == "owner"
            and self._debounce(target.channel)
            and await self._merged(conv_id, turn, self._arrivals, conv_id, target.channel)
        ):
            return
        history: tuple[HistoryTurn, ...] = ()
        if profile == "restricted" and getattr(self.s.brain, "uses_history", True):
            history = await self._group_history(conv_id, turn)
        request = BrainRequest(
            profile=profile,
            channel=target.channel,
            text=text,
            model_alias=rec.model or self.s.config.models.default,
            conversation_id=conv_id if profile == "owner" else None,
            turn_number=turn,
            party_name=sender,
            scope=self.s.config.trust.known_scope if profile == "restricted" else None,
            history=history,
            # For the owner's reply only: a member's restricted reply never shows them,
            # and taking them there lost them (the split offer was never made).
            notes=tuple(self.s.conversations.take_notes(conv_id)) if profile == "owner" else (),
        )
        reply = await self._generate(conv_id, turn, request, target, f"{conv_id}:{turn}")
        delay = STORAGE_RETRY_FIRST
        while True:
            try:
                await self._store(conv_id, turn, reply, target)
                break
            except OSError as exc:
                # The disk is full or failing: the user's turn is durable and stays
                # unanswered until the reply can be written; keep trying while running
                # (a stop leaves it to the next start), holding this conversation's
                # later messages back so that order is kept.
                if await self._reply_on_disk(conv_id, turn, reply, target):
                    break
                self.storage_waiting.add(conv_id)
                log.error(
                    "cannot store the reply to %s turn %d (%s); trying again in %.0f s",
                    conv_id, turn, exc, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, STORAGE_RETRY_MAX)
        if conv_id in self.storage_waiting:
            self.storage_waiting.discard(conv_id)
            log.info("reply to %s turn %d stored after the storage trouble", conv_id, turn)

    def _debounce(self, channel: str) -> float:
        return self.s.config.brain.debounce_seconds.get(channel, 0.0)

    async def _merged(
        self, conv_id: str, turn: int, bursts: Bursts, key: Hashable, channel: str | None = None
    ) -> bool:
        """Whether a later turn of this burst answers this one, once the burst paused:
        for ``brain.debounce_seconds`` of ``channel`` (the owner's messages in this
        conversation), else :data:`ALBUM_SETTLE_SECONDS` (an album's items). The reply to
        the last turn of a burst sees every turn before it in its context, so one reply
        answers them all; each merged turn is marked with a ``reply_merged`` event, which
        tells recovery it expects no reply of its own."""
        pause = self._debounce(channel) if channel else ALBUM_SETTLE_SECONDS
        latest = await bursts.answered_by(key, turn, pause)
        if latest is None:
            return False
        await self.s.conversations.append_event(
            conv_id, "reply_merged", turnNumber=turn, into=latest
        )
        log.debug("%s turn %d is answered with turn %d", conv_id, turn, latest)
        return True

    async def _reply_on_disk(
        self, conv_id: str, turn: int, reply: BrainReply, target: ReplyTarget
    ) -> bool:
        """Whether a failed append reached the transcript anyway (its bytes were written,
        the journal's sync failed): then its outbox row is queued from it instead of
        writing the reply twice."""
        try:
            lines = await asyncio.to_thread(self.s.store.read_lines, conv_id)
        except OSError:
            return False
        if not any(
            line.get("type") == "turn"
            and line.get("role") == "assistant"
            and line.get("turnNumber") == turn
            for line in lines
        ):
            return False
        await self.s.outbox.enqueue(
            target.answer(reply, conv_id),
            dedup_key=f"{conv_id}:{turn}:reply",
        )
        return True

    async def _store(self, conv_id: str, turn: int, reply: BrainReply, target: ReplyTarget) -> None:
        """The reply's transcript turn, then its outbox row, then wake the channel."""
        extra = {}
        # The first reply row of a process is synced: the anchor that lets the later
        # ones skip their own sync (Outbox.insert_unit).
        anchored = self.s.outbox.anchored
        if reply.usage is not None:
            extra["usage"] = {"input": reply.usage.input, "output": reply.usage.output}
        await self.s.conversations.append_turn(
            conv_id,
            "assistant",
            reply.text,
            turn_number=turn,
            channel=target.channel,
            usage=extra.get("usage"),
            cost=reply.cost,
            thinkingText=reply.thinking_text,
            model=reply.model,
            # Queued in the same chain of writes, right after the reply is durable.
            also=(
                self.s.state,
                self.s.outbox.insert_unit(
                    target.answer(reply, conv_id),
                    dedup_key=f"{conv_id}:{turn}:reply",
                    recoverable=True,
                ),
            ),
            background=True,  # the next incoming message's writes go first
            **reply.extra,
        )
        if not anchored:
            self.s.outbox.anchored = True  # that row was committed with a sync
        self.s.outbox.wake(target.channel)

    async def _group_history(self, conv_id: str, turn: int) -> tuple[HistoryTurn, ...]:
        """The group's own recent messages (from the index: no transcript scan)."""
        rows = await self.s.index_db.fetchall(
            "SELECT role, content, sender FROM turns WHERE conversation_id = ? AND "
            "turn_number BETWEEN ? AND ? ORDER BY turn_number, id",
            (conv_id, max(1, turn - 20), turn - 1),
        )
        return tuple(
            HistoryTurn(
                role=role, content=f"{sender}: {content}" if role == "user" and sender else content
            )
            for role, content, sender in rows
        )

    async def _current_model(self, request: BrainRequest) -> BrainRequest:
        """``request`` with its conversation's model as it is now: the owner may have
        switched (``/model``) because the one this reply waits for is down, and the
        reply, with every later message queued behind it, kept waiting for that one."""
        if request.conversation_id is None:
            return request
        try:
            rec = await self.s.conversations.get(request.conversation_id)
        except Exception:
            # (storage trouble) the model it waits for, rather than ending the reply job
            # and leaving the message unanswered until a restart
            log.exception("cannot read the model of %s; retrying", request.conversation_id)
            return request
        alias = getattr(rec, "model", None) or self.s.config.models.default
        if alias == request.model_alias:
            return request
        log.info("reply to %s now waits for %s (/model)", request.conversation_id, alias)
        return replace(request, model_alias=alias)

    async def _generate(
        self, key: str, turn: int, request: BrainRequest, target: ReplyTarget, dedup: str
    ) -> BrainReply:
        """Call the brain; wait out outages (telling the user once); honour stop."""
        told = False
        conv_id = request.conversation_id  # the same on every retry (the model may change)
        spend = Spend()  # what the brain's calls cost, kept even if the reply is stopped
        request = replace(request, spend=spend)
        while True:
            streamed: list[str] = []

            async def on_delta(delta: str) -> None:
                streamed.append(delta)  # noqa: B023 - used within this iteration only
                sink = self.s.stream_sink
                if sink is not None and conv_id is not None:
                    await sink(StreamEvent(conv_id, turn, delta))

            if not told:
                # Once told that the model is down, "typing…" would claim otherwise
                # through an outage of hours (each retry showed it for minutes).
                await self._typing(target)
            # Streaming only when someone watches (the dashboard): otherwise the brain
            # need not cut its reply into pieces for nobody.
            watched = self.s.stream_sink is not None and request.conversation_id is not None
            task = asyncio.ensure_future(self.s.brain.reply(request, on_delta if watched else None))
            self._generations[key] = task
            try:
                reply = await task
                return reply
            except asyncio.CancelledError:
                if self._stopped(key, task):
                    return stopped_reply("".join(streamed), spend)
                raise
            except BrainUnavailable as exc:
                log.warning("brain unavailable for %s turn %s: %s", key, turn, exc)
                if not told:
                    told = True
                    await self.s.outbox.enqueue(
                        OutboundMessage(
                            channel=target.channel,
                            chat_id=target.chat_id,
                            text=outage_notice(exc, request.profile),
                            kind="notice",
                            conversation_id=request.conversation_id,
                        ),
                        dedup_key=f"{dedup}:outage",
                    )
                # The wait is the reply's stoppable step now: a stop from the dashboard
                # gives up on the model instead of holding the conversation's queue.
                wait = asyncio.ensure_future(asyncio.sleep(self.retry_interval))
                self._generations[key] = wait
                try:
                    await wait
                except asyncio.CancelledError:
                    if self._stopped(key, wait):
                        return stopped_reply("", spend)
                    raise
                request = await self._current_model(request)
            except Exception:
                log.exception("brain failed for %s turn %s", key, turn)
                return BrainReply(text=APOLOGY, model="error", extra={"error": True})
            finally:
                self._generations.pop(key, None)
                if request.conversation_id is not None and self.s.stream_sink is not None:
                    await self.s.stream_sink(
                        StreamEvent(request.conversation_id, turn, "", done=True)
                    )

    def _stopped(self, key: str, step: asyncio.Future[Any]) -> bool:
        """Whether ``step`` ended by the owner's stop (:meth:`cancel`), not by the
        reply job itself being cancelled (a shutdown), which must propagate."""
        if key not in self._stop_requested or not step.cancelled():
            return False
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            return False
        self._stop_requested.discard(key)
        return True


def stopped_reply(streamed: str, spend: Spend) -> BrainReply:
    """The reply recorded for a stopped generation: what was streamed, labelled."""
    return BrainReply(
        text=streamed + STOPPED,
        model="stopped",
        # the tokens of a stopped reply were spent all the same
        usage=spend.usage if spend.any else None,
        cost=spend.cost,
    )


def outage_notice(exc: BrainUnavailable, profile: Profile) -> str:
    """What the user is told, once, while their reply waits for the model: the owner
    learns when it is the key or the account (a third party only that it waits)."""
    if isinstance(exc, BrainAccessRefused) and profile == "owner":
        what = ACCESS_PROBLEMS.get(exc.status, "access refused")
        return ACCESS_REFUSED.format(status=exc.status, what=what)
    return OUTAGE
