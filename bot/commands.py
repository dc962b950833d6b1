"""Slash commands, intercepted before any model call on every channel (seed 000).

:class:`Commands` runs them: the conversation commands here, the party commands
(``/trust``, ``/block``, ``/reply``) in :mod:`bot.party_commands`. Their names, help
texts and parsing: :mod:`bot.command_syntax` (re-exported here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from difflib import get_close_matches
from typing import TYPE_CHECKING

from bot.command_runs import CommandRun
from bot.command_search import search_answer
from bot.command_status import (
    CONVERSATION_PREFIX,
    OFFLINE_REPLIES,
    missing_model_ids,
    status_answer,
)
from bot.command_syntax import (
    COMMANDS,
    DETACHED_COMMANDS,
    GROUP_MEMBER_HELP,
    OWNER_HELP,
    STRANGER_HELP,
    CommandResult,
    first_message,
    is_detached,
    parse_command,
)
from bot.events import InboundMessage
from bot.graphemes import isolate
from bot.index import ConversationRecord
from bot.labels import TITLE_MAX, clip_title, escalated_party_ids, plain_title
from bot.model_switch import model_refusal
from bot.parties import PartyRecord
from bot.party_commands import PartyCommands
from bot.previous_conversation import STARTED_AFTER

if TYPE_CHECKING:
    from bot.config import AppConfig
    from bot.services import Services

log = logging.getLogger("my_agent.commands")

__all__ = [
    "COMMANDS",
    "DETACHED_COMMANDS",
    "GROUP_MEMBER_HELP",
    "OWNER_HELP",
    "STRANGER_HELP",
    "CommandResult",
    "Commands",
    "is_detached",
    "model_answer",
    "parse_command",
    "rename_answer",
]


class Commands(PartyCommands):
    """Runs the owner's and third parties' commands (:meth:`run_owner`,
    :meth:`run_stranger`)."""

    def __init__(self, services: Services) -> None:
        self.s = services

    async def run_owner(
        self,
        name: str,
        args: str,
        message: InboundMessage,
        conversation: ConversationRecord | None,
        run: CommandRun | None = None,
    ) -> CommandResult:
        """Run an owner command; ``conversation`` is None only for
        :func:`is_detached` commands from a dashboard tab with no conversation yet (or a
        mail that starts no known thread).

        ``run``: the claim of a command with effects (bot/command_runs.py); when it is
        ``resumed`` the command ran before a crash, perhaps in part, and each handler
        completes only what is missing of its effect."""
        if name == "start":
            name = "help"  # Telegram's Start button: the owner's first message to the bot
        handler = getattr(self, f"_owner_{name}", None)
        if name not in COMMANDS or handler is None:
            return CommandResult(f"Unknown command /{name}. Send /help for the list.")
        result: CommandResult = await handler(args, message, conversation, run)
        return result

    async def run_stranger(self, name: str, args: str, party: PartyRecord) -> CommandResult:
        if name == "help":
            return CommandResult(STRANGER_HELP)
        if name == "new":
            await self.s.external.reset_context(party.id)
            return CommandResult("Started over.")
        if name in COMMANDS:
            return CommandResult("That command is not available here.")
        return CommandResult(f"Unknown command /{name}. Send /help for the list.")

    # -- owner commands ------------------------------------------------------------
    async def _owner_help(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord | None,
        run: CommandRun | None = None,
    ) -> CommandResult:
        return CommandResult(OWNER_HELP)

    async def _owner_new(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        manager = self.s.conversations
        conv_id = run.effect.get("conversation") if run else None
        done = await manager.get(conv_id) if conv_id and run and run.resumed else None
        if done is not None:
            fresh = done  # created before the crash: only its answer is missing
        elif await self._nothing_said(conv):
            # Typed where nothing has been said yet ("/new" twice, or the first line of
            # a mail that starts a thread): it is new already. Another was made and this
            # one stayed in the list, empty, for good (on Telegram and e-mail until
            # session 24; the dashboard's since session 18).
            model = conv.model or self.s.config.models.default
            # ("/new <first message>": that message starts it)
            starts = first_message(message.channel, args)  # a mail's sign-off is none
            rest = "your message starts it" if starts else "nothing has been said in it yet"
            return CommandResult(
                f"This conversation is new already ({self._model_note(model)}): {rest}.",
                switched_to=conv,
            )
        elif conv.channel == "web" or message.channel == "web":
            fresh = await manager.create("web", model=conv.model, reason="new", conv_id=conv_id)
            await self.s.bus.emit(
                "conversation_switched", previous_id=conv.id, current_id=fresh.id, channel="web"
            )
        else:
            fresh = await manager.new_for_channel(conv, conv_id)
        if done is None:
            # Named to the model in the fresh conversation's first replies, so that "what
            # were we just talking about?" can be answered (bot/previous_conversation.py).
            await manager.append_event(fresh.id, STARTED_AFTER, previousId=conv.id)
        return CommandResult(
            f"Started a new conversation ({self._model_note(fresh.model)}). The previous one "
            "stays searchable and can be continued from the dashboard.",
            switched_to=fresh,
        )

    def _model_note(self, model: str) -> str:
        """ "model sonnet", and on the offline brain that no model answers yet: "(model
        sonnet)" read as if sonnet would reply, with no API key set."""
        if self.s.brain.name == "offline":
            return f"model {model} once an API key is set; until then {OFFLINE_REPLIES}"
        return f"model {model}"

    async def _nothing_said(self, conv: ConversationRecord) -> bool:
        """Whether ``conv`` holds no turn and no escalation (a channel conversation that
        escalations opened is the owner's record of them, not an empty one)."""
        if conv.turn_count:
            return False
        lines = await asyncio.to_thread(self.s.conversations.read_lines, conv.id)
        return not escalated_party_ids(lines)

    async def _owner_model(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        current = conv.model or self.s.config.models.default
        missing = missing_model_ids(self.s)
        offline = self.s.brain.name == "offline"
        text, alias = model_answer(self.s.config, current, args, missing=missing, offline=offline)
        if alias is not None and conv.model == alias and not (run and run.resumed):
            # Nothing to switch: a second "Model set to haiku" note in the transcript
            # (shown in the chat) for each repeat, and an answer saying it switched.
            resolved = self.s.config.resolve_model(alias)
            return CommandResult(f"This conversation uses {alias} ({resolved}) already.")
        if alias is not None and conv.model != alias:
            refusal = await model_refusal(self.s.config, self.s.brain, alias, current)
            if refusal is not None:
                return CommandResult(refusal)
            await self.s.conversations.set_model(conv.id, alias)
        return CommandResult(text)

    async def _owner_status(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord | None,
        run: CommandRun | None = None,
    ) -> CommandResult:
        lines, linked = await status_answer(
            self.s, message.channel, conv, owner_only=not message.group_id
        )
        if linked is None:
            return CommandResult("\n".join(lines))
        # The same lines as data, the conversation's one as a link (``statusLines``).
        status = [linked if line.startswith(CONVERSATION_PREFIX) else line for line in lines]
        return CommandResult("\n".join(lines), extra={"statusLines": status})

    async def _owner_rename(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        text, title = rename_answer(args)
        if title is None:
            return CommandResult(text)
        rec = await self.s.conversations.get(conv.id) or conv
        if not (run and run.resumed and rec.manually_named and rec.title == title):
            await self.s.conversations.rename(conv.id, args)
        return CommandResult(text)

    async def _owner_search(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord | None,
        run: CommandRun | None = None,
    ) -> CommandResult:
        return await search_answer(self.s, args, message, conv)


# How /model's list marks a model the model service does not offer.
NOT_OFFERED = "not offered by the model service"


def first_line(args: str) -> str:
    """A command's argument: its first line. In a mail the lines after the command are
    its body and signature ("Sent from my iPhone"): "/model opus" over a signature was
    answered with the usage, and "/rename Trip" took the signature into the title."""
    return args.strip().split("\n", 1)[0].strip()


def model_answer(
    config: AppConfig,
    current: str,
    args: str,
    target: str = "this conversation",
    missing: Collection[str] = (),
    offline: bool = False,
) -> tuple[str, str | None]:
    """The answer to ``/model args`` where the model is ``current``, and the alias to
    switch ``target`` to (None: nothing to switch). ``missing``: the model ids the model
    service is known not to offer (:func:`bot.command_status.missing_model_ids`), marked
    in the list. Apart from the command so that the dashboard answers it the same in a
    chat with no conversation yet. ``offline``: the offline brain answers (no API key):
    said, as /new says it, since "Model switched to haiku" read as if haiku would reply."""
    aliases = config.models.aliases
    args = first_line(args)
    if not args:
        # The list offered every alias alike, one the service had refused included: the
        # owner picked it and was refused, or (the current one) wondered why another
        # model answered.
        choices = ", ".join(
            f"{a} ({NOT_OFFERED})" if config.resolve_model(a) in missing else a for a in aliases
        )
        # A name no alias has (one removed from the configuration since it was chosen)
        # showed as "opus (opus)", as if it were its own model id.
        shown = config.resolve_model(current) if current in aliases else "not in models.aliases"
        if current in aliases and config.resolve_model(current) in missing:
            shown += f", {NOT_OFFERED}"
        unset = f" No API key is set: {OFFLINE_REPLIES}, no model is asked." if offline else ""
        return (
            f"Current model: {current} ({shown}). Available: {choices}. Use /model <name> "
            f"to switch.{unset}",
            None,
        )
    if len(args.split()) > 1:
        # "/model haiku please" switched to haiku and dropped the rest without a word:
        # the owner could not tell whether the words after the name were read.
        return (
            f"Usage: /model [{'|'.join(aliases)}]: a model's name alone. Nothing was changed.",
            None,
        )
    named = args.split()[0].lower()
    alias = alias_named(aliases, named)
    if alias is None:
        lowered = {name.lower(): name for name in aliases}
        close = get_close_matches(named, list(lowered), n=1, cutoff=0.6)
        hint = f" Did you mean {lowered[close[0]]}?" if close else ""
        return f"Unknown model {named!r}.{hint} Available: {', '.join(aliases)}.", None
    later = f" It answers once an API key is set; until then {OFFLINE_REPLIES}." if offline else ""
    return f"Model switched to {alias} ({aliases[alias]}) for {target}.{later}", alias


def alias_named(aliases: Mapping[str, str], named: str) -> str | None:
    """The alias ``named`` (lower case) stands for: an alias in any case (one configured
    as "Opus" was unknown to "/model Opus", since the name typed is lowered), or the
    model id an alias resolves to, which /model itself shows ("Current model: opus
    (claude-opus-4-8)"): the owner who typed that id back was told it was an unknown
    model."""
    if named in aliases:
        return named
    found = next((alias for alias in aliases if alias.lower() == named), None)
    if found is not None:
        return found
    return next((alias for alias, model in aliases.items() if model.lower() == named), None)


def rename_answer(args: str, target: str | None = None) -> tuple[str, str | None]:
    """The answer to ``/rename args`` and the title it gives (None: usage, nothing to
    rename), as :meth:`ConversationManager.rename` makes it. ``target`` names a
    conversation other than "this" one: the dashboard answers it the same in a chat
    with no conversation yet."""
    args = first_line(args)
    title = clip_title(args)
    if not title:
        return "Usage: /rename <title>", None
    clipped = f" (titles are kept to {TITLE_MAX} characters)" if title != plain_title(args) else ""
    renamed = f"Renamed {target} to" if target else "Renamed to"
    return f"{renamed}: {isolate(title)}{clipped}", title
