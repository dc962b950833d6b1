"""One-shot completions for background work (abbreviation, naming): the
:class:`~bot.brain.base.UtilityModel` side of :class:`~bot.brain.anthropic.AnthropicBrain`,
apart from the reply's tool loop."""

from __future__ import annotations

import logging

from bot.brain.anthropic_api import MessagesCaller, Rejected, text_of
from bot.brain.anthropic_reply import ReplyParts, account, request_params
from bot.brain.base import BrainUnavailable, ModelNotFound, RequestRefused
from bot.brain.cost import record_spending
from bot.brain.model_check import model_gone
from bot.config.model import AppConfig

log = logging.getLogger("my_agent.brain")

# Rejections that are about the request itself (bad request, too large, unprocessable):
# asking again gives the same; 401/403/404 and the rest are the configuration or service
# (a 404 not about the model, a proxy's page: an outage, asked again later).
REFUSED_STATUSES = frozenset({400, 413, 422})


async def complete_once(
    config: AppConfig,
    api: MessagesCaller,
    *,
    system: str,
    prompt: str,
    model_alias: str,
    max_tokens: int,
) -> str:
    """One-shot completion; BrainUnavailable when unreachable, :class:`RequestRefused`
    for a prompt the API refuses, :class:`ModelNotFound` for a 404 about the model (the
    API's own ``not_found_error``, confirmed by :func:`~bot.brain.model_check.model_gone`).

    An answer cut at ``max_tokens`` is asked again once with twice the room: notes cut
    mid-sentence were stored as they were, a title's JSON cut short was no JSON."""
    for attempt_tokens in (max_tokens, 2 * max_tokens):
        params = request_params(
            config,
            model_alias,
            system,
            [{"role": "user", "content": prompt}],
            max_tokens=attempt_tokens,
            thinking=False,
        )
        try:
            message = await api.call(params, None)
        except Rejected as exc:
            if exc.status in REFUSED_STATUSES:  # this prompt, not the service
                raise RequestRefused(f"request refused ({exc.status}): {exc}") from exc
            if exc.status == 404:
                model_id = config.resolve_model(model_alias)
                # The model itself only when the API says so (as for a reply): before
                # session 40 a proxy's 404 page on one call told the owner to fix
                # models.aliases and restart, and wrote the offline stand-in at once.
                detail = await model_gone(api.client, model_id, exc)
                if detail is not None:  # the configuration, not an outage
                    raise ModelNotFound(model_alias, model_id, detail) from exc
            raise BrainUnavailable(f"request rejected ({exc.status}): {exc}") from exc
        spent = ReplyParts()
        account(config, spent, model_alias, message)
        record_spending(spent.usage, spent.cost)  # onto the event it produces
        if message.stop_reason == "refusal":
            # What came before the refusal is no answer: stored, "User asked about" was
            # a conversation's notes for good (before session 39).
            raise RequestRefused("the model refused to answer (stop_reason: refusal)")
        if message.stop_reason != "max_tokens":
            break
        log.warning("a %s answer was cut at %d tokens", model_alias, attempt_tokens)
    return text_of(message).strip()
