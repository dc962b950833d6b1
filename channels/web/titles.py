"""Titles the dashboard derives when it reads a conversation, not stored ones: the
core's :func:`bot.labels.shown_titles` (an older escalation conversation named after its
parties as known now), which ``/status`` and ``/search`` show on every channel too."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bot.labels import shown_titles


async def derived_titles(services: Any, records: Iterable[Any]) -> dict[str, str]:
    """``{conversation id: title}`` for the records whose shown title differs from the
    stored one (:func:`bot.labels.shown_titles`)."""
    return await shown_titles(services, records)
