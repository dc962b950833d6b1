"""Claude through the official ``anthropic`` SDK: streaming, recall tools, compression.

:class:`AnthropicBrain` implements :class:`~bot.brain.base.Brain` (``reply``) and
:class:`~bot.brain.base.UtilityModel` (``complete``, for abbreviation and naming).

Outages. Every call goes through :class:`~bot.brain.anthropic_api.MessagesCaller`, which
retries timeouts, connection errors, 408/409/429/5xx/529 and errors inside a stream with
exponential backoff and full jitter, honouring ``retry-after``, for at most
``brain.retry_budget_seconds``. Past that it raises :class:`BrainUnavailable` and the
router keeps the user turn as the pending-reply marker. Authentication, permission and
billing errors raise :class:`BrainUnavailable` at once (retrying cannot fix them; the
owner can). A request the API rejects as invalid (400/404/413/422) would fail the same
way forever, so the reply becomes a short error notice instead of a pending retry.

Restricted profile (a ``known`` third party): no tools in the request, a system prompt
made of the configured scope only (see :mod:`bot.brain.prompt`), only the party's own
history, a smaller token budget, and any ``tool_use`` the model emits anyway is refused
without being executed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from anthropic import AsyncAnthropic

from bot.brain.anthropic_api import (
    DeltaForwarder,
    MessagesCaller,
    Rejected,
    as_params,
    text_of,
)
from bot.brain.base import (
    BrainReply,
    BrainRequest,
    BrainUnavailable,
    DeltaSink,
    RequestRefused,
    Spend,
    Usage,
)
from bot.brain.context import (
    COMPRESSION_SYSTEM,
    FLUSH_PROMPT,
    ContextTurn,
    WorkingContext,
    WorkingContexts,
    compression_prompt,
    estimate_tokens,
    restricted_messages,
)
from bot.brain.cost import add_cost, add_usage, cost_usd, record_spending
from bot.brain.prompt import PersonaFile, owner_system_prompt, restricted_system_prompt
from bot.brain.tools import RecallTools, Tool, execute, tool_map
from bot.config.model import AppConfig

log = logging.getLogger("my_agent.brain")
# Rejections that are about the request itself (bad request, too large, unprocessable):
# asking again gives the same; 401/403/404 and the rest are the configuration or service.
REFUSED_STATUSES = frozenset({400, 413, 422})

RESTRICTED_FALLBACK = "Sorry, I can't help with that."
EMPTY_REPLY = "(The model returned no answer to this. Ask again, or rephrase it.)"
# Turns left out of the context by a restart and folded into the next summary: at most
# this many compression budgets of them (the summarising model's input stays bounded).
GAP_BUDGETS = 4
CUT_SHORT = '[This reply was cut short at the length limit. Say "continue" for the rest.]'


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


@dataclass
class _Turn:
    """Accumulates what one reply produced across tool-loop iterations."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    texts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    stop_reason: str | None = None  # of the last call
    spend: Spend | None = None  # the request's running total (BrainRequest.spend)


class AnthropicBrain:
    """The Claude brain. ``services`` gives ``conversations`` and ``search`` (and,
    optionally, ``memory_flush``)."""

    name = "anthropic"
    uses_history = True

    def __init__(
        self,
        config: AppConfig,
        services: Any,
        client: AsyncAnthropic | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        cfg = config.brain
        self.config = config
        self.services = services
        self._own_client = client is None
        self.client = client or AsyncAnthropic(
            api_key=cfg.api_key,
            base_url=cfg.base_url,
            max_retries=0,
            timeout=cfg.request_timeout,
        )
        self.api = MessagesCaller(cfg, self.client, sleep=sleep, clock=clock)
        self._now = now
        self.persona = PersonaFile(config.data_dir / cfg.persona_file)
        self.recall = RecallTools(config, services)
        self._tools_tokens = estimate_tokens(json.dumps([t.spec() for t in self.recall.tools()]))
        self.contexts = WorkingContexts(
            max_turns=cfg.working_context_turns,
            max_tokens=cfg.working_context_tokens,
            keep_tokens=min(cfg.working_context_tokens, cfg.compression_budget_tokens // 2),
            max_turn_tokens=cfg.compression_budget_tokens,
        )

    async def close(self) -> None:
        if self._own_client:
            await self.client.close()

    # -- Brain -------------------------------------------------------------------------
    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        """Answer ``request``; raises BrainUnavailable when Claude cannot be reached."""
        if request.profile == "restricted":
            return await self._reply_restricted(request, on_delta)
        return await self._reply_owner(request, on_delta)

    async def _reply_owner(self, request: BrainRequest, on_delta: DeltaSink | None) -> BrainReply:
        alias = request.model_alias or self.config.models.default
        ctx, title = await self._owner_context(request)
        system = self._owner_system(request, ctx, title)
        turn = _Turn(spend=request.spend)
        deltas = DeltaForwarder(on_delta)
        try:
            current = (
                (request.conversation_id, request.turn_number)
                if request.conversation_id and request.turn_number
                else None
            )
            tools = self.recall.tools(current)
            await self._tool_loop(alias, system, ctx.messages(), tools, turn, deltas)
        except asyncio.CancelledError:
            if deltas.cut is not None:  # stopped mid-stream: that call's tokens were spent
                self._add(turn, alias, deltas.cut)
            raise
        except Rejected as exc:
            return self._rejected_reply(alias, exc, turn)
        return self._finish(alias, turn)

    async def build_request(self, request: BrainRequest) -> dict[str, Any]:
        """The Messages API parameters of the first call for an owner ``request``: working
        context assembly without the call (benchmarks, diagnostics). Compresses first if
        the context is over budget, exactly as :meth:`reply` would."""
        alias = request.model_alias or self.config.models.default
        ctx, title = await self._owner_context(request)
        params = self._params(alias, self._owner_system(request, ctx, title), ctx.messages())
        params["tools"] = [t.spec() for t in self.recall.tools()]
        return params

    async def _owner_context(self, request: BrainRequest) -> tuple[WorkingContext, str | None]:
        """Hydrate (and, past the budget, compress) the working context."""
        conv_id = request.conversation_id
        if conv_id is None:
            turn = ContextTurn("user", request.text, request.turn_number or 1)
            return WorkingContext(None, 0, [turn]), None
        conversations = self.services.conversations
        lines = await asyncio.to_thread(conversations.read_lines, conv_id)
        record = await conversations.get(conv_id)
        title = getattr(record, "title", None)
        ctx = self.contexts.assemble(conv_id, lines, request.text, request.turn_number)
        size = (
            estimate_tokens(self._owner_system(request, ctx, title))
            + ctx.tokens()
            + self._tools_tokens
        )
        if size > self.config.brain.compression_budget_tokens:
            ctx = await self._compress(conv_id, request, ctx, title, lines)
        return ctx, title

    def _owner_system(self, request: BrainRequest, ctx: WorkingContext, title: str | None) -> str:
        return owner_system_prompt(
            config=self.config,
            persona=self.persona.read(),
            channel=request.channel,
            now=self._now(),
            conversation_title=title,
            summary=ctx.summary,
            notes=request.notes,
            conversation_id=request.conversation_id,
            first_turn=ctx.start_turn,
        )

    async def _compress(
        self,
        conv_id: str,
        request: BrainRequest,
        ctx: WorkingContext,
        title: str | None,
        lines: Sequence[Mapping[str, Any]],
    ) -> WorkingContext:
        """Flush hook, then summarise the older turns with ``haiku`` and record it."""
        old, recent = self.contexts.plan(ctx)
        if not old:
            log.info("%s: context over budget but the recent window is all there is", conv_id)
            return ctx
        spent = _Turn()
        await self._pre_compaction_flush(conv_id, request, ctx, title, spent)
        # The summary covers everything through the last turn it folds in, so the turns
        # a restart's hydration left out go in too (the most recent ones, when there are
        # more than a few budgets' worth).
        gap_tokens = GAP_BUDGETS * self.config.brain.compression_budget_tokens
        old = [*self.contexts.unsummarised(lines, ctx, gap_tokens), *old]
        prompt = compression_prompt(ctx.summary, old)
        try:
            # Half the budget: if the API is down, the reply itself still gets its turn
            # to retry (and to raise BrainUnavailable) within about 1.5 budgets.
            message = await self.api.call(
                self._params(
                    "haiku",
                    COMPRESSION_SYSTEM,
                    [{"role": "user", "content": prompt}],
                    max_tokens=1024,
                ),
                None,
                budget=self.config.brain.retry_budget_seconds / 2,
            )
        except (BrainUnavailable, Rejected) as exc:
            # Not fatal: this reply goes out with the uncompressed context, the next
            # reply tries again.
            log.warning("%s: compression failed (%s); continuing uncompressed", conv_id, exc)
            return ctx
        summary = text_of(message).strip()
        if not summary:
            # A refusal or an empty answer: recorded, it would replace the older turns
            # with nothing, for good (the event is what every later hydration reads).
            log.warning(
                "%s: compression returned no summary (%s); continuing uncompressed",
                conv_id,
                message.stop_reason,
            )
            return ctx
        self._account(spent, "haiku", message)
        through = old[-1].turn_number
        await self.services.conversations.append_event(
            conv_id,
            "compression",
            compressedThrough=through,
            summary=summary,
            usage={"input": spent.usage.input, "output": spent.usage.output},
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

    async def _pre_compaction_flush(
        self,
        conv_id: str,
        request: BrainRequest,
        ctx: WorkingContext,
        title: str | None,
        spent: _Turn,
    ) -> None:
        """Seed 002: one silent turn to save durable facts, if a memory hook exists."""
        hook = getattr(self.services, "memory_flush", None)
        if hook is None:
            log.debug("%s: no memory_flush hook; pre-compaction flush skipped", conv_id)
            return
        alias = request.model_alias or self.config.models.default

        async def run_turn(tools: Sequence[Tool]) -> str:
            turns = list(ctx.turns)
            while turns and turns[-1].role == "user" and len(turns) > 1:
                turns.pop()  # the unanswered message is answered after compression
            messages = WorkingContext(ctx.summary, ctx.compressed_through, turns).messages()
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"] += "\n\n" + FLUSH_PROMPT
            else:
                messages.append({"role": "user", "content": FLUSH_PROMPT})
            silent = _Turn()
            await self._tool_loop(
                alias,
                self._owner_system(request, ctx, title),
                messages,
                list(tools),
                silent,
                DeltaForwarder(None),
            )
            spent.usage = add_usage(spent.usage, silent.usage)
            spent.cost = add_cost(spent.cost, silent.cost)
            return "\n\n".join(silent.texts)

        try:
            await hook(FlushRequest(conv_id, FLUSH_PROMPT, ctx, run_turn))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: pre-compaction flush failed; compressing anyway", conv_id)

    async def _reply_restricted(
        self, request: BrainRequest, on_delta: DeltaSink | None
    ) -> BrainReply:
        alias = request.model_alias or self.config.models.default
        merged = restricted_messages(
            request.history, request.text, self.config.brain.restricted_context_tokens
        )
        system = restricted_system_prompt(
            config=self.config,
            channel=request.channel,
            now=self._now(),
            scope=request.scope,
            party_name=request.party_name,
        )
        turn = _Turn()
        deltas = DeltaForwarder(on_delta)
        deltas.new_call()
        try:
            params = self._params(alias, system, merged, thinking=False)
            message = await self.api.call(params, deltas)
        except Rejected as exc:
            return self._rejected_reply(alias, exc, turn)
        self._account(turn, alias, message)
        refused = [b.name for b in message.content if b.type == "tool_use"]
        if refused:
            # No tools were offered: a tool call here is the model being steered by the
            # party's text. Never execute it, never loop on it.
            log.warning("restricted reply on %s: refused tool call(s) %s", request.channel, refused)
        reply_text = text_of(message).strip()
        if reply_text:
            turn.texts.append(reply_text)
        result = self._finish(alias, turn)
        if not reply_text:
            result = BrainReply(
                RESTRICTED_FALLBACK, result.model, result.usage, result.cost, None, {}
            )
        if refused:
            result.extra["refused_tool_calls"] = refused
        return result

    # -- UtilityModel ------------------------------------------------------------------
    async def complete(
        self, *, system: str, prompt: str, model_alias: str = "haiku", max_tokens: int = 400
    ) -> str:
        """One-shot completion (abbreviation, naming); BrainUnavailable when unreachable."""
        params = self._params(
            model_alias,
            system,
            [{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            thinking=False,
        )
        try:
            message = await self.api.call(params, None)
        except Rejected as exc:
            if exc.status in REFUSED_STATUSES:  # this prompt, not the service
                raise RequestRefused(f"request refused ({exc.status}): {exc}") from exc
            raise BrainUnavailable(f"request rejected ({exc.status}): {exc}") from exc
        spent = _Turn()
        self._account(spent, model_alias, message)
        record_spending(spent.usage, spent.cost)  # onto the event it produces
        return text_of(message).strip()

    # -- the tool loop -------------------------------------------------------------------
    async def _tool_loop(
        self,
        alias: str,
        system: str,
        messages: list[dict[str, Any]],
        tools: list[Tool],
        turn: _Turn,
        deltas: DeltaForwarder,
    ) -> None:
        """Call the model, run the tools it asks for, repeat; at most
        ``brain.max_tool_iterations`` rounds of tools, then a final answer without them."""
        available = tool_map(tools)
        limit = self.config.brain.max_tool_iterations
        for iteration in range(limit + 1):
            params = self._params(alias, system, messages)
            if tools:
                params["tools"] = [t.spec() for t in tools]
                if iteration == limit:
                    params["tool_choice"] = {"type": "none"}
            deltas.new_call()
            message = await self.api.call(params, deltas)
            self._account(turn, alias, message)
            turn.stop_reason = message.stop_reason
            text = text_of(message).strip()
            if text:
                turn.texts.append(text)
            turn.thinking.extend(b.thinking for b in message.content if b.type == "thinking")
            calls = [b for b in message.content if b.type == "tool_use"]
            if not calls or message.stop_reason != "tool_use":
                return
            messages.append({"role": "assistant", "content": as_params(message.content)})
            results = []
            for call in calls:
                content, is_error = await execute(available, call.name, call.input)
                log.info(
                    "tool %s -> %s (%d chars)",
                    call.name,
                    "error" if is_error else "ok",
                    len(content),
                )
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": content,
                        "is_error": is_error,
                    }
                )
            messages.append({"role": "user", "content": results})
        log.warning("tool loop ended at the iteration limit (%d)", limit)

    def _params(
        self,
        alias: str,
        system: str,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        thinking: bool = True,
    ) -> dict[str, Any]:
        cfg = self.config.brain
        params: dict[str, Any] = {
            "model": self.config.resolve_model(alias),
            "system": system,
            "messages": messages,
            "max_tokens": max_tokens or cfg.max_tokens,
        }
        if thinking and cfg.thinking_budget_tokens > 0 and max_tokens is None:
            params["thinking"] = {"type": "enabled", "budget_tokens": cfg.thinking_budget_tokens}
            params["max_tokens"] = cfg.max_tokens + cfg.thinking_budget_tokens
        return params

    def _account(self, turn: _Turn, alias: str, message: Any) -> None:
        self._add(
            turn, alias, Usage(message.usage.input_tokens or 0, message.usage.output_tokens or 0)
        )

    def _add(self, turn: _Turn, alias: str, usage: Usage) -> None:
        cost = cost_usd(self.config, alias, usage)
        turn.usage = add_usage(turn.usage, usage)
        turn.cost = add_cost(turn.cost, cost)
        if turn.spend is not None:
            turn.spend.add(usage, cost)

    def _finish(self, alias: str, turn: _Turn) -> BrainReply:
        thinking = "\n\n".join(turn.thinking).strip() or None
        text = "\n\n".join(turn.texts)
        extra: dict[str, Any] = {}
        if not text.strip():
            # No text at all (a refusal, an empty answer, a tool loop cut at its limit):
            # an empty reply showed nothing on Telegram and a blank bubble elsewhere.
            log.warning("the model returned no text (%s)", turn.stop_reason or "no reason")
            text = EMPTY_REPLY
            extra = {"error": "empty", "stopReason": turn.stop_reason}
        elif turn.stop_reason == "max_tokens":
            # The answer stops mid-sentence (brain.max_tokens): say so, or it reads as if
            # the model had meant to end there.
            log.warning("the reply was cut at max_tokens (%d)", self.config.brain.max_tokens)
            text += "\n\n" + CUT_SHORT
            extra = {"stopReason": "max_tokens"}
        return BrainReply(
            text=text,
            model=self.config.resolve_model(alias),
            usage=turn.usage,
            cost=turn.cost,
            thinking_text=thinking,
            extra=extra,
        )

    def _rejected_reply(self, alias: str, exc: Rejected, turn: _Turn) -> BrainReply:
        log.error("the API rejected the request (%d): %s", exc.status, exc)
        text = (
            "I could not answer this: the model service rejected the request "
            f"({exc.status}). Try rephrasing, or start a new conversation with /new."
        )
        return BrainReply(
            text,
            self.config.resolve_model(alias),
            turn.usage,
            turn.cost,
            None,
            {"error": "rejected", "status": exc.status},
        )


__all__ = ["AnthropicBrain", "FlushRequest"]
