"""A restricted reply: a ``known`` third party answered by Claude (SPEC.md "Routing and
trust").

No tools in the request, a system prompt made of the configured scope only (see
:mod:`bot.brain.prompt`), only the party's own history within
``brain.restricted_context_tokens``, and any ``tool_use`` the model emits anyway is
refused without being executed. A reply with no text says :data:`RESTRICTED_FALLBACK`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime

from bot.brain.anthropic_api import MessagesCaller, Rejected, text_of
from bot.brain.anthropic_reply import (
    ReplyParts,
    account,
    add_spent,
    finish,
    rejected_reply,
    request_params,
)
from bot.brain.anthropic_stream import DeltaForwarder, ReplyTimedOut
from bot.brain.base import BrainReply, BrainRequest, DeltaSink
from bot.brain.context import restricted_messages
from bot.brain.prompt import restricted_system_prompt
from bot.config.model import AppConfig

log = logging.getLogger("my_agent.brain")

RESTRICTED_FALLBACK = "Sorry, I can't help with that."
RESTRICTED_CUT = "[This answer was cut off.]"


async def restricted_reply(
    config: AppConfig,
    api: MessagesCaller,
    request: BrainRequest,
    on_delta: DeltaSink | None,
    now: Callable[[], datetime],
    model_gone: Callable[[str, Rejected], Awaitable[str | None]] | None = None,
    deadline: float | None = None,
) -> BrainReply:
    """The reply to a ``known`` party's ``request``, in one call through ``api``.
    ``model_gone``: the alias to answer with instead when a 404 shows the model is gone
    (bot.brain.model_fallback; the party is not told), within the same ``deadline``
    (the reply's ``brain.reply_timeout``, once its first call started it)."""
    alias = request.model_alias or config.models.default
    merged = restricted_messages(
        request.history, request.text, config.brain.restricted_context_tokens
    )
    system = restricted_system_prompt(
        config=config,
        channel=request.channel,
        now=now(),
        scope=request.scope,
        party_name=request.party_name,
        readers=request.readers,
    )
    # the request's running total (bot.reply_generation): an attempt that failed after it
    # started was billed, and a retried one is recorded there even if the reply then waits
    turn = ReplyParts(spend=request.spend)
    deltas = DeltaForwarder(on_delta, lambda used: add_spent(config, turn, alias, used))
    deltas.deadline = deadline  # the fall-back's: the reply's (a fresh one before session 42)
    deltas.new_call()
    try:
        params = request_params(config, alias, system, merged, thinking=False)
        message = await api.call(params, deltas)
    except ReplyTimedOut as exc:
        # brain.reply_timeout (bot.brain.anthropic_api): what was said, marked as cut off
        # (no configuration key named to the party), or the neutral fallback
        log.warning("restricted reply on %s: %s", request.channel, exc)
        said = exc.partial.strip()
        text = f"{said}\n\n{RESTRICTED_CUT}" if said else RESTRICTED_FALLBACK
        return BrainReply(
            text, config.resolve_model(alias), turn.usage, turn.cost, None, {"error": "timeout"}
        )
    except Rejected as exc:
        instead = await model_gone(alias, exc) if model_gone and exc.status == 404 else None
        if instead is not None:
            answered = replace(request, model_alias=instead)
            return await restricted_reply(
                config, api, answered, on_delta, now, deadline=deltas.deadline
            )
        # The owner's notice names the model and says to use /model or /new: a party
        # can do neither, and the model's id is none of their business.
        return replace(rejected_reply(config, alias, exc, turn), text=RESTRICTED_FALLBACK)
    account(config, turn, alias, message)
    refused = [b.name for b in message.content if b.type == "tool_use"]
    if refused:
        # No tools were offered: a tool call here is the model being steered by the
        # party's text. Never execute it, never loop on it.
        log.warning("restricted reply on %s: refused tool call(s) %s", request.channel, refused)
    reply_text = text_of(message).strip()
    if reply_text:
        turn.texts.append(reply_text)
    result = finish(config, alias, turn)
    if not reply_text:
        result = BrainReply(RESTRICTED_FALLBACK, result.model, result.usage, result.cost, None, {})
    if refused:
        result.extra["refused_tool_calls"] = refused
    return result
