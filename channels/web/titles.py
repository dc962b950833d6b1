"""Titles the dashboard derives when it reads a conversation, not stored ones.

An escalation conversation (the owner's channel conversation that only escalations have
written to yet) is named after the parties who escalated there. One opened by an older
version has no title, or one naming a party by the bare id they had when they first
wrote (``Escalation: 8081 (telegram)``): their name, known since, is shown instead. It
is derived here at read time from the transcript's escalation events and the parties'
records, so that history files are never rewritten for it; the next escalation there
stores the fresh title (:meth:`bot.strangers.StrangerFlow.escalate`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from bot.labels import escalated_party_ids, escalation_title, is_escalation_titled

log = logging.getLogger("my_agent.web")


async def derived_titles(services: Any, records: Iterable[Any]) -> dict[str, str]:
    """``{conversation id: title}`` for the records whose shown title differs from the
    stored one (only escalation conversations, which hold no turn: a cheap read)."""
    out: dict[str, str] = {}
    for rec in records:
        if not is_escalation_titled(rec):
            continue
        try:
            lines = await asyncio.to_thread(services.conversations.read_lines, rec.id)
        except OSError as exc:  # the stored title is still a title
            log.warning("cannot read %s for its title: %s", rec.id, exc)
            continue
        parties = [
            p for pid in escalated_party_ids(lines) if (p := await services.external.get(pid))
        ]
        if not parties:
            continue
        title = escalation_title(parties)
        if title != rec.title:
            out[rec.id] = title
    return out
