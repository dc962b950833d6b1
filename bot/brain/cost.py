"""Token prices and cost sums (USD per million tokens, ``models.prices`` in config).

A reply's cost is computed once, when it is produced, and written into the assistant
turn (``usage``, ``cost``); compression, abbreviation and naming events carry their own
(the last two collected with :func:`tracking`). Sums per conversation
(``/status``, the dashboard) add those stored figures up, so a later price change never
rewrites history.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from bot.brain.base import BrainReply, Usage
from bot.config.model import AppConfig, PriceConfig, default_aliases

log = logging.getLogger("my_agent.brain.cost")

_warned: set[str] = set()

# Prompt caching's prices as multiples of the input price, when models.prices gives none
# (the Messages API's pricing: a 5-minute cache write, a cache read).
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


def price_for(config: AppConfig, alias_or_model: str) -> PriceConfig | None:
    """The price of an alias or a real model id: the price of its model id first, then
    of the alias itself, then of any other alias naming the same model.

    Every reply, note, title and compression is priced by its alias, and the default
    table always prices opus, sonnet and haiku, so looking the alias up first never
    reached a price the owner had keyed by model id (``aliases.sonnet: claude-sonnet-5``
    with ``prices.claude-sonnet-5`` billed sonnet's default), and an extra alias for a
    priced model (``aliases.fast: claude-haiku-4-5``) found no price at all (before
    session 40). The defaults hold no model id, so an id's price is always the owner's.
    """
    prices = config.models.prices
    model_id = config.resolve_model(alias_or_model)
    if model_id in prices:
        return prices[model_id]
    if alias_or_model in prices:
        return prices[alias_or_model]
    for alias, target in config.models.aliases.items():
        if target == model_id and alias in prices:
            return prices[alias]
    # A default alias the file's table leaves out still prices its model (an alias the
    # file points elsewhere prices that other model instead).
    for alias, target in default_aliases().items():
        if target == model_id and alias in prices and alias not in config.models.aliases:
            return prices[alias]
    return None


def cost_usd(config: AppConfig, alias_or_model: str, usage: Usage) -> float | None:
    """USD for ``usage`` at the configured price; None (logged once) when no price is known."""
    price = price_for(config, alias_or_model)
    if price is None:
        if alias_or_model not in _warned:
            _warned.add(alias_or_model)
            log.warning(
                "no price configured for %s (models.prices); cost not recorded", alias_or_model
            )
        return None
    write = price.cache_write if price.cache_write is not None else price.input * CACHE_WRITE_FACTOR
    read = price.cache_read if price.cache_read is not None else price.input * CACHE_READ_FACTOR
    # The cache's tokens are no part of input_tokens: left out, a cached prompt's reply
    # was recorded at the price of its few uncached tokens.
    total = (
        usage.input * price.input
        + usage.cache_write * write
        + usage.cache_read * read
        + usage.output * price.output
    )
    return round(total / 1_000_000, 8)


def shown_usd(cost: float) -> str:
    """``$0.0123``; a cost under a hundredth of a cent ``< $0.0001`` (it read "$0.0000",
    as if nothing had been spent, before session 40)."""
    if 0 < cost < 0.00005:
        return "< $0.0001"
    return f"${cost:.4f}"


def usage_of(usage: Any) -> Usage:
    """Our :class:`~bot.brain.base.Usage` of an API answer's ``usage`` (cache tokens
    included; an answer cut before its counts has zeros)."""
    return Usage(
        int(usage.input_tokens or 0),
        int(usage.output_tokens or 0),
        int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
        int(getattr(usage, "cache_read_input_tokens", 0) or 0),
    )


def stored_input(usage: Mapping[str, Any]) -> int:
    """The input tokens of a stored ``usage`` (:func:`usage_fields`): every one, at
    whatever price it was billed (its ``cost`` says that)."""
    return sum(int(usage.get(key, 0) or 0) for key in ("input", "cacheWrite", "cacheRead"))


def usage_fields(usage: Usage) -> dict[str, int]:
    """``usage`` as stored on a turn or event: ``input`` and ``output``, and
    ``cacheWrite`` / ``cacheRead`` when prompt caching counted any."""
    fields = {"input": usage.input, "output": usage.output}
    if usage.cache_write:
        fields["cacheWrite"] = usage.cache_write
    if usage.cache_read:
        fields["cacheRead"] = usage.cache_read
    return fields


def reply_spent(reply: BrainReply) -> dict[str, Any]:
    """What a reply's line records of its model calls, as an assistant turn does
    (:meth:`bot.reply_writes.ReplyWrites._store`): ``model``, ``usage``
    (:func:`usage_fields`) and ``cost`` (left out when unpriced, or when no call
    reported any)."""
    fields: dict[str, Any] = {"model": reply.model}
    if reply.usage is not None:
        fields["usage"] = usage_fields(reply.usage)
    if reply.cost is not None:
        fields["cost"] = reply.cost
    return fields


@dataclass
class Spending:
    """What the model calls made inside :func:`tracking` cost (background work: notes,
    titles), to be written on the event they produced."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    calls: int = 0

    def fields(self) -> dict[str, Any]:
        """``usage`` and ``cost`` event fields; none when no call was made."""
        if not self.calls:
            return {}
        return {"usage": usage_fields(self.usage), "cost": self.cost}


_spending: ContextVar[Spending | None] = ContextVar("my_agent_spending", default=None)


@contextmanager
def tracking() -> Iterator[Spending]:
    """Collect the usage and cost of the model calls made inside this block (in this
    task): the one-shot calls of abbreviation and naming report here, so their cost
    lands on the conversation's events instead of being paid and recorded nowhere."""
    spent = Spending()
    token = _spending.set(spent)
    try:
        yield spent
    finally:
        _spending.reset(token)


def record_spending(usage: Usage, cost: float | None) -> None:
    """Add one call to the enclosing :func:`tracking` block, if any."""
    spent = _spending.get()
    if spent is not None:
        spent.usage = add_usage(spent.usage, usage)
        spent.cost = add_cost(spent.cost, cost)
        spent.calls += 1


def add_usage(a: Usage, b: Usage) -> Usage:
    return a + b


def add_cost(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return round(a + b, 8)


@dataclass(frozen=True)
class CostSummary:
    """What one conversation has cost so far (replies, compression, notes and titles)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    replies: int = 0  # assistant turns that carry usage

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": round(self.cost, 6),
            "replies": self.replies,
        }


def summarize_costs(lines: Iterable[Mapping[str, Any]]) -> CostSummary:
    """Sum ``usage`` and ``cost`` over a transcript's assistant turns and events."""
    inp = out = replies = 0
    total = 0.0
    for line in lines:
        is_reply = line.get("type") == "turn" and line.get("role") == "assistant"
        if not (is_reply or line.get("type") == "event"):
            continue
        usage = line.get("usage")
        if isinstance(usage, Mapping):
            inp += stored_input(usage)
            out += int(usage.get("output", 0) or 0)
            replies += int(is_reply)
        cost = line.get("cost")
        if isinstance(cost, int | float):
            total += float(cost)
    return CostSummary(inp, out, total, replies)
