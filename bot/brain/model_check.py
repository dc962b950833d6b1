"""Whether the model service offers a model: asked before ``/model`` switches to it, at
the start (bot/lifecycle/missing_models.py), and when a reply meets a 404.

A model id the API does not know (a retired model, a typo in ``models.aliases``, an
alias removed from the configuration while a conversation still names it) fails every
reply with 404 ``not_found_error``; switched to, the conversation (and each one ``/new``
makes from it, since they inherit the model) answered nothing but notices. The Models
API (``GET /v1/models/{id}``) answers that for free, without a token spent.
:class:`GoneModels` keeps what this process learnt, so that a reply on a model known to
be gone goes to ``models.default`` at once instead of failing a request first.
"""

from __future__ import annotations

import asyncio
import logging

import anthropic
from anthropic import AsyncAnthropic

from bot.brain.anthropic_api import Rejected, error_message

log = logging.getLogger("my_agent.brain")

CHECK_TIMEOUT = 10.0  # seconds: the owner waits for the /model answer
NOT_FOUND = "not_found_error"


async def ask_models_api(client: AsyncAnthropic, model_id: str) -> str | bool | None:
    """The service's own 404 message when it does not offer ``model_id``, True when it
    does, None when it cannot say (unreachable, another error, an endpoint without the
    Models API)."""
    try:
        await client.models.retrieve(model_id, timeout=CHECK_TIMEOUT)
    except asyncio.CancelledError:
        raise
    except anthropic.NotFoundError as exc:
        body = exc.body
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("type") == NOT_FOUND:
            return error_message(exc)
        log.info("cannot check model %s (404 without the API's error): %s", model_id, exc)
    except Exception as exc:  # an outage or anything else: the reply will tell
        log.info("cannot check model %s: %s", model_id, exc)
        return None
    else:
        return True
    return None


async def model_problem(client: AsyncAnthropic, model_id: str) -> str | None:
    """Why the service does not offer ``model_id`` (its own 404 message), or None when it
    does or cannot say: only the API's own ``not_found_error`` keeps the owner from
    switching, so that an outage or a compatible endpoint serving Messages alone never
    blocks ``/model``."""
    answer = await ask_models_api(client, model_id)
    return answer if isinstance(answer, str) else None


async def model_gone(client: AsyncAnthropic, model_id: str, refused: Rejected) -> str | None:
    """Whether the 404 ``refused`` of a Messages call on ``model_id`` is about the model
    (its message, or the Models API's), or None when it is about something else. Only
    the API's own ``not_found_error`` counts (a proxy's or a web server's 404 page says
    nothing about the model); the Models API decides, and where it cannot say, the
    error's naming the model does ("model: claude-..."). Taking every 404 for a gone
    model would answer a misrouted request from another model without a word of why."""
    if refused.status != 404 or refused.kind != NOT_FOUND:
        return None
    answer = await ask_models_api(client, model_id)
    if answer is True:
        log.info("404 on %s, which the Models API offers: not about the model", model_id)
        return None
    if isinstance(answer, str):
        return answer
    return str(refused) if model_id in str(refused) else None


class GoneModels:
    """The model ids this process learnt the service does not offer (a reply's 404, the
    Models API's answer at the start or to ``/model``), each with the service's words;
    an answer from the model, or the Models API offering it again, forgets it."""

    def __init__(self) -> None:
        self.details: dict[str, str] = {}

    def note(self, model_id: str, detail: str) -> None:
        """The service does not offer ``model_id`` (``detail``: its words)."""
        if model_id not in self.details:
            log.warning("the model service does not offer %s: %s", model_id, detail)
        self.details[model_id] = detail

    def back(self, model_id: str) -> None:
        """``model_id`` answered, or is offered again."""
        if self.details.pop(model_id, None) is not None:
            log.info("model %s is offered again", model_id)

    def gone(self, model_id: str) -> bool:
        """Whether ``model_id`` is known not to be offered."""
        return model_id in self.details
