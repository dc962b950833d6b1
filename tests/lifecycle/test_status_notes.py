"""``/status`` and ``my-agent status`` tell the owner how many conversations the offline
stand-in summarises while the model owes their notes (bot/command_status.py,
bot/healthcheck.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from bot import healthcheck
from bot.command_status import local_minute, status_answer
from bot.extractive import HEADER
from bot.health_store import OFFLINE_NOTES_HEADER
from bot.services import open_services
from tests.conftest import make_config, shutdown_services

from .conftest import ScriptedModel

ZONE = "Asia/Tokyo"


async def _conversation(services: Any, notes: str | None, *, owed: bool) -> Any:
    rec = await services.conversations.create("web")
    await services.conversations.append_turn(rec.id, "user", "Is the NAS backup running?")
    if notes is not None:
        extra = {"needsAbbreviation": True} if owed else {}
        await services.conversations.set_abbreviation(rec.id, notes, 1, **extra)
    elif owed:  # a failed pass: flagged, and the failure recorded
        await services.conversations.mark_needs_abbreviation(rec.id, True)
        await services.conversations.mark_abbreviation_failed([rec.id], True)
    return await services.conversations.get(rec.id)


async def _status(tmp_path: Path, brain: Any) -> tuple[list[str], Any, dict[str, Any]]:
    config = make_config(tmp_path, owner={"timezone": ZONE})
    services = await open_services(config, brain=brain)
    try:
        stand_in = await _conversation(services, f"{HEADER}\n- the NAS backup", owed=True)
        await _conversation(services, f"{HEADER}\n- a later outage", owed=True)
        await _conversation(services, "The model's notes on the NAS.", owed=False)
        await _conversation(services, None, owed=True)  # a failed pass, no notes yet
        lines, _ = await status_answer(services, "web", None, owner_only=True)
    finally:
        await shutdown_services(services)
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    return lines, stand_in, report


async def test_status_counts_the_offline_stand_ins_owed_to_the_model(tmp_path: Path) -> None:
    # Regression: /status did not count them (nor tell notes at all), and `my-agent
    # status` counted them among the retries: the owner could not see that conversations
    # were summarised by the offline stand-in and still owed to the model.
    lines, stand_in, report = await _status(tmp_path, ScriptedModel())
    since = local_minute(stand_in.updated, ZoneInfo(ZONE))
    assert (
        "Notes: 3 conversations waiting for notes; 2 of them summarised by the offline "
        f"stand-in until the model writes their notes, the oldest last active {since} ({ZONE})"
    ) in lines
    assert report["counts"]["offline_stand_ins"] == 2
    text = healthcheck.format_text(report)
    assert (
        "abbreviations pending: 3 (3 failed, to retry, 2 offline stand-ins owed to the model)"
    ) in text


async def test_without_a_model_offline_notes_are_no_stand_ins(tmp_path: Path) -> None:
    lines, _, _ = await _status(tmp_path, None)  # the offline brain: every note is offline
    assert "Notes: 3 conversations waiting for notes" in lines


def test_the_status_header_is_the_offline_notes_header() -> None:
    assert OFFLINE_NOTES_HEADER == HEADER
