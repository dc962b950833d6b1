"""Whether a conversation may switch to a model alias: the same refusal for ``/model`` on
every channel and for the dashboard's model selector; and the choice of a model the
service no longer offers, forgotten once the default has answered for it.

A model id the service does not know (a retired model, a typo in ``models.aliases``)
fails every reply with a 404; switched to, the conversation answered nothing but
notices. The brain asks its service first (``check_model``, free of tokens); the offline
brain has no service to ask and never refuses.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from bot.brain.base import BrainReply
from bot.config.model import AppConfig

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.replies")


async def model_refusal(config: AppConfig, brain: Any, alias: str, current: str) -> str | None:
    """The answer refusing the switch from ``current`` to ``alias`` when the brain's
    service does not offer ``alias``'s model, or None when the switch may go ahead (the
    service offers it, cannot say, or there is no service to ask)."""
    check = getattr(brain, "check_model", None)
    if check is None:  # the offline brain
        return None
    problem: str | None = await check(alias)
    if problem is None:
        return None
    return (
        f"Model {alias} ({config.resolve_model(alias)}) is not offered by the model service"
        f" ({problem}). Still using {current} ({config.resolve_model(current)}); check"
        f" models.aliases.{alias} in the configuration."
    )


async def forget_dropped_model(services: Services, conv_id: str, reply: BrainReply) -> None:
    """After ``reply`` is stored: if ``models.default`` answered it because the
    conversation's model is gone (``extra.modelDropped`` and ``extra.modelNow``,
    bot/brain/model_fallback.py), the conversation is switched to that default, as
    ``/model`` would (a ``meta_update`` event that also names the model dropped), so it
    no longer asks for the dead one. Only once the reply (and its note) is stored: a
    crash before leaves the choice, and the next reply says it again rather than never.
    Kept when the owner chose another model meanwhile."""
    dropped, now = reply.extra.get("modelDropped"), reply.extra.get("modelNow")
    if not isinstance(dropped, str) or not isinstance(now, str):
        return
    rec = await services.conversations.get(conv_id)
    if rec is None or rec.model != dropped:
        return
    log.warning("%s: model %s is not offered, switched to %s", conv_id, dropped, now)
    await services.conversations.set_model(
        conv_id, now, droppedModel=dropped, reason="not offered by the model service"
    )
