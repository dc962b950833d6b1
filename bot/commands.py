"""Slash commands, intercepted before any model call on every channel (seed 000)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.command_runs import CommandRun
from bot.events import InboundMessage
from bot.index import ConversationRecord
from bot.labels import UNTITLED, display_title
from bot.owner_days import local_day, owner_zone
from bot.parties import PartyRecord

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.commands")

OWNER_HELP = """Commands:
/new - start a fresh conversation
/model [opus|sonnet|haiku] - show or switch the model
/rename <title> - rename this conversation
/search <query> - search past conversations
/status - what is running and how this conversation stands
/trust <party> [known|untrusted] - let a third party be answered
/block <party> - ignore a third party
/reply <party> <text> - answer a third party yourself
/help - this list"""

STRANGER_HELP = """Commands:
/new - start over (forget this exchange's context)
/help - this list"""

# Other members of the owner's group: the conversation is the owner's, so only /help.
GROUP_MEMBER_HELP = """Commands:
/help - this list
Mention me or reply to one of my messages to ask me something."""

COMMANDS = ("new", "model", "help", "status", "rename", "search", "trust", "block", "reply")
# Commands that need no conversation: from a dashboard tab that has none yet they run
# without one, instead of creating an empty conversation to record them in.
PASSED_ON = ("photo", "document")  # what /reply sends on to a party (Telegram to Telegram)
DETACHED_COMMANDS = ("help", "search", "status")


def parse_command(text: str) -> tuple[str, str] | None:
    """``"/model@MyBot  haiku"`` -> ``("model", "haiku")``; None if not a command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2 or stripped[1] in "/ ":
        return None
    head, _, rest = stripped[1:].partition(" ")
    first_line, _, more = head.partition("\n")
    if more:
        rest = more + (" " + rest if rest else "")
    name = first_line.split("@", 1)[0].lower()
    if not name or not name.replace("_", "").isalnum():
        return None
    return name, rest.strip()


@dataclass
class CommandResult:
    """A command's answer: ``text`` for every channel; ``extra`` is structured data
    sent along in the answer's metadata (the ``/search`` results as links)."""

    text: str
    actions: tuple[tuple[str, str], ...] = ()
    switched_to: ConversationRecord | None = None
    extra: dict[str, object] = field(default_factory=dict)


class Commands:
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
        total = await self.s.index.count()
        pending = await self.s.outbox.pending_count()
        escalations = await self.s.external.pending_escalations()
        brain = self.s.brain.name
        vec = "hybrid (keyword + vectors)" if self.s.vector_search_available() else "keyword only"
        lines = [
            f"Brain: {brain}"
            + (" (no API key: replies are recall-only)" if brain == "offline" else ""),
            f"Search: {vec}",
        ]
        fresh = (await self.s.conversations.get(conv.id) or conv) if conv is not None else None
        # The dashboard links the conversation by its title (the text showed it with its
        # internal id, which the page cannot open); the other channels keep the id, which
        # `my-agent conversations show` takes.
        linked: dict[str, object] | None = None
        if fresh is None:
            lines.append("Conversation: none yet (it starts with your first message)")
        else:
            if message.channel == "web":
                title = display_title(
                    fresh.channel, fresh.title, fresh.channel_meta, fresh.participants
                )
                linked = {"prefix": "Conversation: ", "conversationId": fresh.id, "title": title}
                lines.append(f"Conversation: {title}")
            else:
                lines.append(f"Conversation: {fresh.title or UNTITLED} ({fresh.id})")
            lines.append(
                f"Model: {fresh.model or self.s.config.models.default}; turns: "
                f"{fresh.turn_count}; cost: ${fresh.cost_total:.4f} ({fresh.tokens_in} in / "
                f"{fresh.tokens_out} out tokens)"
            )
        lines.append(
            f"Conversations: {total}; outbox pending: {pending}; "
            f"escalations pending: {len(escalations)}"
        )
        if linked is None:
            return CommandResult("\n".join(lines))
        # The same lines as data, the conversation's one as a link (``statusLines``).
        status = [linked if line.startswith("Conversation: ") else line for line in lines]
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
        return CommandResult(f"Renamed to: {rec.title}")

    async def _owner_search(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord | None,
        run: CommandRun | None = None,
    ) -> CommandResult:
        if not args.strip():
            return CommandResult("Usage: /search <query>")
        page = await self.s.search.search(args, limit=5)
        if not page.results:
            return CommandResult(f"No conversations match {args!r}.")
        heading = f"Results for {args!r} ({page.method}):"
        lines = [heading]
        found: list[dict[str, object]] = []
        zone = owner_zone(self.s.config)  # the owner's day, as the assistant dates it
        for i, r in enumerate(page.results, 1):
            snippet = " ".join((r.snippet or "").split())[:160]
            rec = await self.s.conversations.get(r.conversation_id)
            # Named as the dashboard lists it (not "Untitled"): the record's title is
            # also fresher than the index row the search read.
            title = (
                display_title(rec.channel, rec.title, rec.channel_meta, rec.participants)
                if rec is not None
                else r.title or UNTITLED
            )
            day = local_day(r.timestamp, zone)
            lines.append(
                f"{i}. {title} [{r.channel}, {day}, {r.turn_range}] {snippet} ({r.conversation_id})"
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
        # The same results as data, for a channel that can link them (the dashboard
        # opens each conversation from its answer); the text is for the others.
        return CommandResult("\n".join(lines), extra={"heading": heading, "results": found})

    async def _party(self, args: str, usage: str) -> tuple[PartyRecord, str] | CommandResult:
        """(party, the rest of the arguments), or the answer instead: ``usage`` when no
        party is named, that nobody is known by it when none matches."""
        ref, _, rest = args.strip().partition(" ")
        if not ref:
            return CommandResult(usage)
        party = await self.s.external.find(ref)
        if party is None:
            return CommandResult(
                f"No one who wrote to me is known as {ref!r}: use the id from the "
                "escalation, their handle or their address."
            )
        return party, rest.strip()

    async def _owner_trust(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        found = await self._party(
            args,
            "Usage: /trust <party> [known|untrusted] (party id from the "
            "escalation, or their handle/address).",
        )
        if isinstance(found, CommandResult):
            return found
        party, rest = found
        tier = (rest.split() or ["known"])[0].lower()
        if tier not in ("known", "untrusted"):
            return CommandResult("Tier must be known or untrusted (use /block to block).")
        if not (run and run.resumed and party.tier == tier and party.tier_source == "owner"):
            await self.s.external.set_tier(party.id, tier)
        return CommandResult(f"{party.label} is now {tier}.")

    async def _owner_block(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        found = await self._party(args, "Usage: /block <party>")
        if isinstance(found, CommandResult):
            return found
        party, _ = found
        if not (run and run.resumed and party.tier == "blocked"):
            await self.s.external.set_tier(party.id, "blocked")
        return CommandResult(
            f"{party.label} is blocked: their messages are kept but never answered or escalated."
        )

    async def _owner_reply(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        usage = "Usage: /reply <party> <text>"
        found = await self._party(args, usage)
        if isinstance(found, CommandResult):
            return found
        party, text = found
        # A photo or document on Telegram goes on to a Telegram party by its file_id;
        # nothing else can (files are never downloaded): the owner is told what stayed
        # behind and why, never left to believe it reached them.
        relay = message.channel == "telegram" and party.channel == "telegram"
        files = [a for a in message.attachments if relay and a.ref and a.kind in PASSED_ON]
        left = ", ".join(a.name or a.kind for a in message.attachments if a not in files)
        why = (
            "I pass on photos and documents only"
            if relay
            else "files go on only from Telegram to Telegram, as I never download them"
        )
        if not text and not files:
            if left:
                return CommandResult(
                    f"Nothing sent to {party.label}: your {left} cannot be passed on ({why}) "
                    "and there were no words with it. Answer again with text."
                )
            return CommandResult(usage)
        # Keyed by the owner's message: queued once, also when a crash interrupted it.
        dedup = f"{message.channel}:{message.message_id}:to-party"
        if not (run and run.resumed and await self.s.outbox.has_key(dedup)):
            await self.s.router.send_to_party(party, text, kind="reply", dedup=dedup, files=files)
        await self.s.external.resolve_escalations(party.id, "replied")
        sent = ", ".join(a.name or a.kind for a in files)
        what = f"your words and {sent}" if text and sent else f"your {sent}" if sent else ""
        answer = f"Sent to {party.label}" + (f": {what}." if what else ".")
        if left:
            answer += f" Your {left} was not passed on: {why}."
        return CommandResult(answer)


def _title(args: str) -> str:
    """The title ``/rename args`` gives (as :meth:`ConversationManager.rename` makes it)."""
    return " ".join(args.split())[:80].rstrip()
