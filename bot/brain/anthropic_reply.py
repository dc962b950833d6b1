"""One Claude reply's parts: request parameters, usage and cost, the final text.

What :class:`~bot.brain.anthropic.AnthropicBrain` builds around each Messages API call,
as functions of the configuration alone: the parameters of a call
(:func:`request_params`: model alias resolved, thinking budget), the running usage and
cost of a reply across its tool rounds (:class:`ReplyParts`, :func:`account`), and the
reply that comes out of them (:func:`finish`: the empty, cut-short, refusal and paused
notices; :func:`rejected_reply` for a request the API refuses for good,
:func:`unreadable_reply` for an answer that cannot be read, :func:`timed_out_reply` for
one not finished within ``brain.reply_timeout``, each keeping what earlier rounds said).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from bot.brain.anthropic_api import Rejected
from bot.brain.base import BrainReply, Spend, Usage
from bot.brain.cost import add_cost, add_usage, cost_usd, usage_of
from bot.config.model import AppConfig

log = logging.getLogger("my_agent.brain")

EMPTY_REPLY = "(The model returned no answer to this. Ask again, or rephrase it.)"
# No text, by stop reason: "no answer, ask again" read as a glitch for a model that
# declined, and was not what happened to an answer cut before its first word.
REFUSED_REPLY = "(The model declined to answer this. Rephrase it, or ask something else.)"
CUT_BEFORE_ANSWER = (
    "(The answer was cut at the length limit before it began. Ask again, perhaps for a "
    "shorter answer.)"
)
CUT_SHORT = '[This reply was cut short at the length limit. Say "continue" for the rest.]'
REFUSAL_NOTE = "[The model stopped here and declined to continue this answer.]"
# A turn the API paused (pause_turn) and the tool loop's rounds ran out before it ended.
PAUSED_NOTE = "[This answer was paused unfinished by the model service. Ask again for the rest.]"
TOO_LONG = (
    "I could not answer this: this conversation is too long for the model to read at once, "
    "even shortened. Start a new conversation with /new (this one stays searchable)."
)
# After a tool round said something (not asked again: the owner watched it stream in).
TOO_LONG_LATER = (
    "[I could not finish this answer: with what the tools found, it became too long for "
    "the model to read at once. Ask for less at a time, or start a new conversation with /new.]"
)
# What helps after a refusal that was not the API's (a proxy's page), by its status.
FOREIGN_HINTS = {
    413: "It limits the size of requests: ask whoever runs it to raise the limit, or start "
    "a new conversation with /new (smaller requests).",
}
# Stop reasons that cut an answer off: its max_tokens, or the model's context window (the
# tool results of one reply can fill it).
CUT_REASONS = frozenset({"max_tokens", "model_context_window_exceeded"})


@dataclass
class ReplyParts:
    """Accumulates what one reply produced across tool-loop iterations."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    texts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    stop_reason: str | None = None  # of the last call
    spend: Spend | None = None  # the request's running total (BrainRequest.spend)


def request_params(
    config: AppConfig,
    alias: str,
    system: str,
    messages: list[dict[str, Any]],
    *,
    max_tokens: int | None = None,
    thinking: bool = True,
) -> dict[str, Any]:
    """Messages API parameters; extended thinking only for a reply at the default size."""
    cfg = config.brain
    params: dict[str, Any] = {
        "model": config.resolve_model(alias),
        "system": system,
        "messages": messages,
        "max_tokens": max_tokens or cfg.max_tokens,
    }
    if thinking and cfg.thinking_budget_tokens > 0 and max_tokens is None:
        params["thinking"] = {"type": "enabled", "budget_tokens": cfg.thinking_budget_tokens}
        params["max_tokens"] = cfg.max_tokens + cfg.thinking_budget_tokens
    return params


def account(config: AppConfig, parts: ReplyParts, alias: str, message: Any) -> None:
    """Add one API answer's usage (and its price) to ``parts``."""
    add_spent(config, parts, alias, usage_of(message.usage))


def add_spent(config: AppConfig, parts: ReplyParts, alias: str, usage: Usage) -> None:
    """Add ``usage`` to ``parts`` and to the request's running total, if it has one."""
    cost = cost_usd(config, alias, usage)
    parts.usage = add_usage(parts.usage, usage)
    parts.cost = add_cost(parts.cost, cost)
    if parts.spend is not None:
        parts.spend.add(usage, cost)


def finish(config: AppConfig, alias: str, parts: ReplyParts) -> BrainReply:
    """The reply: its texts joined, or a labelled notice when there is none."""
    thinking = "\n\n".join(parts.thinking).strip() or None
    text = "\n\n".join(parts.texts)
    extra: dict[str, Any] = {}
    if not text.strip():
        # No text at all (a refusal, an empty answer, a tool loop cut at its limit):
        # an empty reply showed nothing on Telegram and a blank bubble elsewhere.
        log.warning("the model returned no text (%s)", parts.stop_reason or "no reason")
        if parts.stop_reason == "refusal":
            text = REFUSED_REPLY
        elif parts.stop_reason in CUT_REASONS:
            text = CUT_BEFORE_ANSWER
        else:
            text = EMPTY_REPLY
        extra = {"error": "empty", "stopReason": parts.stop_reason}
    elif parts.stop_reason in CUT_REASONS:
        # The answer stops mid-sentence (brain.max_tokens, or the context window): say
        # so, or it reads as if the model had meant to end there.
        log.warning(
            "the reply was cut (%s, max_tokens %d)", parts.stop_reason, config.brain.max_tokens
        )
        text += "\n\n" + CUT_SHORT
        extra = {"stopReason": parts.stop_reason}
    elif parts.stop_reason == "refusal":
        # The text before it went out as if it were the whole answer, with no sign that
        # the model had stopped.
        log.warning("the model refused after %d character(s) of reply", len(text))
        text += "\n\n" + REFUSAL_NOTE
        extra = {"stopReason": "refusal"}
    elif parts.stop_reason == "pause_turn":
        # Each continuation takes a round of the tool loop: one still paused when they
        # ran out went out as if the model had finished it.
        log.warning("the reply was still paused at the round limit")
        text += "\n\n" + PAUSED_NOTE
        extra = {"stopReason": "pause_turn"}
    return BrainReply(
        text=text,
        model=config.resolve_model(alias),
        usage=parts.usage,
        cost=parts.cost,
        thinking_text=thinking,
        extra=extra,
    )


def rejected_reply(config: AppConfig, alias: str, exc: Rejected, parts: ReplyParts) -> BrainReply:
    """The notice for a reply the API rejected (it would fail again): the whole reply,
    or appended to what earlier tool rounds said."""
    log.error("the API rejected the request (%d): %s", exc.status, exc)
    if exc.foreign is not None:
        # Not the API's answer (a proxy's page): before session 41 its 413 read "this
        # conversation is too long for the model" and its 404 "the model service does not
        # offer the model", the page's HTML quoted as the service's words.
        what = (
            "my request was refused by something between me and the model service, not "
            f'by the service itself (HTTP {exc.status}: "{exc.foreign}"), a proxy perhaps'
        )
        hint = FOREIGN_HINTS.get(exc.status, "Check the proxy or brain.base_url, then ask again.")
        return failed_reply(
            config,
            alias,
            parts,
            f"I could not answer this: {what}. {hint}",
            f"[I could not finish this answer: {what}. {hint}]",
            {"error": "not_api", "status": exc.status},
        )
    if exc.too_long:
        # Asked again with a smaller context already (bot.brain.anthropic): say what is
        # wrong and what helps, not a status code.
        return failed_reply(
            config,
            alias,
            parts,
            TOO_LONG,
            TOO_LONG_LATER,
            {"error": "too_long", "status": exc.status},
        )
    if exc.status == 404:
        # Not the request: the model (a retired id, a typo in models.aliases). "Try
        # rephrasing, or /new" could not help: /new inherits the model.
        model = config.resolve_model(alias)
        others = ", ".join(a for a in config.models.aliases if a != alias) or "another"
        what = f"the model service does not offer the model {model} ({alias}; 404: {exc})"
        return failed_reply(
            config,
            alias,
            parts,
            f"I could not answer this: {what}. Switch with /model ({others}) and ask again.",
            f"[I could not finish this answer: {what}. Switch with /model ({others}).]",
            {"error": "model_not_found", "status": 404},
        )
    what = f"the model service rejected the request ({exc.status})"
    return failed_reply(
        config,
        alias,
        parts,
        f"I could not answer this: {what}. Try rephrasing, or start a new conversation with /new.",
        f"[I could not finish this answer: {what}. Try rephrasing, or start a new "
        "conversation with /new.]",
        {"error": "rejected", "status": exc.status},
    )


def unreadable_reply(config: AppConfig, alias: str, parts: ReplyParts) -> BrainReply:
    """What earlier tool rounds said, and a notice that the next answer could not be read
    (only when they said something: else the reply engine's apology)."""
    return failed_reply(
        config,
        alias,
        parts,
        "I could not answer this: the model's answer could not be read. Ask again.",
        "[I could not finish this answer: the model's next answer could not be read. Ask again.]",
        {"error": "unreadable"},
    )


def timed_out_reply(config: AppConfig, alias: str, parts: ReplyParts, partial: str) -> BrainReply:
    """The reply whose model calls took over ``brain.reply_timeout``: what earlier tool
    rounds said and the text the cut-off stream had sent, marked as cut off, or a notice
    when nothing was said (a slow but steady stream held the reply, and the
    conversation's next messages, for ever before session 41)."""
    if partial.strip():
        parts.texts.append(partial.strip())
    limit = _duration(config.brain.reply_timeout)
    return failed_reply(
        config,
        alias,
        parts,
        f"I could not answer this: the model service had not finished its answer after "
        f"{limit} (brain.reply_timeout), so I stopped waiting. Ask again.",
        f"[This answer was cut off here: the model service had not finished it after "
        f'{limit} (brain.reply_timeout). Ask again, or say "continue" for the rest.]',
        {"error": "timeout"},
    )


def _duration(seconds: float) -> str:
    """``10 minutes``, ``90 seconds``."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} minutes"
    return f"{seconds:g} seconds"


def failed_reply(
    config: AppConfig,
    alias: str,
    parts: ReplyParts,
    alone: str,
    appended: str,
    extra: dict[str, Any],
) -> BrainReply:
    """A reply ended by an error: ``alone`` if nothing was said, else what earlier tool
    rounds said (the owner had watched it stream in) with ``appended`` after it."""
    said = "\n\n".join(parts.texts)
    text = f"{said}\n\n{appended}" if said.strip() else alone
    return BrainReply(
        text,
        config.resolve_model(alias),
        parts.usage,
        parts.cost,
        "\n\n".join(parts.thinking).strip() or None,
        extra,
    )


__all__ = [
    "CUT_BEFORE_ANSWER",
    "CUT_REASONS",
    "CUT_SHORT",
    "EMPTY_REPLY",
    "PAUSED_NOTE",
    "REFUSAL_NOTE",
    "REFUSED_REPLY",
    "TOO_LONG",
    "TOO_LONG_LATER",
    "ReplyParts",
    "account",
    "add_spent",
    "failed_reply",
    "finish",
    "rejected_reply",
    "request_params",
    "timed_out_reply",
    "unreadable_reply",
]
