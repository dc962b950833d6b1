"""The owner's commands on third parties: ``/trust``, ``/block``, ``/reply`` and
``/replyall``.

Apart from the conversation commands (:mod:`bot.commands`): these act on the
external-communication records (seed 000 "External Communications"), not on the owner's
conversations, and ``/reply`` and ``/replyall`` are the commands that send to someone
else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bot.command_runs import CommandRun
from bot.command_syntax import PASSED_ON, CommandResult
from bot.events import InboundMessage
from bot.index import ConversationRecord
from bot.parties import PartyRecord
from bot.party_answers import our_addresses
from bot.party_lines import sent_to

if TYPE_CHECKING:
    from bot.services import Services


TRUST_TIERS = ("known", "untrusted")  # what /trust sets (/block sets the third)
# The most words a display name named in a command may have ("/reply Mary Ann Lee hi").
NAME_WORDS = 6


class PartyCommands:
    """The party commands, a base of :class:`bot.commands.Commands`."""

    s: Services

    async def _party(
        self, args: str, usage: str, rest_fits: Callable[[str], bool] = lambda rest: True
    ) -> tuple[PartyRecord, str] | CommandResult:
        """(party, the rest of the arguments), or the answer instead: ``usage`` when no
        party is named, that nobody is known by it when none matches, the ids to choose
        from when a display name is several parties' or a handle several accounts'.

        Who a party is (id, address, handle) comes first, a display name only after: a
        name is whatever the sender typed, and matched alongside, the newest party won
        (a stranger who called themselves "bob@example.com" got the owner's
        "/reply bob@example.com <the door code>"). ``rest_fits``: whether what follows a
        display name can be the rest of this command (a name of several words, below)."""
        ref, _, rest = args.strip().partition(" ")
        if not ref:
            return CommandResult(usage)
        carriers = await self.s.external.carrying(ref) if ref.startswith("@") else []
        if len(carriers) > 1:
            # A username passes to whoever registers it next: the newest of its
            # carriers was taken, and the owner's words for the one they knew went to
            # the name's next holder.
            listed = ", ".join(
                f"{p.id} ({p.label}, user id {p.party_key}, {p.tier})" for p in carriers
            )
            return CommandResult(
                f"More than one account has written to me as {ref} (a username passes to "
                f"whoever registers it next): {listed}. Use the id: nothing was done."
            )
        party = await self.s.external.find(ref)
        if party is None:
            found = await self._by_name(args.strip(), rest_fits)
            if isinstance(found, CommandResult):
                return found
            if found is not None:
                party, rest = found
        if party is None:
            return CommandResult(
                f"No one who wrote to me is known as {ref!r}: use the id from the "
                "escalation, their handle or their address."
            )
        return party, rest.strip()

    async def _by_name(
        self, args: str, rest_fits: Callable[[str], bool]
    ) -> tuple[PartyRecord, str] | CommandResult | None:
        """The party whose display name starts ``args`` (a name of up to
        :data:`NAME_WORDS` words: "/reply Zed Smith hi" is Zed Smith's), and the rest.
        A name several parties go by, or two names that both fit ("Zed" and "Zed Smith":
        is "Smith hi" the text?), is answered with the ids to choose from. Before session
        40 only the first word was a name: Zed Smith could not be named, and a party
        called "Zed" got "Smith hi" (and "/block Zed Smith" blocked Zed)."""
        words = args.split(" ")
        fits: list[tuple[str, list[PartyRecord], str]] = []
        for n in range(1, min(NAME_WORDS, len(words)) + 1):
            name = " ".join(words[:n])
            if not name.strip() or (n > 1 and not words[n - 1]):
                continue  # a double space adds nothing to the name
            named = await self.s.external.named(name)
            if named and rest_fits(" ".join(words[n:]).strip()):
                fits.append((name, named, " ".join(words[n:])))
        if not fits:
            return None
        if len(fits) == 1 and len(fits[0][1]) == 1:
            name, (party,), rest = fits[0]
            return party, rest
        listed = ", ".join(f"{p.id} ({p.label})" for _, named, _ in fits for p in named)
        said = " or ".join(repr(name) for name, _, _ in fits)
        return CommandResult(
            f"More than one who wrote to me is called {said}: {listed}. "
            "Use the id: nothing was done."
        )

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
            lambda rest: len(rest.split()) <= 1 and rest.lower() in ("", *TRUST_TIERS),
        )
        if isinstance(found, CommandResult):
            return found
        party, rest = found
        tier = (rest.split() or ["known"])[0].lower()
        if tier not in TRUST_TIERS:
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
        found = await self._party(args, "Usage: /block <party>", lambda rest: not rest)
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
        return await self._answer_party(args, message, run, to_all=False)

    async def _owner_replyall(
        self,
        args: str,
        message: InboundMessage,
        conv: ConversationRecord,
        run: CommandRun | None = None,
    ) -> CommandResult:
        """``/replyall <party> <text>``: as ``/reply``, to the party and everyone else
        their last message went to (a mail's To and Cc, as a mail client's reply-all).
        Before session 41 the owner had no way to answer them all: ``/reply`` goes to
        the party alone (session 40), and ``reply_all`` is never the owner's words."""
        return await self._answer_party(args, message, run, to_all=True)

    async def _answer_party(
        self, args: str, message: InboundMessage, run: CommandRun | None, *, to_all: bool
    ) -> CommandResult:
        """The owner's own words to a party (``/reply``, ``/replyall`` with ``to_all``)."""
        usage = f"Usage: /{'replyall' if to_all else 'reply'} <party> <text>"
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
        # their last message: where it goes in their thread, and to whom (one read)
        answering = await self.s.external.reply_thread(party)
        if not (run and run.resumed and await self.s.outbox.has_key(dedup)):
            await self.s.router.send_to_party(
                party,
                text,
                kind="reply",
                dedup=dedup,
                answering=answering,
                files=files,
                alone=True,  # never reply-all to those their mail went to
                to_all=to_all,  # unless the owner asks for it (/replyall)
            )
        await self.s.external.resolve_escalations(party.id, "replied")
        sent = ", ".join(a.name or a.kind for a in files)
        what = f"your words and {sent}" if text and sent else f"your {sent}" if sent else ""
        answer = sent_to(party, answering, to_all=to_all, ourselves=self._ourselves())
        answer += f": {what}." if what else "."
        if left:
            answer += f" Your {left} was not passed on: {why}."
        return CommandResult(answer)

    def _ourselves(self) -> list[str]:
        """The assistant's own addresses, left out of a reply-all."""
        return our_addresses(self.s.config)
