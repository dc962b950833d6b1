"""A conversation whose model the service no longer offers is answered by ``models.default``.

``/model`` stores an alias on the conversation. When that alias is later removed from
``models.aliases`` (its name then goes to the API as a model id) or the service retires
its id, the API answers every reply with 404 ``not_found_error``: before session 31 each
reply of that conversation was a notice, for ever, and ``/new`` inherited the model. Now
a 404 that is about the model (:func:`~bot.brain.model_check.model_gone`: the Models API
says so, or the error names it) makes the reply come from ``models.default``, with a note
first saying which model was dropped, which answers now and how to choose another; the
router then switches the conversation to that default, as ``/model`` would
(``extra.modelDropped``, :func:`bot.model_switch.forget_dropped_model`). A 404 about
anything else keeps the notice, and so does a conversation already on the default (there
is nothing to fall back to). The model ids learnt gone
(:class:`~bot.brain.model_check.GoneModels`) go to the default at once, without a failing
request, until the process ends or the model answers.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from anthropic import AsyncAnthropic

from bot.brain.anthropic_api import Rejected
from bot.brain.base import BrainReply
from bot.brain.model_check import GoneModels, ask_models_api, model_gone
from bot.config.model import AppConfig

log = logging.getLogger("my_agent.brain")


class ModelDropped(Exception):
    """A reply's model is gone and ``instead`` (``models.default``) answers instead,
    within what is left of the reply's ``brain.reply_timeout``: ``deadline``, on the
    brain's clock (None: not started)."""

    def __init__(self, instead: str, deadline: float | None = None) -> None:
        super().__init__(instead)
        self.instead = instead
        self.deadline = deadline


class ModelFallback:
    """What the brain knows of models the service does not offer, and the default that
    answers for them."""

    def __init__(self, config: AppConfig, client: AsyncAnthropic) -> None:
        self.config = config
        self.client = client
        self.gone = GoneModels()

    def _default_for(self, alias: str) -> str | None:
        """``models.default`` when it can answer for ``alias`` (another model, not known
        to be gone itself), else None."""
        default = self.config.models.default
        default_id = self.config.resolve_model(default)
        if self.config.resolve_model(alias) == default_id or self.gone.gone(default_id):
            return None
        return default

    def instead_of(self, alias: str) -> str | None:
        """The alias to answer with when ``alias``'s model is known gone (None: ``alias``)."""
        if not self.gone.gone(self.config.resolve_model(alias)):
            return None
        return self._default_for(alias)

    async def after_404(self, alias: str, refused: Rejected) -> str | None:
        """The alias to answer with after a Messages call on ``alias`` met ``refused``
        (a 404): the default when the 404 is about the model, else None (the notice)."""
        default = self._default_for(alias)
        if refused.status != 404 or default is None:
            return None
        model_id = self.config.resolve_model(alias)
        detail = await model_gone(self.client, model_id, refused)
        if detail is None:
            return None
        self.gone.note(model_id, detail)
        log.warning("model %s (%s) is gone: %s answers instead", alias, model_id, default)
        return default

    async def check(self, alias: str) -> str | None:
        """Why the service does not offer ``alias``'s model (the Models API's 404
        message), or None when it does or cannot say; what it says is remembered."""
        model_id = self.config.resolve_model(alias)
        answer = await ask_models_api(self.client, model_id)
        if isinstance(answer, str):
            self.gone.note(model_id, answer)
            return answer
        if answer is True:
            self.gone.back(model_id)
        return None

    def dropped_reply(self, alias: str, instead: str, reply: BrainReply) -> BrainReply:
        """``reply`` (from ``instead``) with the note on the dropped ``alias`` first, and
        ``extra.modelDropped`` / ``modelNow`` for the router, which switches the
        conversation to ``instead``."""
        detail = self.gone.details.get(self.config.resolve_model(alias), "not found")
        note = dropped_note(self.config, alias, instead, detail, self.gone)
        extra = {**reply.extra, "modelDropped": alias, "modelNow": instead}
        return replace(reply, text=f"{note}\n\n{reply.text}", extra=extra)


def dropped_note(config: AppConfig, alias: str, instead: str, detail: str, gone: GoneModels) -> str:
    """What the owner reads first in the reply from ``instead``: which model was dropped
    and why, which one answers now, and the models ``/model`` can switch to."""
    aliases = config.models.aliases
    if alias in aliases:
        dropped = f"{alias} ({aliases[alias]})"
    else:  # removed from the configuration: its name went to the service as an id
        dropped = f"{alias} (no longer in models.aliases)"
    choices = [
        name
        for name, model_id in aliases.items()
        if name not in (alias, instead) and not gone.gone(model_id)
    ]
    switch = f" Choose another with /model ({', '.join(choices)})." if choices else ""
    return (
        f"[This conversation's model, {dropped}, is not offered by the model service "
        f"({detail}). {instead} ({config.resolve_model(instead)}), the default, answered "
        f"this and answers here from now on.{switch}]"
    )
