"""The offline degraded mode end to end: no API key (the offline brain from
``open_services``), the extractive abbreviation clearly labelled, embedded by the recall
subsystem's real vector index with the local MiniLM model into ``abbreviations_vec``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.brain.base import UtilityModel
from bot.config.model import AppConfig, BrainConfig, EmbeddingConfig
from bot.extractive import HEADER
from bot.identity import OwnerIdentities
from bot.lifecycle import Lifecycle, ManualClock
from bot.services import Services, close_services, open_services
from bot.vectors import VectorIndex

from ..recall_helpers import model_path
from .conftest import patch_bus


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Services]:
    config = AppConfig(
        data_dir=tmp_path / "data",
        brain=BrainConfig(provider="offline"),
        embedding=EmbeddingConfig(model_path=str(model_path())),
    )
    s = await open_services(config)
    patch_bus(s.bus)
    if not s.index_db.vec_available:
        pytest.fail("sqlite-vec does not load: the index driver selection is broken")
    s.vectors = VectorIndex(config, s.index_db, s.embedder)
    assert await s.vectors.open()
    yield s
    await close_services(s)


async def test_offline_notes_are_labelled_embedded_and_named(
    services: Services, clock: ManualClock
) -> None:
    assert not isinstance(services.brain, UtilityModel)
    lifecycle = Lifecycle(services.config, services, clock=clock)
    await lifecycle.start()
    try:
        manager = services.conversations
        conv = (await manager.create("web")).id
        lines = [
            (
                "We need to replace the boiler in the cellar before October.",
                "A condensing boiler from Vaillant costs about 4,800 euros installed.",
            ),
            (
                "Ask Müller Heating for a quote, they did the radiators.",
                "I noted Müller Heating; their quote should include removal of the old tank.",
            ),
            (
                "Decided: we go with the condensing boiler.",
                "Decision noted: condensing boiler, budget 5,000 euros.",
            ),
            (
                "Open question: does the chimney need a liner?",
                "That is open; the chimney sweep can answer it on his visit.",
            ),
            ("Thanks, that's all for the boiler.", "You're welcome."),
        ]
        for user, assistant in lines:
            await manager.append_turn(conv, "user", user)
            await manager.append_turn(conv, "assistant", assistant)
        await lifecycle.settle()
        rec = await manager.require(conv)
        assert rec.title and not rec.manually_named  # offline keyword naming at turn 5

        clock.advance(600)
        await lifecycle.run_due()
        rec = await manager.require(conv)
        assert rec.abbreviation is not None and rec.abbreviation.startswith(HEADER)
        assert "Müller Heating" in rec.abbreviation
        assert "You're welcome" not in rec.abbreviation  # no pleasantries
        assert not rec.needs_abbreviation
        row = await services.index_db.fetchone(
            "SELECT count(*) FROM abbreviations_vec WHERE conversation_id = ?", (conv,)
        )
        assert row is not None and row[0] == 1
    finally:
        await lifecycle.stop(1)


async def test_offline_notes_name_the_owner_not_their_channel_id(
    services: Services, clock: ManualClock
) -> None:
    # Regression: the owner's Telegram turns store their account id as sender, and the
    # offline notes read "Participants: 424242." and "424242: ...".
    owner_id = "424242"
    config = services.config.model_copy(
        update={
            "owner": services.config.owner.model_copy(
                update={"name": "Robin", "identities": {"telegram": [owner_id]}}
            )
        }
    )
    services.identities = OwnerIdentities(config)
    lifecycle = Lifecycle(config, services, clock=clock)
    await lifecycle.start()
    try:
        manager = services.conversations
        conv = (await manager.create("telegram")).id
        for n in range(3):
            await manager.append_turn(
                conv,
                "user",
                f"Book the Lisbon flight {n} before Friday; the fare is 240 euros.",
                channel="telegram",
                sender=owner_id,
            )
            await manager.append_turn(conv, "assistant", f"Noted flight {n} for Lisbon.")
        await lifecycle.settle()
        clock.advance(600)
        await lifecycle.run_due()
        rec = await manager.require(conv)
        assert rec.abbreviation is not None
        assert owner_id not in rec.abbreviation
        assert "Robin" in rec.abbreviation
    finally:
        await lifecycle.stop(1)
