"""The model of the notes or the titles missing from the model service, told to the owner.

``conversations.abbreviation_model`` and ``conversations.naming_model`` (the ``haiku``
alias) name a model id through ``models.aliases``. When the service answers 404
``not_found_error`` for it (a retired id, a typo), every note and title falls back to
the offline stand-in; before session 28 only after three failed sweeps, and nobody was
told, so the owner never learnt that the configuration was wrong. :class:`ReportingModel`
wraps the utility model the lifecycle calls: a :class:`~bot.brain.base.ModelNotFound`
is reported to :class:`MissingModels`, which tells the owner once (naming the keys and
the model id) and lets the passes write the labelled stand-in at once; an answer from
the model clears it. The stand-ins stay owed to the model (``needs_abbreviation``, the
naming's ``throughTurn`` 0), so after the fix and a restart the model redoes them.

At the start (:meth:`MissingModels.check_at_start`) the Models API is asked about each
model in the background, free of tokens: a typo in ``models.aliases.haiku`` is told
within seconds of the start, not at the first notes after ten idle minutes (or never,
on a quiet day; before session 29).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bot.brain.base import ModelNotFound, UtilityModel
from bot.config.model import AppConfig
from bot.extractive import HEADER
from bot.owner_notices import forget_notice, notice_due
from bot.tasks import spawn

log = logging.getLogger("my_agent.lifecycle")

# The same missing model is told again after a restart only this long after the last
# notice (a daemon restarted in a loop, or for days with the configuration unchanged).
NOTICE_INTERVAL = 24 * 3600.0
_KEYS = ("abbreviation_model", "naming_model")


def missing_model_text(config: AppConfig, error: ModelNotFound) -> str:
    """What the owner is told: which keys name the model, which id the service refused,
    what stands in meanwhile and how to fix it."""
    cfg = config.conversations
    keys = [f"conversations.{key}" for key in _KEYS if getattr(cfg, key) == error.alias]
    named = " and ".join(keys) or f"the alias {error.alias}"
    if error.alias in config.models.aliases:
        source = f"models.aliases.{error.alias}"
        where = f"{named} use {error.alias}, and {source} is {error.model_id}"
    else:
        source = keys[0] if keys else error.alias
        where = f"{named} name {error.model_id} directly"
    return (
        f"Conversation notes and titles cannot use their model: {where}, which the model "
        f"service does not offer ({error.detail}). Meanwhile notes are written by the "
        f'offline stand-in (they begin "{HEADER}") and titles from keywords, each still '
        f"owed to the model. Fix {source} in the configuration and restart: the model then "
        "rewrites them."
    )


class MissingModels:
    """The aliases the model service refused this run, and the owner's notice of each."""

    def __init__(self, config: AppConfig, services: Any) -> None:
        self.config = config
        self.services = services
        self.errors: dict[str, ModelNotFound] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.start_check: asyncio.Task[None] | None = None

    def check_at_start(self, brain: Any) -> None:
        """Ask the model service, in the background, whether it offers the models of the
        notes and the titles (the Models API: no token spent, the start not delayed); a
        model it does not offer is told and stood in for as a 404 from a pass would be.
        Nothing when the brain has no service to ask (offline), or cannot say."""
        check = getattr(brain, "check_model", None)
        if check is not None:
            self.start_check = self._run(self._check(check), "lifecycle-model-check")

    async def stop_checking(self) -> None:
        """Cancel the start's check if it is still waiting for the service (a stop)."""
        task = self.start_check
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _check(self, check: Any) -> None:
        cfg = self.config.conversations
        for alias in sorted({cfg.abbreviation_model, cfg.naming_model}):
            problem = await check(alias)  # None: offered, or the service cannot say
            if problem is not None and alias not in self.errors:
                model_id = self.config.resolve_model(alias)
                log.info("model check at start: %s (%s) is not offered", alias, model_id)
                self.refused(ModelNotFound(alias, model_id, problem))

    def missing(self, alias: str) -> bool:
        """Whether the service refused ``alias``'s model since it last answered."""
        return alias in self.errors

    def refused(self, error: ModelNotFound) -> None:
        """The service does not offer ``error.alias``'s model: tell the owner (once)."""
        if error.alias in self.errors:
            return
        self.errors[error.alias] = error
        self._run(self._tell(error), f"missing-model-{error.alias}")

    def answered(self, alias: str) -> None:
        """The model answered: a later refusal is news again (told at once)."""
        error = self.errors.pop(alias, None)
        state = getattr(self.services, "state", None)
        if error is not None and state is not None:
            log.info("model %s (%s) answers again", alias, error.model_id)
            self._run(forget_notice(state, _notice_key(error)), f"model-back-{alias}")

    async def settle(self) -> None:
        """Wait for the notices under way (tests)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def _run(self, coro: Any, name: str) -> asyncio.Task[None]:
        # In the background: the owner's channel may be slow (SMTP), and the pass goes on.
        task = spawn(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _tell(self, error: ModelNotFound) -> None:
        text = missing_model_text(self.config, error)
        log.warning("%s", text)
        state = getattr(self.services, "state", None)
        alert = getattr(self.services, "alert_owner", None)
        try:
            if state is not None and not await notice_due(
                state, _notice_key(error), NOTICE_INTERVAL
            ):
                return
            if alert is not None:
                await alert(text)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("could not tell the owner that model %s is missing", error.alias)


def _notice_key(error: ModelNotFound) -> str:
    return f"lifecycle_model_missing:{error.model_id}"


class ReportingModel:
    """The utility model of the lifecycle, reporting a missing model to
    :class:`MissingModels` (and an answer, which clears it)."""

    def __init__(self, model: UtilityModel, missing: MissingModels) -> None:
        self.model = model
        self.missing = missing

    async def complete(
        self, *, system: str, prompt: str, model_alias: str = "haiku", max_tokens: int = 400
    ) -> str:
        """:meth:`UtilityModel.complete` of the wrapped model."""
        try:
            text = await self.model.complete(
                system=system, prompt=prompt, model_alias=model_alias, max_tokens=max_tokens
            )
        except ModelNotFound as exc:
            self.missing.refused(exc)
            raise
        self.missing.answered(model_alias)
        return text
