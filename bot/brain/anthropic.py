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
way forever, so the reply becomes a short error notice instead of a pending retry; one
refused as too long before anything was said is first asked again once with a smaller
context (:meth:`~bot.brain.compression.Compressor.shrink`); a 404 that shows the
conversation's model is gone is answered by ``models.default`` (:mod:`bot.brain.model_fallback`).

Restricted profile (a ``known`` third party): no tools, the configured scope only, the
party's own history (:mod:`bot.brain.restricted_reply`).

Compression lives in :mod:`bot.brain.compression`; the parameters, accounting and final
text of each reply in :mod:`bot.brain.anthropic_reply`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from anthropic import AsyncAnthropic

from bot.brain.anthropic_api import MessagesCaller, Rejected
from bot.brain.anthropic_reply import (
    CUT_SHORT,
    EMPTY_REPLY,
    ReplyParts,
    add_spent,
    finish,
    rejected_reply,
    request_params,
    timed_out_reply,
    unreadable_reply,
)
from bot.brain.anthropic_stream import DeltaForwarder, ReplyTimedOut, UnreadableAnswer
from bot.brain.base import BrainReply, BrainRequest, BrainUnavailable, DeltaSink
from bot.brain.compression import Compressor, FlushRequest
from bot.brain.context import ContextTurn, WorkingContext, estimate_tokens
from bot.brain.model_fallback import ModelDropped, ModelFallback
from bot.brain.one_shot import complete_once
from bot.brain.prompt import PersonaFile, format_now, owner_system_prompt
from bot.brain.prompt_cache import add_clock_note, with_breakpoints
from bot.brain.restricted_reply import RESTRICTED_FALLBACK, restricted_reply
from bot.brain.tool_calls import Tool
from bot.brain.tool_round import tool_loop
from bot.brain.tools import RecallTools
from bot.brain.working_contexts import WorkingContexts
from bot.config.model import AppConfig
from bot.labels import title_for_model
from bot.owner_days import owner_zone

log = logging.getLogger("my_agent.brain")


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
        self.models = ModelFallback(config, self.client)
        self._now = now
        self.persona = PersonaFile(config.data_dir / cfg.persona_file)
        self.recall = RecallTools(config, services)
        self._tools_tokens = estimate_tokens(json.dumps([t.spec() for t in self.recall.tools()]))
        self.contexts = WorkingContexts(
            max_turns=cfg.working_context_turns,
            max_tokens=cfg.working_context_tokens,
            keep_tokens=min(cfg.working_context_tokens, cfg.compression_budget_tokens // 2),
            # Half the budget, so the context with such a message in it stays within the
            # budget: cut to the whole budget, it kept the context over it, each reply
            # compressed, and the first follow-up summarised the message away.
            max_turn_tokens=cfg.compression_budget_tokens // 2,
            budget_tokens=cfg.compression_budget_tokens,
            zone=lambda: owner_zone(self.config),
        )
        self.compressor = Compressor(config, services, self.contexts, self.api, self._tool_loop)

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
        # A model the service no longer offers: the default answers, saying so first
        # (bot.brain.model_fallback); known gone, without a failing request first.
        instead = self.models.instead_of(alias)
        deadline = None
        if instead is None:
            try:
                return await self._answer_owner(request, alias, on_delta)
            except ModelDropped as exc:
                instead, deadline = exc.instead, exc.deadline
        answered = replace(request, model_alias=instead)
        reply = await self._answer_owner(answered, instead, on_delta, deadline)
        return self.models.dropped_reply(alias, instead, reply)

    async def _answer_owner(
        self,
        request: BrainRequest,
        alias: str,
        on_delta: DeltaSink | None,
        deadline: float | None = None,
    ) -> BrainReply:
        """The reply of ``alias``; :class:`ModelDropped` when a 404 before anything was
        said shows the model is gone and the default can answer instead. ``deadline``:
        the reply's, when an earlier model's calls started it (its fall-back)."""
        ctx, title = await self._owner_context(request)
        system = self._owner_system(request, ctx, title)
        turn = ReplyParts(spend=request.spend)
        # an attempt that failed midway was billed too: onto the turn and the running total
        deltas = DeltaForwarder(on_delta, lambda used: add_spent(self.config, turn, alias, used))
        # One brain.reply_timeout per reply: before session 42 the default's fall-back
        # after a 404 started a fresh one, the reply waiting up to twice as long.
        deltas.deadline = deadline
        try:
            current = (
                (request.conversation_id, request.turn_number)
                if request.conversation_id and request.turn_number
                else None
            )
            try:
                tools = self.recall.tools(current, only=request.recall_scope)
                await self._tool_loop(alias, system, ctx.messages(), tools, turn, deltas)
            except Rejected as exc:
                if not exc.too_long or turn.texts or deltas.any_sent:
                    raise  # said something already: it stays, with the notice after it
                # Once, with a smaller context: refused as it was, this reply and every
                # later one of the conversation got "rejected the request (400)".
                ctx = await self._shrunk(request, alias, system, ctx, exc)
                system = self._owner_system(request, ctx, title)
                turn.thinking.clear()  # of the refused attempt's tool rounds
                tools = self.recall.tools(current, only=request.recall_scope)  # fresh budget
                await self._tool_loop(alias, system, ctx.messages(), tools, turn, deltas)
        except asyncio.CancelledError:
            if deltas.cut is not None:  # stopped mid-stream: that call's tokens were spent
                add_spent(self.config, turn, alias, deltas.cut)
            raise
        except Rejected as exc:
            if exc.status == 404 and not turn.texts and not deltas.any_sent:
                instead = await self.models.after_404(alias, exc)
                if instead is not None:
                    raise ModelDropped(instead, deltas.deadline) from exc
            return rejected_reply(self.config, alias, exc, turn)
        except ReplyTimedOut as exc:
            # Not an outage (waiting for the model again would hold the conversation once
            # more): what was said, marked as cut off (its calls' usage is in ``turn``).
            log.warning(
                "no complete answer within brain.reply_timeout (%gs: %s); the reply ends "
                "with what was said",
                self.config.brain.reply_timeout,
                exc,
            )
            return timed_out_reply(self.config, alias, turn, exc.partial)
        except UnreadableAnswer as exc:
            if not turn.texts:
                raise  # nothing said yet: the reply engine's apology
            # A later round: the owner keeps what earlier rounds said (and watched stream in).
            log.warning("the model's answer could not be read after a tool round: %s", exc)
            return unreadable_reply(self.config, alias, turn)
        self.models.gone.back(self.config.resolve_model(alias))  # it answers
        return finish(self.config, alias, turn)

    async def build_request(self, request: BrainRequest) -> dict[str, Any]:
        """The Messages API parameters of the first call for an owner ``request``: working
        context assembly without the call (benchmarks, diagnostics). Compresses first if
        the context is over budget, exactly as :meth:`reply` would."""
        alias = request.model_alias or self.config.models.default
        ctx, title = await self._owner_context(request)
        system = self._owner_system(request, ctx, title)
        messages = self._with_clock(ctx.messages())
        params = request_params(self.config, alias, system, messages)
        if self.config.brain.prompt_cache:
            params = with_breakpoints(params, messages[-1] if messages else None)
        params["tools"] = [t.spec() for t in self.recall.tools(only=request.recall_scope)]
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
        # An escalation's automatic title names the parties by the names they chose
        # (bot.labels.title_for_model): before session 40 it was the owner's system
        # prompt's "Conversation title", unlabelled, until the naming at turn 5.
        title = title_for_model(record) if record is not None else None
        ctx = self.contexts.assemble(conv_id, lines, request.text, request.turn_number)
        system = self._owner_system(request, ctx, title)
        # The summary is in the system prompt: counted again with the turns (ctx.tokens(),
        # before session 40), it brought compression forward by its own size each time,
        # and a long summary compressed a context well inside the budget.
        size = estimate_tokens(system) + ctx.turn_tokens() + self._tools_tokens
        if size > self.config.brain.compression_budget_tokens:
            alias = request.model_alias or self.config.models.default
            ctx = await self.compressor.compress(conv_id, alias, system, ctx, lines)
        elif ctx.unsummarised:
            # A hydration over the budget loaded the recent window only: the turns before
            # it are summarised now, not once the context passes the budget again (before
            # session 40, hundreds of messages later: meanwhile they were in no context).
            ctx = await self.compressor.cover_gap(conv_id, ctx, lines)
        return ctx, title

    async def _shrunk(
        self,
        request: BrainRequest,
        alias: str,
        system: str,
        ctx: WorkingContext,
        refused: Rejected,
    ) -> WorkingContext:
        """``ctx`` made smaller after the API refused it as too long
        (:meth:`~bot.brain.compression.Compressor.shrink`)."""
        conv_id = request.conversation_id
        lines = []
        if conv_id is not None:
            lines = await asyncio.to_thread(self.services.conversations.read_lines, conv_id)
        fixed = estimate_tokens(system) + self._tools_tokens
        return await self.compressor.shrink(conv_id, alias, system, ctx, lines, fixed, refused)

    def _owner_system(self, request: BrainRequest, ctx: WorkingContext, title: str | None) -> str:
        return owner_system_prompt(
            config=self.config,
            persona=self.persona.read(),
            channel=request.channel,
            # with prompt caching, in a note after the newest message (bot.brain.prompt_cache)
            now=None if self.config.brain.prompt_cache else self._now(),
            conversation_title=title,
            summary=ctx.summary,
            notes=request.notes,
            conversation_id=request.conversation_id,
            first_turn=ctx.start_turn,
            group=request.recall_scope is not None,
            others=ctx.shows_others,
        )

    async def _reply_restricted(
        self, request: BrainRequest, on_delta: DeltaSink | None
    ) -> BrainReply:
        instead = self.models.instead_of(request.model_alias or self.config.models.default)
        if instead is not None:  # (silently: the party is not told of the owner's models)
            request = replace(request, model_alias=instead)
        return await restricted_reply(
            self.config, self.api, request, on_delta, self._now, self.models.after_404
        )

    async def check_model(self, alias: str) -> str | None:
        """Why the service does not offer the model of ``alias`` (``/model`` keeps the
        current one then), or None (:meth:`~bot.brain.model_fallback.ModelFallback.check`:
        remembered for the replies)."""
        return await self.models.check(alias)

    def failing(self) -> BrainUnavailable | None:
        """Why the last call could not reach the model (:class:`BrainAccessRefused`: the
        key or the account; else an outage), None once one got through (``/status``)."""
        return self.api.failing

    def missing_models(self) -> dict[str, str]:
        """The model ids this process learnt the service does not offer, each with the
        service's words (``/status``)."""
        return dict(self.models.gone.details)

    def forget_missing_models(self) -> None:
        """Forget them (``models.*`` reloaded: the check is made again)."""
        self.models.gone.details.clear()

    # -- UtilityModel ------------------------------------------------------------------
    async def complete(
        self, *, system: str, prompt: str, model_alias: str = "haiku", max_tokens: int = 400
    ) -> str:
        """One-shot completion (abbreviation, naming): :func:`~bot.brain.one_shot.complete_once`."""
        return await complete_once(
            self.config,
            self.api,
            system=system,
            prompt=prompt,
            model_alias=model_alias,
            max_tokens=max_tokens,
        )

    # -- the tool loop -------------------------------------------------------------------
    async def _tool_loop(
        self,
        alias: str,
        system: str,
        messages: list[dict[str, Any]],
        tools: list[Tool],
        turn: ReplyParts,
        deltas: DeltaForwarder,
    ) -> None:
        """:func:`bot.brain.tool_round.tool_loop` on this brain's config and API; with
        prompt caching, the date and time in a note after the newest message."""
        messages = self._with_clock(messages)
        await tool_loop(self.config, self.api, alias, system, messages, tools, turn, deltas)

    def _with_clock(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages``, with prompt caching the clock note after the newest one (not in
        the system prompt: :mod:`bot.brain.prompt_cache`)."""
        if self.config.brain.prompt_cache:
            add_clock_note(messages, format_now(self.config, self._now()))
        return messages


# CUT_SHORT, EMPTY_REPLY and FlushRequest stay importable from here (tests, hooks).
__all__ = ["CUT_SHORT", "EMPTY_REPLY", "RESTRICTED_FALLBACK", "AnthropicBrain", "FlushRequest"]
