"""Compression of a Claude conversation's working context (SPEC.md "Compression is ours").

When system prompt + summary + turns pass ``brain.compression_budget_tokens``,
:class:`Compressor` runs the pre-compaction flush (seed 002: one silent turn with the
memory hook's tools, :class:`FlushRequest`), summarises the older turns together with the
previous summary (and the turns a restart's hydration left out) with the ``haiku`` alias,
appends a ``compression`` event and returns the shortened context. A failed, empty or
refused summary is not fatal: the reply goes out uncompressed and the next one tries
again. :meth:`Compressor.cover_gap` summarises the turns a hydration over the budget left
out, at once, within the budget too; :meth:`Compressor.shrink` makes a context the API
refused as too long small enough to ask again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.brain.anthropic_api import MessagesCaller, Rejected, text_of
from bot.brain.anthropic_reply import ReplyParts, account, add_spent, request_params
from bot.brain.anthropic_stream import DeltaForwarder
from bot.brain.context import (
    ContextTurn,
    WorkingContext,
    estimate_tokens,
    window_start,
)
from bot.brain.cost import add_cost, add_usage, usage_fields
from bot.brain.summary_prompt import COMPRESSION_SYSTEM, FLUSH_PROMPT, compression_prompt
from bot.brain.tool_calls import Tool
from bot.brain.worded_refusals import refused_in_words
from bot.brain.working_contexts import WorkingContexts
from bot.config.model import AppConfig

log = logging.getLogger("my_agent.brain")

# Turns left out of the context by a restart and folded into the next summary: at most
# this many compression budgets of them (the summarising model's input stays bounded).
GAP_BUDGETS = 4
# The summarising call's max_tokens: the prompt asks for about 300 words; a summary cut at
# the first is asked again once with more room (never recorded cut).
SUMMARY_MAX_TOKENS = (1024, 4096)
# After a "prompt is too long": the share of the model's maximum to aim for (our estimate
# is off by some amount, the API's count was exact), and the fewest tokens of turns kept.
SHRINK_MARGIN = 0.8
SHRINK_FLOOR = 200

# The brain's tool loop: (alias, system, messages, tools, parts, deltas).
ToolLoop = Callable[
    [str, str, list[dict[str, Any]], list[Tool], ReplyParts, DeltaForwarder], Awaitable[None]
]


@dataclass(frozen=True)
class FlushRequest:
    """The pre-compaction flush (seed 002): what a ``services.memory_flush`` hook gets.

    ``run_turn(tools)`` runs one silent model turn over the working context followed by
    ``prompt``, with ``tools`` (e.g. the notebook's ``remember``) available; its text is
    never shown to anyone.
    """

    conversation_id: str
    prompt: str
    context: WorkingContext
    run_turn: Callable[[Sequence[Tool]], Awaitable[str]]


class Compressor:
    """Summarises the older part of a working context; ``services`` gives
    ``conversations`` (and, optionally, ``memory_flush``)."""

    def __init__(
        self,
        config: AppConfig,
        services: Any,
        contexts: WorkingContexts,
        api: MessagesCaller,
        tool_loop: ToolLoop,
    ) -> None:
        self.config = config
        self.services = services
        self.contexts = contexts
        self.api = api
        self.tool_loop = tool_loop

    async def compress(
        self,
        conv_id: str,
        alias: str,
        system: str,
        ctx: WorkingContext,
        lines: Sequence[Mapping[str, Any]],
        keep_tokens: int | None = None,
    ) -> WorkingContext:
        """Flush hook, then summarise the older turns with ``haiku`` and record it.

        ``alias`` and ``system`` are the reply's (the flush turn runs with them);
        ``keep_tokens`` bounds the recent turns kept (default: the configured window)."""
        old, recent = self.contexts.plan(ctx, keep_tokens)
        if not old:
            if ctx.unsummarised:
                return await self.cover_gap(conv_id, ctx, lines)
            log.info("%s: context over budget but the recent window is all there is", conv_id)
            return ctx
        spent = ReplyParts()
        await self._pre_compaction_flush(conv_id, alias, system, ctx, spent)
        return await self._fold(conv_id, ctx, lines, old, recent, spent)

    async def cover_gap(
        self, conv_id: str, ctx: WorkingContext, lines: Sequence[Mapping[str, Any]]
    ) -> WorkingContext:
        """Summarise the turns after ``ctx``'s summary that a hydration over the budget
        left out (:attr:`~bot.brain.context.WorkingContext.unsummarised`), with the
        previous summary, and record it; ``ctx``'s turns all stay. No pre-compaction
        flush: no turn of the context leaves it. Failed or refused, the reply goes out
        without them and the next reply tries again, as for any compression."""
        return await self._fold(conv_id, ctx, lines, [], list(ctx.turns), ReplyParts())

    async def _fold(
        self,
        conv_id: str,
        ctx: WorkingContext,
        lines: Sequence[Mapping[str, Any]],
        old: list[ContextTurn],
        recent: list[ContextTurn],
        spent: ReplyParts,
    ) -> WorkingContext:
        """Summarise ``old`` (and the turns before ``ctx``'s first that no summary covers)
        with the previous summary; record it (its cost on the event), or, with no summary,
        what the attempt cost; the context of summary + ``recent``."""
        # The summary covers everything through the last turn it folds in, so the turns
        # a restart's hydration left out go in too (the most recent ones, when there are
        # more than a few budgets' worth).
        gap_tokens = GAP_BUDGETS * self.config.brain.compression_budget_tokens
        old = [*self.contexts.unsummarised(lines, ctx, gap_tokens), *old]
        if not old:
            return ctx
        prompt = compression_prompt(ctx.summary, old)
        summary = await self._summarise(conv_id, prompt, spent)
        if summary is None:
            if spent.usage.all_input or spent.usage.output:
                # Paid for (the flush, a refused, empty or cut summary) and no summary to
                # carry it: recorded nowhere, /status showed less than was spent. An
                # event of its own: a "compression" event would move compressedThrough.
                await self.services.conversations.append_event(
                    conv_id,
                    "compression_failed",
                    usage=usage_fields(spent.usage),
                    cost=spent.cost,
                )
            return ctx
        through = old[-1].turn_number
        await self.services.conversations.append_event(
            conv_id,
            "compression",
            compressedThrough=through,
            summary=summary,
            usage=usage_fields(spent.usage),
            cost=spent.cost,
        )
        self.contexts.moved(conv_id, recent[0].turn_number if recent else through + 1)
        log.info(
            "%s: compressed turns %d-%d (%d turns kept)",
            conv_id,
            old[0].turn_number,
            through,
            len({t.turn_number for t in recent}),
        )
        # The cost is on the compression event; the reply carries its own.
        return WorkingContext(summary, through, recent)

    async def shrink(
        self,
        conv_id: str | None,
        alias: str,
        system: str,
        ctx: WorkingContext,
        lines: Sequence[Mapping[str, Any]],
        fixed_tokens: int,
        refused: Rejected,
    ) -> WorkingContext:
        """A smaller ``ctx`` to ask again with, after the API refused it as too long
        (``refused``): our estimate fell short of the model's count (a script it
        undercounts, long notes). The older turns are compressed (recorded as any
        compression) so that the rest fits what the API said it takes, scaled to our
        estimate; if no summary can be had, the oldest turns are left out of this reply;
        a single message still over it is cut. ``fixed_tokens``: the estimate of what
        does not shrink (the system prompt, the tool definitions)."""
        turns_tokens = sum(t.tokens for t in ctx.turns)
        counted = refused.counted
        if counted:
            # what the model takes, in our estimate's units, with a margin for its error
            said, maximum = counted
            fits = int(SHRINK_MARGIN * maximum * (fixed_tokens + turns_tokens) / max(1, said))
            room = fits - fixed_tokens
        else:
            room = turns_tokens // 2
        room = max(SHRINK_FLOOR, room)
        smaller = ctx
        if conv_id is not None:
            smaller = await self.compress(conv_id, alias, system, ctx, lines, room)
        if smaller.summary != ctx.summary:  # the new summary goes into the system prompt
            grown = estimate_tokens(smaller.summary or "") - estimate_tokens(ctx.summary or "")
            room = max(SHRINK_FLOOR, room - grown)
        keep_from = window_start(smaller.turns, self.contexts.max_turns, room)
        turns = [t.capped(room) for t in smaller.turns if t.turn_number >= keep_from]
        log.warning(
            "%s: the API refused the context as too long (%s); asking again with %d of %d "
            "turn(s), about %d tokens",
            conv_id,
            refused,
            len(turns),
            len(ctx.turns),
            sum(t.tokens for t in turns),
        )
        return WorkingContext(smaller.summary, smaller.compressed_through, turns)

    async def _summarise(self, conv_id: str, prompt: str, spent: ReplyParts) -> str | None:
        """The summary of ``prompt`` by ``haiku`` (its usage added to ``spent``), or None
        when there is none to record: the call failed, or the answer was empty, cut, or a
        refusal (by its stop reason, or in words: bot.brain.worded_refusals)."""
        for max_tokens in SUMMARY_MAX_TOKENS:
            try:
                # Half the budget: if the API is down, the reply itself still gets its
                # turn to retry (and to raise BrainUnavailable) within about 1.5 budgets.
                message = await self.api.call(
                    request_params(
                        self.config,
                        "haiku",
                        COMPRESSION_SYSTEM,
                        [{"role": "user", "content": prompt}],
                        max_tokens=max_tokens,
                    ),
                    None,
                    budget=self.config.brain.retry_budget_seconds / 2,
                )
                account(self.config, spent, "haiku", message)
                summary = text_of(message).strip()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Not fatal: this reply goes out with the uncompressed context, the next
                # reply tries again. Whatever the failure: before session 40 only an
                # outage and a rejection were caught, and anything else (an answer the
                # brain could not read) ended the owner's reply in the apology.
                log.warning(
                    "%s: compression failed (%s: %s); continuing uncompressed",
                    conv_id,
                    type(exc).__name__,
                    exc,
                )
                return None
            if not summary or message.stop_reason == "refusal":
                # A refusal or an empty answer: recorded, it would replace the older turns
                # with nothing, or with the words before the refusal, for good (the event
                # is what every later hydration reads).
                log.warning(
                    "%s: compression returned no summary (%s); continuing uncompressed",
                    conv_id,
                    message.stop_reason,
                )
                return None
            if refused_in_words(summary):
                # A refusal in words ("I'm sorry, but I can't help with summarizing this
                # conversation.", stop_reason end_turn) was recorded as the summary before
                # session 40: it stood in for the older turns in every reply, and in every
                # later summary as the previous one. Treated as no summary, as the notes'
                # path does since session 39.
                log.warning(
                    "%s: the summarising model refused in words (%r); continuing uncompressed",
                    conv_id,
                    summary[:80],
                )
                return None
            if message.stop_reason != "max_tokens":
                return summary
            # Cut mid-sentence: recorded, what it had not reached would be gone for good.
            log.warning("%s: the summary was cut at %d tokens", conv_id, max_tokens)
        log.warning("%s: no summary fitted; continuing uncompressed", conv_id)
        return None

    async def _pre_compaction_flush(
        self,
        conv_id: str,
        alias: str,
        system: str,
        ctx: WorkingContext,
        spent: ReplyParts,
    ) -> None:
        """Seed 002: one silent turn to save durable facts, if a memory hook exists."""
        hook = getattr(self.services, "memory_flush", None)
        if hook is None:
            log.debug("%s: no memory_flush hook; pre-compaction flush skipped", conv_id)
            return

        async def run_turn(tools: Sequence[Tool]) -> str:
            turns = list(ctx.turns)
            while turns and turns[-1].role == "user" and len(turns) > 1:
                turns.pop()  # the unanswered message is answered after compression
            messages = WorkingContext(ctx.summary, ctx.compressed_through, turns).messages()
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"] += "\n\n" + FLUSH_PROMPT
            else:
                messages.append({"role": "user", "content": FLUSH_PROMPT})
            silent = ReplyParts()
            forwarder = DeltaForwarder(
                None, lambda used: add_spent(self.config, silent, alias, used)
            )
            try:
                await self.tool_loop(alias, system, messages, list(tools), silent, forwarder)
            finally:  # what its calls spent, failed ones too (session 41)
                spent.usage = add_usage(spent.usage, silent.usage)
                spent.cost = add_cost(spent.cost, silent.cost)
            return "\n\n".join(silent.texts)

        try:
            await hook(FlushRequest(conv_id, FLUSH_PROMPT, ctx, run_turn))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: pre-compaction flush failed; compressing anyway", conv_id)


__all__ = ["GAP_BUDGETS", "Compressor", "FlushRequest", "ToolLoop"]
