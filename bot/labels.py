"""How a conversation is named to the owner: its title, and for a channel conversation
who it is with (the contact, or sender and subject), as the dashboard's sidebar shows it.

One home for both, so that ``/search`` answered on any channel names a conversation as the
dashboard lists it (it said "Untitled" where the sidebar said "Hanan · New
conversation").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UNTITLED = "New conversation"  # what the dashboard shows until a conversation is named


def channel_label(channel: str, meta: Mapping[str, Any], participants: list[str]) -> str:
    """The contact (Telegram) or sender + subject (e-mail) shown beside a channel icon."""
    if channel == "web":
        return ""
    name = ""
    for key in (
        "group_title",
        "groupTitle",
        "contact",
        "sender_name",
        "senderName",
        "display_name",
        "name",
        "username",
        "from",
        "address",
    ):
        value = meta.get(key)
        if isinstance(value, str) and value:
            name = value
            break
    if not name and participants and not str(participants[0]).lstrip("-").isdigit():
        # (A bare Telegram id says nothing to a reader: an escalation used to create
        # the owner's conversation with only that as its participant.)
        name = str(participants[0])
    subject = meta.get("subject")
    if channel == "email" and isinstance(subject, str) and subject:
        return f"{name} — {subject}" if name else subject
    return name


def display_title(
    channel: str,
    title: str | None,
    meta: Mapping[str, Any],
    participants: list[str],
) -> str:
    """``label · title`` (or just the title on the web), :data:`UNTITLED` before naming."""
    label = channel_label(channel, meta, participants)
    name = title or UNTITLED
    return f"{label} · {name}" if label else name


ESCALATION_PREFIX = "Escalation"  # "Escalation: Eve (telegram)", "Escalations: Ann, Bob"


def escalated_party_ids(lines: Iterable[Mapping[str, Any]]) -> list[str]:
    """The parties whose escalations a transcript holds, in order of their first one."""
    seen: dict[str, None] = {}
    for line in lines:
        if line.get("type") == "event" and line.get("event") == "escalation":
            party_id = line.get("partyId")
            if isinstance(party_id, str) and party_id:
                seen.setdefault(party_id)
    return list(seen)


def escalation_title(parties: Sequence[Any]) -> str:
    """The automatic title of a conversation that holds only escalations, from the
    parties (:class:`bot.parties.PartyRecord`) in order: "Escalation: Eve (telegram)"
    for one, "Escalations: Ann, Bob and Kim" for three, "Escalations: Ann, Bob and 2
    others" beyond (it named only the first, however many had written since)."""
    if len(parties) == 1:
        return f"{ESCALATION_PREFIX}: {parties[0].label}"
    names = [p.who for p in parties]
    if len(names) <= 3:
        listed = f"{', '.join(names[:-1])} and {names[-1]}"
    else:
        listed = f"{names[0]}, {names[1]} and {len(names) - 2} others"
    return f"{ESCALATION_PREFIX}s: {listed}"


def is_escalation_titled(rec: Any) -> bool:
    """Whether a conversation record still has an escalation's automatic title (or none):
    no turn yet, never named by hand, a channel's (escalations go to a channel's owner
    conversation; naming at turn 5 takes over once the owner talks there)."""
    if rec.channel == "web" or rec.turn_count or rec.manually_named:
        return False
    return not rec.title or str(rec.title).startswith(ESCALATION_PREFIX)
