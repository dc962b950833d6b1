"""The lines a third party's message adds to their file (``external/{party_id}.jsonl``).

A message in is written as one ``message`` line, after the party's ``meta`` line when it
is their first, and after a ``tier`` event when ``trust.contacts`` names them with a tier
other than the one their file has (the config beats a default, not the owner's choice),
or no longer names them while their tier is the config's (the default tier again).
The writing and the mirroring into the index: :class:`bot.external.ExternalStore`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bot.parties import PartyRecord
from bot.transcript_lines import Line


def reply_to_of(data: Mapping[str, Any]) -> list[str]:
    """Where a message asks to be answered (an e-mail's Reply-To, as the channel lists
    it): ``reply_to`` in a message's metadata, ``replyTo`` in a line of the party's
    file; empty when it names none (answers go to the sender)."""
    listed = data.get("reply_to", data.get("replyTo"))
    if not isinstance(listed, list | tuple):
        return []
    return [a for a in listed if isinstance(a, str)]


def inbound_lines(
    party_id: str,
    channel: str,
    party_key: str,
    *,
    now: str,
    existing: PartyRecord | None,
    configured: str | None,
    default_tier: str,
    display_name: str | None,
    chat_id: str,
    text: str,
    message_ref: str,
    kind: str,
    reply_ref: str | None,
    subject: str | None,
    addressed: bool,
    album: str | None,
    handles: Sequence[str],
    reply_to: Sequence[str] = (),
) -> list[Line]:
    """The lines of one message from the party (``existing``: their record, None for a
    first message; ``configured``: the tier ``trust.contacts`` gives them, if any;
    ``now``: the lines' time, ISO 8601)."""
    lines: list[Line] = []
    tier, source = None, "config"
    if existing is not None and configured and existing.tier_source != "owner":
        if existing.tier != configured:  # the config changed since: config beats default
            tier = configured
    elif existing is not None and not configured and existing.tier_source == "config":
        # The config no longer names them (the owner took them off trust.contacts): the
        # tier it gave goes with it. Kept, a contact taken off the list was answered by
        # the model for good, a party unblocked there stayed blocked.
        tier, source = default_tier, "default"
    if tier is not None:
        lines.append(
            {"type": "event", "event": "tier", "tier": tier, "source": source, "timestamp": now}
        )
    if existing is None:
        tier = configured or default_tier
        lines.append(
            {
                "type": "meta",
                "id": party_id,
                "channel": channel,
                "party": party_key,
                "name": display_name,
                "chatId": chat_id,
                "tier": tier,
                "tierSource": "config" if configured else "default",
                "created": now,
            }
        )
    lines.append(
        {
            "type": "message",
            "direction": "in",
            "content": text,
            "messageRef": message_ref,
            "kind": kind,
            "timestamp": now,
            "name": display_name,
            "chatId": chat_id,
            **({"replyRef": reply_ref} if reply_ref else {}),
            **({"subject": subject} if subject else {}),
            # where an e-mail asks to be answered (its Reply-To), for answers a restart
            # sends or the owner's later /reply: the channel's copy is in memory only
            **({"replyTo": list(reply_to)} if reply_to else {}),
            **({} if addressed else {"addressed": False}),
            **({"album": album} if album else {}),
            # the sender's handles as of this message (a Telegram @username), so
            # that the owner can name them: "/trust @eve"
            **({"handles": handles} if handles else {}),
        }
    )
    return lines
