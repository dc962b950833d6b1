"""The sweep finishes vectors a failed embedding left stale, backing off while it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.model import AppConfig
from bot.lifecycle import ManualClock
from bot.vectors import VectorIndex
from tests.lifecycle.conftest import MakeLifecycle
from tests.recall_helpers import add_conversation, open_index


async def test_the_sweep_retries_conversations_a_failed_rebuild_left(  # type: ignore[no-untyped-def]
    tmp_path: Path,
    embedder,
    monkeypatch: pytest.MonkeyPatch,
    make_lifecycle: MakeLifecycle,
    clock: ManualClock,
    config: AppConfig,
) -> None:
    # Regression: the background rebuild after a model change went on past a conversation
    # the model failed on, but only the next start or `my-agent reindex` embedded it: in
    # a daemon that runs for weeks it was found by keyword only all that time.
    db = await open_index(tmp_path / "c.db")
    try:
        await add_conversation(db, "conv-a", [("user", "planning the kayak trip")])
        await add_conversation(db, "conv-b", [("user", "broken text about the tax return")])
        vectors = VectorIndex(AppConfig(), db, embedder)
        assert await vectors.open() and vectors.stale
        working = embedder.embed_sync
        attempts: set[float] = set()  # the clock times the model was asked (and failed)
        healed = False

        def flaky(texts: list[str]):  # type: ignore[no-untyped-def]
            if any("broken" in t for t in texts) and not healed:
                attempts.add(clock.now().timestamp())
                raise RuntimeError("onnxruntime: failed to allocate memory")
            return working(texts)

        monkeypatch.setattr(embedder, "embed_sync", flaky)
        await vectors.reindex_all()  # the daemon's rebuild: conv-b fails
        assert vectors.stale and len(attempts) == 1
        lifecycle = await make_lifecycle(vectors_=vectors)
        sweep = config.conversations.abbreviation_sweep_seconds
        for _ in range(8):  # sweeps at 1..8 periods: retried at 1, 2, 4 and 8 (backoff)
            clock.advance(sweep)
            await lifecycle.run_due()
        assert len(attempts) == 1 + 4, attempts
        assert vectors.stale and lifecycle.status()["vectors_retry_failed"] == 4
        healed = True  # the model works again: the next due retry completes the vectors
        for _ in range(16):
            clock.advance(sweep)
            await lifecycle.run_due()
        assert not vectors.stale and lifecycle.status()["vectors_retried"] == 1
        query = await embedder.embed_one("tax return")
        ids = await db.fetchall("SELECT id FROM turns WHERE conversation_id = 'conv-b'")
        assert ids[0][0] in await vectors.knn_turns(query, 5)
    finally:
        await db.close()


async def test_a_failed_incremental_embedding_is_retried_by_the_sweep(  # type: ignore[no-untyped-def]
    tmp_path: Path,
    embedder,
    monkeypatch: pytest.MonkeyPatch,
    make_lifecycle: MakeLifecycle,
    clock: ManualClock,
    config: AppConfig,
) -> None:
    # A new turn's windows whose embedding failed stayed without a vector until the
    # conversation's next turn (or a restart): the sweep embeds them again.
    db = await open_index(tmp_path / "c.db")
    try:
        vectors = VectorIndex(AppConfig(), db, embedder)
        assert await vectors.open() and not vectors.stale
        working = embedder.embed_sync

        def failing(texts: list[str]):  # type: ignore[no-untyped-def]
            raise RuntimeError("onnxruntime: failed to allocate memory")

        await add_conversation(db, "conv-a", [("user", "the boiler service is due")])
        monkeypatch.setattr(embedder, "embed_sync", failing)
        with pytest.raises(RuntimeError):
            await vectors.index_turns("conv-a")
        assert vectors.stale
        monkeypatch.setattr(embedder, "embed_sync", working)
        lifecycle = await make_lifecycle(vectors_=vectors)
        clock.advance(config.conversations.abbreviation_sweep_seconds)
        await lifecycle.run_due()
        assert not vectors.stale
        assert await db.fetchone("SELECT count(*) FROM turn_vectors") == (1,)
    finally:
        await db.close()


async def test_the_sweep_loads_a_model_that_was_missing_at_start(
    make_lifecycle: MakeLifecycle, clock: ManualClock, config: AppConfig
) -> None:
    # Regression (session 39): an embedding model missing at start (a folder copied in
    # later, a download before the network was up) was never loaded: search stayed
    # keyword-only until a restart. The sweep asks the daemon's load_late_model each
    # time; a download is due only when the backoff after a failed one has passed.
    asked: list[tuple[float, bool]] = []
    outcome: bool | None = False

    async def load(download_due: bool) -> bool | None:
        nonlocal outcome
        asked.append((clock.now().timestamp(), download_due))
        if not download_due:
            return None
        result = outcome
        if result:
            outcome = None  # loaded: nothing more to try (services.vectors is set)
        return result

    lifecycle = await make_lifecycle()
    lifecycle.load_late_model = load
    sweep = config.conversations.abbreviation_sweep_seconds
    start = clock.now().timestamp()
    for _ in range(8):  # sweeps at 1..8 periods: a download tried at 1, 2, 4 and 8
        clock.advance(sweep)
        await lifecycle.run_due()
    assert len(asked) == 8
    due = [round((t - start) / sweep) for t, download_due in asked if download_due]
    assert due == [1, 2, 4, 8], asked
    assert lifecycle.status()["model_load_failed"] == 4
    outcome = True  # the network is up: the next due try loads it
    for _ in range(16):
        clock.advance(sweep)
        await lifecycle.run_due()
    assert lifecycle.status()["model_loaded_late"] == 1
