"""How a conversation is named to the owner: its title, and for a channel conversation
who it is with (the contact, or sender and subject), as the dashboard's sidebar shows it.

One home for both, so that ``/search`` answered on any channel names a conversation as the
dashboard lists it (it said "Untitled" where the sidebar said "Hanan · New
conversation").
"""

from __future__ import annotations

from collections.abc import Mapping
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
