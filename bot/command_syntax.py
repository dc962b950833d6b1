"""What the slash commands are: their names, help texts, parsing and answer type.

Apart from :mod:`bot.commands` (which runs them) because the channels read it too (the
dashboard and the Telegram menus list and recognise commands without running one), and
the party commands (:mod:`bot.party_commands`) answer with the same type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.index import ConversationRecord

OWNER_HELP = """Commands:
/new [first message] - start a fresh conversation (with that message)
/model [opus|sonnet|haiku] - show or switch the model
/rename <title> - rename this conversation
/search <query> [channel:telegram] [from:2026-02-01] [to:2026-02-28] - search past conversations
/status - what is running and how this conversation stands
/trust <party> [known|untrusted] - let a third party be answered
/block <party> - ignore a third party
/reply <party> <text> - answer a third party yourself (them alone)
/replyall <party> <text> - answer them and everyone else their mail went to
/help - this list"""

STRANGER_HELP = """Commands:
/new - start over (forget this exchange's context)
/help - this list"""

# Other members of the owner's group: the conversation is the owner's, so only /help.
GROUP_MEMBER_HELP = """Commands:
/help - this list
Mention me or reply to one of my messages to ask me something."""

COMMANDS = (
    "new",
    "model",
    "help",
    "status",
    "rename",
    "search",
    "trust",
    "block",
    "reply",
    "replyall",
)
PASSED_ON = ("photo", "document")  # what /reply sends on to a party (Telegram to Telegram)
# Commands that need no conversation: from a dashboard tab that has none yet (or a mail
# that starts no known thread) they run without one, instead of creating an empty
# conversation to record them in. The party commands act on a third party's records, not
# on the owner's conversation: until session 39 /trust, /block and /reply (and an unknown
# command) typed in a new chat each left an empty "New conversation" in the list.
DETACHED_COMMANDS = ("help", "search", "status", "trust", "block", "reply", "replyall")


def is_detached(name: str) -> bool:
    """Whether the command ``name`` runs without a conversation where there is none yet:
    one of :data:`DETACHED_COMMANDS`, or a name that is no command at all (answered
    "Unknown command"; ``start``, Telegram's Start button, is ``/help``)."""
    return name in DETACHED_COMMANDS or name not in COMMANDS


def parse_command(text: str) -> tuple[str, str] | None:
    """``"/model@MyBot  haiku"`` -> ``("model", "haiku")``; None if not a command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    if stripped[1] == "/" or stripped[1].isspace():
        return None
    # Any whitespace ends the name: a phone keyboard's no-break space or a tab after
    # "/model" used to glue the argument to the name and send it to the model as words.
    head, *tail = stripped[1:].split(None, 1)
    name = head.split("@", 1)[0].lower()
    if not name or not name.replace("_", "").isalnum():
        return None
    return name, tail[0].strip() if tail else ""


# A closing that signs a mail off: "/new" over "Thanks,\nOlivia" started a conversation
# whose first message was the sign-off, answered by the model.
_CLOSING = re.compile(
    r"^(thanks?( you| again| a lot)?|thx|ty|many thanks|cheers|best|best wishes|regards|"
    r"kind regards|best regards|warm regards|all the best|take care|sincerely|yours|"
    r"danke( dir| schön| sehr)?|vielen dank|viele grüße|liebe grüße|beste grüße|"
    r"mit freundlichen grüßen|grüße|gruß|lg|vg|mfg|gracias|saludos|un saludo|merci|"
    r"cordialement|bien à vous|bisous|grazie|cordiali saluti|saluti|ciao|groeten|"
    r"met vriendelijke groet|hälsningar|mvh|pozdrawiam|obrigad[oa]|abraços)[\s,.!]*$",
    re.IGNORECASE,
)


def first_message(channel: str, args: str) -> str:
    """What ``/new args`` starts the fresh conversation with: ``args``, but nothing for a
    mail's closing alone (``"/new"`` over ``"Thanks,\nOlivia"``). Only in mail: a chat's
    "/new Ciao" or "/new cheers" is a greeting, and was dropped (before session 39)."""
    if channel == "email" and is_closing(args):
        return ""
    return args


def is_closing(text: str) -> bool:
    """Whether ``text`` is only a mail's closing: a valediction ("Thanks,", "Best
    regards", "Viele Grüße") and at most two short lines under it (a name, a role)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines or len(lines) > 3 or not _CLOSING.match(lines[0]):
        return False
    return all(len(line) <= 40 for line in lines[1:])


@dataclass
class CommandResult:
    """A command's answer: ``text`` for every channel; ``extra`` is structured data
    sent along in the answer's metadata (the ``/search`` results as links)."""

    text: str
    actions: tuple[tuple[str, str], ...] = ()
    switched_to: ConversationRecord | None = None
    extra: dict[str, object] = field(default_factory=dict)
