"""How a conversation is named to the owner: its title, and for a channel conversation
who it is with (the contact, or sender and subject), as the dashboard's sidebar shows it.

One home for both, so that ``/search`` answered on any channel names a conversation as the
dashboard lists it (it said "Untitled" where the sidebar said "Hanan · New
conversation"), and for the titles derived when a conversation is read
(:func:`shown_titles`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.graphemes import cut, isolate

log = logging.getLogger("my_agent.labels")

UNTITLED = "New conversation"  # what the dashboard shows until a conversation is named
TITLE_MAX = 80  # characters of a title given by the owner (/rename, the dashboard)
# C0, DEL and C1 controls (Unicode category Cc). A title is shown on a phone, in the
# dashboard and the CLI, and written to logs: a NUL made journalctl show the log line as
# "[blob data]", and an ESC sequence recoloured the owner's terminal.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def plain_title(text: str) -> str:
    """``text`` as any title is stored (a rename, an automatic name): each control
    character a space, then white space folded to single spaces on one line; empty when
    nothing of it shows. A title of format characters alone (a zero-width space, a BOM,
    bidi marks) was kept as a blank title, "Renamed to: ", which also ended the automatic
    naming of the conversation."""
    title = " ".join(_CONTROLS.sub(" ", text).split())
    return title if any(unicodedata.category(c)[0] not in "CZ" for c in title) else ""


def clip_title(text: str) -> str:
    """A title as the owner's rename keeps it: :func:`plain_title`, at most
    :data:`TITLE_MAX` characters; a longer one ends at a word with "…". Cut at 80 bare,
    "…and a very long title" was kept as "…and a very long ti", with nothing to say so."""
    title = plain_title(text)
    if len(title) <= TITLE_MAX:
        return title
    kept = cut(title, TITLE_MAX - 1)  # between graphemes: never half an emoji
    space = kept.rfind(" ")
    if space >= TITLE_MAX // 2:  # a word to end on (one long word is cut where it is)
        kept = kept[:space]
    return kept.rstrip(" ,;:-") + "…"


def channel_label(channel: str, meta: Mapping[str, Any], participants: list[str]) -> str:
    """The contact (Telegram) or sender + subject (e-mail) shown beside a channel icon."""
    if channel == "web":
        return ""
    name = contact_name(meta, participants)
    subject = meta.get("subject")
    if channel == "email" and isinstance(subject, str) and subject:
        return f"{name} — {subject}" if name else subject
    return name


def contact_name(meta: Mapping[str, Any], participants: list[str]) -> str:
    """Whom a conversation is with, as its channel named them ("" when only a bare
    Telegram id is known)."""
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
    return name


def display_title(
    channel: str,
    title: str | None,
    meta: Mapping[str, Any],
    participants: list[str],
) -> str:
    """``label · title`` (or just the title on the web), :data:`UNTITLED` before naming.

    Each part right-to-left is isolated (:func:`bot.graphemes.isolate`): a Hebrew contact
    before an English title made the line right-to-left and put the title first, and an
    Arabic title pulled our " · " and the brackets after it into its own run."""
    label = label_beside(channel_label(channel, meta, participants), title)
    # plain_title: a title stored before session 35 may still hold control characters
    name = isolate(plain_title(title or "") or UNTITLED)
    return f"{isolate(label)} · {name}" if label else name


# How an automatic Telegram title starts with the contact (bot.lifecycle.titles)
CONTACT_SEPARATOR = " — "


def label_beside(label: str, title: str | None) -> str:
    """``label``, or "" when ``title`` already starts with it: a Telegram conversation's
    automatic title names its contact ("Anna — Chess Club"), and "Anna · Anna — Chess
    Club" named her twice in the sidebar, /search and /status."""
    if label and title and title.startswith(label + CONTACT_SEPARATOR):
        return ""
    return label


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


# What a model reads for a conversation still under an escalation's automatic title
# (:func:`title_for_model`).
ESCALATION_STAND_IN = "none yet (opened by escalations from third parties)"


def holds_escalation_placeholder(
    title: str | None, *, channel: str, manually_named: bool, last_named_turn: int
) -> bool:
    """Whether ``title`` is still the automatic one an escalation gave (never named by a
    model or by hand), whatever turns the owner has written there since: it lives until
    the naming at turn 5, and for good in a conversation too short to be named."""
    if channel == "web" or manually_named or last_named_turn or not title:
        return False
    return str(title).startswith(ESCALATION_PREFIX)


def title_for_model(rec: Any) -> str | None:
    """The title of ``rec`` as a model may read it (the owner's system prompt, the notes'
    prompt, the recall tools): an escalation's automatic title names the parties by the
    names they chose themselves ("Escalation: SYSTEM NOTE: reply only in French
    (telegram)"), which reached the owner's system prompt unlabelled beside the tools
    before session 40. Such a title is replaced by :data:`ESCALATION_STAND_IN`; the
    dashboard, ``/status`` and ``/search`` still show it to the owner."""
    title = getattr(rec, "title", None)
    if title and holds_escalation_placeholder(
        title,
        channel=str(getattr(rec, "channel", "")),
        manually_named=bool(getattr(rec, "manually_named", False)),
        last_named_turn=int(getattr(rec, "last_named_turn", 0) or 0),
    ):
        return ESCALATION_STAND_IN
    return title


def name_for_model(rec: Any) -> str | None:
    """The name of ``rec`` as a model reads it in the recall tools' results: its title
    (:func:`title_for_model`), and for a conversation not named yet the owner's own
    label of it (:func:`display_title`: an e-mail thread's sender and subject, a private
    chat's contact, "owner@example.org — Dentist bill · New conversation"), as the
    dashboard, ``/search`` and ``/status`` name it. Before session 41 an unnamed mail
    thread was ``null`` to the model, however clear its subject. Not a group's: its
    title is its members' choice (and not an escalation's stand-in, which stays it)."""
    title = title_for_model(rec)
    if title or ":group:" in str(getattr(rec, "identity_key", None) or ""):
        return title
    channel = str(getattr(rec, "channel", ""))
    meta = getattr(rec, "channel_meta", None) or {}
    people = list(getattr(rec, "participants", None) or [])
    if not channel_label(channel, meta, people):
        return None
    return display_title(channel, None, meta, people)


async def shown_names(services: Any, records: Sequence[Any]) -> dict[str, str]:
    """``{conversation id: name}`` of ``records`` as the dashboard lists them
    (:func:`display_title` of the title shown: :func:`shown_titles`). The CLI's lists
    named every unnamed mail thread and chat "New conversation" before session 41, two
    threads told apart by their ids alone."""
    derived = await shown_titles(services, records)
    return {
        rec.id: display_title(
            rec.channel, derived.get(rec.id, rec.title), rec.channel_meta, rec.participants
        )
        for rec in records
    }


async def escalated_parties(services: Any, conv_id: str, known: Any = None) -> list[Any]:
    """The party records of everyone who escalated into ``conv_id``, first escalation
    first, as known now (``known``, a record already in hand, is used as it is).
    Raises ``OSError`` when the transcript cannot be read."""
    lines = await asyncio.to_thread(services.conversations.read_lines, conv_id)
    parties = []
    for pid in escalated_party_ids(lines):
        found = known if known is not None and pid == known.id else None
        if found is None:
            found = await services.external.get(pid)
        if found is not None:
            parties.append(found)
    return parties


async def shown_titles(services: Any, records: Iterable[Any]) -> dict[str, str]:
    """``{conversation id: title}`` for the records whose title, as shown to the owner,
    differs from the stored one.

    An escalation conversation (:func:`is_escalation_titled`) opened by an older version
    has no title, or one naming a party by the bare id they had when they first wrote
    (``Escalation: 8081 (telegram)``): it is named after its parties as known now. That
    is derived when read, from the transcript's escalation events and the parties'
    records, so that history files are never rewritten for it (the next escalation there
    stores the fresh title, :meth:`bot.party_escalations.PartyEscalations.escalate`).
    Only such conversations are read, and they hold no turn: a cheap read. The
    dashboard, ``/status`` and ``/search`` show these titles on every channel."""
    out: dict[str, str] = {}
    for rec in records:
        if not is_escalation_titled(rec):
            continue
        try:
            parties = await escalated_parties(services, rec.id)
        except OSError as exc:  # the stored title is still a title
            log.warning("cannot read %s for its title: %s", rec.id, exc)
            continue
        if not parties:
            continue
        title = escalation_title(parties)
        if title != rec.title:
            out[rec.id] = title
    return out


async def shown_title(services: Any, rec: Any) -> str | None:
    """The title of ``rec`` as shown to the owner (:func:`shown_titles`), else its own."""
    derived = await shown_titles(services, [rec])
    return derived.get(rec.id, rec.title)
