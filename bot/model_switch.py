"""Whether a conversation may switch to a model alias: the same refusal for ``/model`` on
every channel and for the dashboard's model selector.

A model id the service does not know (a retired model, a typo in ``models.aliases``)
fails every reply with a 404; switched to, the conversation answered nothing but
notices. The brain asks its service first (``check_model``, free of tokens); the offline
brain has no service to ask and never refuses.
"""

from __future__ import annotations

from typing import Any

from bot.config.model import AppConfig


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
