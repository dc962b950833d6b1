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
on a quiet day; before session 29). The same check asks about the models of the replies
(``models.default`` and every alias ``/model`` offers): a typo there was noticed only
when a reply failed (before session 30), and is told in one notice naming the keys.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
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


def reply_use(config: AppConfig, alias: str) -> str:
    """What a missing model of ``alias`` does to the replies ("" when none use it)."""
    if alias == config.models.default:
        return f"every reply in a conversation on {alias} is a notice instead of an answer"
    if alias in config.models.aliases:
        return (
            f"/model {alias} is refused, and a conversation already on {alias} gets a "
            "notice instead of each answer"
        )
    return ""


def reply_models_text(
    config: AppConfig, errors: list[ModelNotFound], stored: dict[str, int] | None = None
) -> str:
    """What the owner is told of reply models the service does not offer: per model the
    keys naming it, the service's refusal and what it does to the replies. ``stored``:
    the models conversations chose that no key names now (an alias removed since), with
    how many conversations chose each (their errors are among ``errors``)."""
    stored = stored or {}
    said = []
    for error in errors:
        count = stored.get(error.alias)
        if count is not None:
            chose = "conversation chose" if count == 1 else "conversations chose"
            said.append(
                f"{count} {chose} {error.alias} with /model, which models.aliases no longer "
                f"names ({error.detail}): at its next message each is answered by "
                f"{config.models.default} (models.default), says so there, and switches to it."
            )
            continue
        where = f"models.aliases.{error.alias} is {error.model_id}"
        if error.alias == config.models.default:
            where = f"models.default is {error.alias}, and {where}"
        said.append(f"{where} ({error.detail}): {reply_use(config, error.alias)}.")
    keys = " and ".join(f"models.aliases.{e.alias}" for e in errors if e.alias not in stored)
    fix = f" Fix {keys} in the configuration and restart." if keys else ""
    return "The model service does not offer a model the replies use. " + " ".join(said) + fix


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
    replies = reply_use(config, error.alias)
    replies = f" For the replies, {replies}." if replies else ""
    return (
        f"Conversation notes and titles cannot use their model: {where}, which the model "
        f"service does not offer ({error.detail}). Meanwhile notes are written by the "
        f'offline stand-in (they begin "{HEADER}") and titles from keywords, each still '
        f"owed to the model.{replies} Fix {source} in the configuration and restart: the "
        "model then rewrites them."
    )


class MissingModels:
    """The aliases the model service refused this run, and the owner's notice of each."""

    def __init__(self, config: AppConfig, services: Any) -> None:
        self.config = config
        self.services = services
        self.errors: dict[str, ModelNotFound] = {}
        # reply models (models.default, /model's aliases) the start's check found missing
        self.reply_errors: dict[str, ModelNotFound] = {}
        # of those, the models conversations chose that no key names now (an alias
        # removed since), with how many conversations chose each
        self.stored_counts: dict[str, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.start_check: asyncio.Task[None] | None = None

    def check_at_start(self, brain: Any) -> None:
        """Ask the model service, in the background, whether it offers the models of the
        notes and the titles, and of the replies (the Models API: no token spent, the
        start not delayed); a model of the notes it does not offer is told and stood in
        for as a 404 from a pass would be, the reply models it does not offer are told in
        one notice. Nothing when the brain has no service to ask (offline), or cannot say."""
        check = getattr(brain, "check_model", None)
        if check is not None:
            self.start_check = self._run(self._check(check), "lifecycle-model-check")

    async def recheck(self, brain: Any) -> None:
        """``models.*`` were reloaded (SIGHUP): forget what the last check and the
        replies found (a fixed alias no longer listed by /status, its notes written by
        the model again) and ask the service again about the models configured now."""
        await self.stop_checking()
        self.errors.clear()
        self.reply_errors.clear()
        self.stored_counts.clear()
        forget = getattr(brain, "forget_missing_models", None)
        if forget is not None:
            forget()
        self.check_at_start(brain)

    async def stop_checking(self) -> None:
        """Cancel the start's check if it is still waiting for the service (a stop)."""
        task = self.start_check
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _check(self, check: Any) -> None:
        cfg = self.config.conversations
        notes = {cfg.abbreviation_model, cfg.naming_model}
        replies = {self.config.models.default, *self.config.models.aliases}
        problems: dict[str, str | None] = {}  # per model id: aliases may share one
        for alias in sorted(notes | replies):
            model_id = self.config.resolve_model(alias)
            if model_id not in problems:
                problems[model_id] = await check(alias)  # None: offered, or cannot say
            problem = problems[model_id]
            if problem is None:
                continue
            log.info("model check at start: %s (%s) is not offered", alias, model_id)
            error = ModelNotFound(alias, model_id, problem)
            if alias in notes:  # its notice says what it does to the replies too
                if alias not in self.errors:
                    self.refused(error)
            else:
                self.reply_errors[alias] = error
        for name, count in (await self._stored_models(notes | replies)).items():
            model_id = self.config.resolve_model(name)
            if model_id not in problems:
                problems[model_id] = await check(name)
            problem = problems[model_id]
            if problem is not None:
                log.info("model check at start: %d conversation(s) on %s", count, name)
                self.stored_counts[name] = count
                self.reply_errors[name] = ModelNotFound(name, model_id, problem)
        if self.reply_errors:
            self._run(self._tell_replies(list(self.reply_errors.values())), "missing-reply-model")

    async def _stored_models(self, configured: set[str]) -> dict[str, int]:
        """The models conversations chose (``/model``) that no configuration key names
        now (an alias removed since), with how many conversations chose each."""
        index = getattr(self.services, "index", None)
        if index is None:
            return {}
        rows = await index.db.fetchall(
            "SELECT model, COUNT(*) FROM conversations WHERE model IS NOT NULL GROUP BY model"
        )
        return {str(name): int(n) for name, n in rows if name and name not in configured}

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
        await self._alert([error], lambda due: missing_model_text(self.config, due[0]))

    async def _tell_replies(self, errors: list[ModelNotFound]) -> None:
        stored = self.stored_counts
        await self._alert(errors, lambda due: reply_models_text(self.config, due, stored), "reply")

    async def _alert(
        self,
        errors: list[ModelNotFound],
        text_of: Callable[[list[ModelNotFound]], str],
        kind: str = "lifecycle",
    ) -> None:
        """Tell the owner of those of ``errors`` not told within :data:`NOTICE_INTERVAL`
        (across restarts), in one notice."""
        log.warning("%s", text_of(errors))
        state = getattr(self.services, "state", None)
        alert = getattr(self.services, "alert_owner", None)
        try:
            due = [
                error
                for error in errors
                if state is None
                or await notice_due(state, _notice_key(error, kind), NOTICE_INTERVAL)
            ]
            if due and alert is not None:
                await alert(text_of(due))
        except asyncio.CancelledError:
            raise
        except Exception:
            missing = ", ".join(error.alias for error in errors)
            log.exception("could not tell the owner that model(s) %s are missing", missing)


def _notice_key(error: ModelNotFound, kind: str = "lifecycle") -> str:
    return f"{kind}_model_missing:{error.model_id}"


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
