"""One reply's brain call: outages waited out (the user told once), the owner's stop.

:class:`~bot.replies.ReplyEngine` (owner conversations, group members) and the known
parties' answers (:mod:`bot.strangers`) call the brain through :meth:`ReplyGeneration.generate`,
so both wait out an outage, honour the dashboard's stop and keep what the calls spent.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bot.brain.base import (
    RETRY_AFTER_CAP,
    BrainAccessRefused,
    BrainReply,
    BrainRequest,
    BrainUnavailable,
    ForeignAnswer,
    Profile,
    Spend,
)
from bot.events import OutboundMessage, StreamEvent, iso, placement, utcnow

if TYPE_CHECKING:
    from bot.replies import ReplyTarget
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
    "saved and I will answer once that is fixed{how}; the daemon's log has the details."
)
# How the owner fixes a refusal, where the fix is ours: a new key is read at the start
# only (session 40: "once that is fixed" left the owner waiting after replacing it).
ACCESS_FIXES = {401: "set the new ANTHROPIC_API_KEY and restart my-agent"}
ACCESS_PROBLEMS = {
    401: "the API key is not accepted",
    402: "a billing problem",
    403: "permission denied",
}
# A 401/402/403 that is no answer of the service's (a proxy's or a firewall's page):
# before session 41 it read "permission denied" as if the API had refused the key.
FOREIGN_REFUSAL = (
    "My request to the language model service was refused by something in between, not "
    'by the service itself (HTTP {status}: "{excerpt}"), a proxy or a firewall perhaps. '
    "Your message is saved and I will answer once requests get through; the daemon's log "
    "has the details."
)
STOPPED = "\n\n[generation stopped]"


class ReplyGeneration:
    """The brain calls in progress, one per key (a conversation, a party's exchange)."""

    def __init__(self, services: Services) -> None:
        self.s = services
        # the stoppable step of each reply: its brain call, or its wait between two
        # attempts while the model is unreachable
        self._generations: dict[str, asyncio.Future[Any]] = {}
        self._stop_requested: set[str] = set()
        self.retry_interval = services.config.brain.pending_retry_interval
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep  # tests record it
        # this process's part of an outage notice's dedup key, and its start (see
        # _tell_outage)
        self._run = secrets.token_hex(6)
        self._started = iso(utcnow())
        # conversation id -> the outage notice of its reply waiting for the model now:
        # what the dashboard shows a tab opened later, whichever channel the notice
        # went to (and after a restart, whether or not it was sent again)
        self.waiting: dict[str, str] = {}

    def retry_wait(self, exc: BrainUnavailable) -> float:
        """Seconds until a waiting reply tries again: the interval, or the API's
        ``retry-after`` when longer (at most :data:`RETRY_AFTER_CAP`). A rate limit
        asking for ten minutes got a request every 30 s from every waiting reply, each
        one refused again."""
        asked = min(exc.retry_after or 0.0, RETRY_AFTER_CAP)
        if asked > self.retry_interval:
            log.info("the model service asks to wait %.0fs before trying again", asked)
        return max(self.retry_interval, asked)

    def cancel(self, key: str) -> bool:
        """Stop the generation in progress (dashboard "stop"); keeps what was produced."""
        task = self._generations.get(key)
        if task is None or task.done():
            return False
        self._stop_requested.add(key)
        task.cancel()
        return True

    async def _typing(self, target: ReplyTarget) -> None:
        channel = self.s.channels.get(target.channel)
        typing = getattr(channel, "typing", None)
        if typing is None:
            return
        topic = placement(target.metadata).get("topic")
        try:
            # in a forum topic, "typing…" shows there (not in the general topic)
            await (typing(target.chat_id) if topic is None else typing(target.chat_id, topic))
        except Exception as exc:  # a typing indicator is cosmetic
            log.debug("typing indicator failed: %s", exc)

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

    async def generate(
        self, key: str, turn: int, request: BrainRequest, target: ReplyTarget, dedup: str
    ) -> BrainReply:
        """Call the brain; wait out outages (telling the user once); honour stop."""
        try:
            return await self._attempts(key, turn, request, target, dedup)
        finally:
            if request.conversation_id is not None:
                self.waiting.pop(request.conversation_id, None)  # no longer waits

    async def _attempts(
        self, key: str, turn: int, request: BrainRequest, target: ReplyTarget, dedup: str
    ) -> BrainReply:
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
                    # the model answers: a tab opened now is not told it is unreachable
                    self.waiting.pop(conv_id, None)
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
                return all_attempts(reply, spend)
            except asyncio.CancelledError:
                if self._stopped(key, task):
                    return stopped_reply("".join(streamed), spend)
                raise
            except BrainUnavailable as exc:
                log.warning("brain unavailable for %s turn %s: %s", key, turn, exc)
                if not told:
                    told = True
                    await self._tell_outage(exc, request, target, dedup)
                elif conv_id is not None:  # again, if a retry's first words dropped it
                    self.waiting[conv_id] = outage_notice(exc, request.profile)
                # The wait is the reply's stoppable step now: a stop from the dashboard
                # gives up on the model instead of holding the conversation's queue.
                wait = asyncio.ensure_future(self.sleep(self.retry_wait(exc)))
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
                return BrainReply(
                    text=APOLOGY,
                    model="error",
                    extra={"error": True},
                    # the calls made before the failure were paid all the same
                    usage=spend.usage if spend.any else None,
                    cost=spend.cost,
                )
            finally:
                self._generations.pop(key, None)
                if request.conversation_id is not None and self.s.stream_sink is not None:
                    await self.s.stream_sink(
                        StreamEvent(request.conversation_id, turn, "", done=True)
                    )

    async def _tell_outage(
        self, exc: BrainUnavailable, request: BrainRequest, target: ReplyTarget, dedup: str
    ) -> None:
        """Queue the outage notice of the reply ``dedup``: once in this process, so a
        reply resumed after a restart that still waits is told again (under the old
        key ``dedup:outage`` it counted as sent before the restart, and the owner, or a
        dashboard opened since, never learnt why it waited), but not while an earlier
        one is still unsent (the channel down as well), or was sent since this process
        started (the channel came back first): that one says it already."""
        text = outage_notice(exc, request.profile)
        conv_id = request.conversation_id
        if conv_id is not None:
            self.waiting[conv_id] = text
            await self.s.bus.emit(
                "reply_waiting", conversation_id=conv_id, text=text, channel=target.channel
            )
        if await self.s.outbox.told_under(f"{dedup}:outage", self._started):
            return
        await self.s.outbox.enqueue(
            OutboundMessage(
                channel=target.channel,
                chat_id=target.chat_id,
                text=text,
                kind="notice",
                conversation_id=request.conversation_id,
                # "waiting": the dashboard shows it from "reply_waiting", to every tab
                # viewing the conversation and to one opened later
                metadata={**placement(target.metadata), "waiting": True},
            ),
            dedup_key=f"{dedup}:outage:{self._run}",
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


def answered(reply: BrainReply) -> bool:
    """Whether ``reply`` is the model's answer: not a stopped generation, the apology for
    a failure or the notice of a request the API rejected (each says nothing the request
    asked the model to say, such as a note of :meth:`BrainRequest.notes`)."""
    return reply.model not in ("stopped", "error") and not reply.extra.get("error")


def all_attempts(reply: BrainReply, spend: Spend) -> BrainReply:
    """``reply`` with the usage and cost of every call made for it: a reply that waited
    out an outage part-way through its tool loop is the brain's last attempt, and the
    rounds of the earlier ones, paid, were recorded nowhere (before session 39). A brain
    that does not keep the running total (``spend`` empty) reports its own."""
    if not spend.any:
        return reply
    return replace(reply, usage=spend.usage, cost=spend.cost)


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
    if isinstance(exc, ForeignAnswer) and profile == "owner":
        return FOREIGN_REFUSAL.format(status=exc.status, excerpt=exc.excerpt)
    if isinstance(exc, BrainAccessRefused) and profile == "owner":
        what = ACCESS_PROBLEMS.get(exc.status, "access refused")
        fix = ACCESS_FIXES.get(exc.status)
        how = f" ({fix})" if fix else ""
        return ACCESS_REFUSED.format(status=exc.status, what=what, how=how)
    return OUTAGE
