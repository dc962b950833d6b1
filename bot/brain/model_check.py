"""Whether the model service offers a model: asked before ``/model`` switches to it.

A model id the API does not know (a retired model, a typo in ``models.aliases``) fails
every reply with 404 ``not_found_error``; switched to, the conversation (and each one
``/new`` makes from it, since they inherit the model) answered nothing but notices. The
Models API (``GET /v1/models/{id}``) answers that for free, without a token spent.
"""

from __future__ import annotations

import asyncio
import logging

import anthropic
from anthropic import AsyncAnthropic

from bot.brain.anthropic_api import error_message

log = logging.getLogger("my_agent.brain")

CHECK_TIMEOUT = 10.0  # seconds: the owner waits for the /model answer


async def model_problem(client: AsyncAnthropic, model_id: str) -> str | None:
    """Why the service does not offer ``model_id`` (its own 404 message), or None when it
    does or cannot say (unreachable, another error, an endpoint without the Models API):
    only the API's own ``not_found_error`` keeps the owner from switching, so that an
    outage or a compatible endpoint serving Messages alone never blocks ``/model``."""
    try:
        await client.models.retrieve(model_id, timeout=CHECK_TIMEOUT)
    except asyncio.CancelledError:
        raise
    except anthropic.NotFoundError as exc:
        body = exc.body
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("type") == "not_found_error":
            return error_message(exc)
        log.info("cannot check model %s (404 without the API's error): %s", model_id, exc)
    except Exception as exc:  # an outage or anything else: the reply will tell
        log.info("cannot check model %s: %s", model_id, exc)
    return None
