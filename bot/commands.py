"""Slash commands, intercepted before any model call on every channel (seed 000).

:class:`Commands` runs them: the conversation commands here, the party commands
(``/trust``, ``/block``, ``/reply``) in :mod:`bot.party_commands`. Their names, help
texts and parsing: :mod:`bot.command_syntax` (re-exported here).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bot.command_runs import CommandRun
from bot.command_status import CONVERSATION_PREFIX, status_answer
from bot.command_syntax import (
    COMMANDS,
    DETACHED_COMMANDS,
    GROUP_MEMBER_HELP,
    OWNER_HELP,
    STRANGER_HELP,
    CommandResult,
    parse_command,
)
from bot.events import InboundMessage
from bot.graphemes import cut, isolate
from bot.index import ConversationRecord
from bot.labels import TITLE_MAX, UNTITLED, clip_title, display_title, shown_title
from bot.owner_days import local_day, owner_zone
from bot.parties import PartyRecord
from bot.party_commands import PartyCommands

if TYPE_CHECKING:
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
    "parse_command",
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
        :data:`DETACHED_COMMANDS` from a dashboard tab with no conversation yet.

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
        elif conv.channel == "web" and not conv.turn_count:
            # Typed in a dashboard conversation that has nothing yet ("/new" twice): it
            # is already new. Another left it empty in the list. (Escalations, which
            # hold no turn either, never go to a web conversation.)
            fresh = conv
        elif conv.channel == "web" or message.channel == "web":
            fresh = await manager.create("web", model=conv.model, reason="new", conv_id=conv_id)
            await self.s.bus.emit(
                "conversation_switched", previous_id=conv.id, current_id=fresh.id, channel="web"
            )
        else:
            fresh = await manager.new_for_channel(conv, conv_id)
        return CommandResult(
            f"Started a new conversation (model {fresh.model}). The previous one stays "
            "searchable and can be continued from the dashboard.",
            switched_to=fresh,
        )

    async def _owner_model(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        aliases = self.s.config.models.aliases
        current = conv.model or self.s.config.models.default
        if not args:
            choices = ", ".join(aliases)
            return CommandResult(
                f"Current model: {current} ({self.s.config.resolve_model(current)})."
                f" Available: {choices}. Use /model <name> to switch."
            )
        alias = args.split()[0].lower()
        if alias not in aliases:
            return CommandResult(f"Unknown model {alias!r}. Available: {', '.join(aliases)}.")
        if not (run and run.resumed and conv.model == alias):
            await self.s.conversations.set_model(conv.id, alias)
        return CommandResult(f"Model switched to {alias} ({aliases[alias]}) for this conversation.")

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
        if not args.strip():
            return CommandResult("Usage: /rename <title>")
        rec = await self.s.conversations.get(conv.id) or conv
        if not (run and run.resumed and rec.manually_named and rec.title == _title(args)):
            rec = await self.s.conversations.rename(conv.id, args)
        clipped = (
            f" (titles are kept to {TITLE_MAX} characters)"
            if _title(args) != " ".join(args.split())
            else ""
        )
        return CommandResult(f"Renamed to: {isolate(rec.title or '')}{clipped}")

    async def _owner_search(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord | None,
        run: CommandRun | None = None,
    ) -> CommandResult:
        if not args.strip():
            return CommandResult("Usage: /search <query>")
        # Typed in a group, the answer is read by every member: the group's own
        # conversation only (it listed the owner's private chats to the group).
        in_group = bool(message.group_id) and conv is not None
        page = await self.s.search.search(
            args, limit=5, conversation_id=conv.id if in_group and conv else None
        )
        if not page.results:
            return CommandResult(f"No conversations match {args!r}.")
        heading = f"Results for {args!r} ({page.method}):"
        lines = [heading]
        found: list[dict[str, object]] = []
        zone = owner_zone(self.s.config)  # the owner's day, as the assistant dates it
        for i, r in enumerate(page.results, 1):
            snippet = cut(" ".join((r.snippet or "").split()), 160)
            rec = await self.s.conversations.get(r.conversation_id)
            # Named as the dashboard lists it (not "Untitled"): the record's title is
            # also fresher than the index row the search read.
            title = (
                display_title(
                    rec.channel, await shown_title(self.s, rec), rec.channel_meta, rec.participants
                )
                if rec is not None
                else r.title or UNTITLED
            )
            day = local_day(r.timestamp, zone)
            lines.append(
                f"{i}. {title} [{r.channel}, {day}, {r.turn_range}] {isolate(snippet)} "
                f"({r.conversation_id})"
            )
            found.append(
                {
                    "conversationId": r.conversation_id,
                    "title": title,
                    "channel": r.channel,
                    "day": day,
                    "turnRange": r.turn_range,
                    "focusTurn": r.matched_turns[0] if r.matched_turns else None,
                    "snippet": snippet,
                }
            )
        if page.next_cursor:
            # Five are shown: without this the owner took them for all there were.
            total = f"{page.total}{'' if page.total_exact else '+'}"
            lines.append(f"{len(page.results)} of {total} shown; add words to narrow it down.")
        # The same results as data, for a channel that can link them (the dashboard
        # opens each conversation from its answer); the text is for the others.
        return CommandResult("\n".join(lines), extra={"heading": heading, "results": found})


def _title(args: str) -> str:
    """The title ``/rename args`` gives (as :meth:`ConversationManager.rename` makes it)."""
    return clip_title(args)
