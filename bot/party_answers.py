"""How the owner answers a third party by hand, as the owner's notices about them say.

An escalation, the notice of an escalated message's edit and the notice that a known
contact's hourly budget of answers is spent end in the commands that answer the party:
``/reply`` (to them alone), and beside it ``/replyall`` (to everyone else their mail
went to too, :func:`bot.party_lines.everyone_else`) when their message went to others
openly. On Telegram the escalation and the edit's notice have the buttons: Reply, and
Reply all beside it (:func:`reply_actions`; each asks for the words,
channels/telegram/keyboards.py). Before session 41 the escalations named ``/reply``
only; before session 42 the other notices did, and no button answered all.
"""

from __future__ import annotations

from collections.abc import Collection

from bot.config import AppConfig
from bot.events import InboundMessage
from bot.parties import PartyRecord
from bot.party_lines import everyone_else, listed


def our_addresses(config: AppConfig) -> list[str]:
    """The assistant's own addresses, which a reply-all leaves out (its mail address)."""
    address = config.channels.email.address
    return [address] if address else []


def answer_yourself(
    party: PartyRecord, said: InboundMessage | None, ourselves: Collection[str]
) -> str:
    """How the owner answers ``party`` by hand, as the owner's notices about them end
    (an escalation, an edit's notice, the hourly budget's): ``/reply``, and beside it
    ``/replyall`` when their message ``said`` went to others too, openly
    (:func:`bot.party_lines.everyone_else`: not when the assistant was only blind-copied, which
    ``/replyall`` answers alone too)."""
    others, openly = everyone_else(party, said, ourselves)
    if not (others and openly):
        return f"/reply {party.id} <text> to answer yourself."
    return (
        f"/reply {party.id} <text> to answer yourself (them alone), "
        f"/replyall {party.id} <text> to answer them and everyone else their message "
        f"went to ({listed(others)})."
    )


def reply_actions(
    party: PartyRecord, said: InboundMessage | None, ourselves: Collection[str]
) -> tuple[tuple[str, str], ...]:
    """The buttons of a notice about ``party`` that answer them (Telegram's, the
    commands a channel without buttons lists): Reply, and Reply all where
    :func:`answer_yourself` names ``/replyall``. The Reply all button asks for the words
    as Reply does (channels/telegram/keyboards.py)."""
    others, openly = everyone_else(party, said, ourselves)
    reply = ("Reply", f"/reply {party.id}")
    return (reply, ("Reply all", f"/replyall {party.id}")) if others and openly else (reply,)
