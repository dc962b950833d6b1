"""The daemon's background start (bot/daemon_vectors.py): the vector rebuild after a
model change is asked to wait for the notes the last run left owed; a model that was
not there at start is loaded once it is."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bot.config.model import AppConfig
from bot.daemon_vectors import _open_vectors, load_late_model
from bot.embedding import ENV_MODEL_PATH, EmbeddingService
from bot.hooks import EventBus
from bot.search import SearchService
from tests.recall_helpers import add_conversation, model_path, open_index


class _Vectors:
    """Records how the rebuild was asked for (the rebuild itself: test_vector_rebuild)."""

    def __init__(self) -> None:
        self.rebuilt = asyncio.Event()

    async def reindex_all(self, after: Any = None) -> dict[str, int]:
        if after is not None:
            await after
        self.rebuilt.set()
        return {"turns": 0, "abbreviations": 0, "terms": 0}


async def test_the_rebuild_starts_once_the_owed_notes_are_written() -> None:
    # Regression: the start-up rebuild began as soon as the model loaded, beside the
    # abbreviation passes of the owed notes, which then waited behind its embeddings.
    notes_written = asyncio.Event()
    vectors = _Vectors()

    async def start() -> bool:
        return True

    services: Any = SimpleNamespace(
        search=SimpleNamespace(vectors=vectors, start=start),
        lifecycle=SimpleNamespace(owed_notes_written=notes_written.wait),
        bus=EventBus(),
        vectors=None,
    )
    await _open_vectors(services)
    assert services.vectors is vectors
    for _ in range(20):  # turns of the loop: the spawned rebuild runs up to its wait
        await asyncio.sleep(0)
    assert not vectors.rebuilt.is_set()
    notes_written.set()
    await asyncio.wait_for(vectors.rebuilt.wait(), 30)


async def test_a_model_copied_in_after_the_start_is_loaded_by_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (session 39): started with ``embedding.model_path`` naming a folder
    that did not exist yet, the daemon never loaded the model copied there later (the
    first failure was final): search stayed keyword-only, with a log promising "until it
    loads", until a restart nothing said was needed."""
    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    folder = tmp_path / "model"
    config = AppConfig.model_validate(
        {"data_dir": str(tmp_path), "embedding": {"model_path": str(folder)}}
    )
    db = await open_index(tmp_path / "conversations.db")
    embedder = EmbeddingService(config.embedding, cache_dir=tmp_path / "models")
    search = SearchService(config, db, embedder)
    services: Any = SimpleNamespace(
        config=config, search=search, index_db=db, bus=EventBus(), lifecycle=None, vectors=None
    )
    try:
        await add_conversation(db, "conv-a", [("user", "Biscuit chewed my favourite slippers")])
        await add_conversation(db, "conv-b", [("user", "the boiler needs a new valve")])
        await _open_vectors(services)
        assert services.vectors is None and not search.hybrid
        assert await load_late_model(services, True) is None  # nothing there yet
        folder.mkdir()
        for source in model_path().iterdir():  # the owner copies the model in
            (folder / source.name).symlink_to(source)
        assert await load_late_model(services, False) is True  # (no download involved)
        assert search.hybrid and services.vectors is search.vectors
        for _ in range(3000):  # the rebuild a start with the model runs
            if not (search.vectors.rebuilding or search.vectors.stale):
                break
            await asyncio.sleep(0.01)
        page = await search.search("dog ruined shoes")
        assert page.method == "hybrid"
        assert [r.conversation_id for r in page.results][:1] == ["conv-a"]
        assert await load_late_model(services, True) is None  # loaded: nothing to do
    finally:
        embedder.close()
        await db.close()


async def test_a_page_says_search_by_meaning_is_incomplete_while_new_turns_wait(
    tmp_path: Path,
) -> None:
    # Regression (session 41): a message of a second ago was found by its words at once
    # but by meaning only once embedded (coalesced 0.2 s, then behind the model: 1-3 s),
    # and the page meanwhile did not carry ``vectors_incomplete``: VectorIndex.missing
    # did not count the turns waiting in the embedding queue.
    from bot.config.model import EmbeddingConfig
    from bot.daemon_vectors import _index_turns_in_background
    from tests.test_search_latency import DIMS, HashEmbedder

    db = await open_index(tmp_path / "conversations.db")
    embedder = HashEmbedder()
    try:
        await add_conversation(db, "conv-old", [("user", "the kayak trip on the lake")])
        config = AppConfig(embedding=EmbeddingConfig(dimensions=DIMS))
        service = SearchService(config, db, embedder)
        assert await service.start() and service.vectors is not None
        await service.vectors.reindex_all()
        page = await service.search("kayak")
        assert page.method == "hybrid" and not page.vectors_incomplete
        services: Any = SimpleNamespace(vectors=service.vectors, bus=EventBus())
        _index_turns_in_background(services)
        await add_conversation(db, "conv-new", [("user", "kayak rental by the river")])
        await services.bus.emit("turn_appended", conversation_id="conv-new")
        page = await service.search("kayak")
        assert "conv-new" in [r.conversation_id for r in page.results]  # by its words
        assert page.vectors_incomplete and page.to_dict()["vectors_incomplete"] is True
        # the reply to that message: its own turn waiting misses nothing it recalls
        assert not (await service.search("kayak", asked_in="conv-new")).vectors_incomplete
        for _ in range(500):  # the coalescing 0.2 s, then the embedding
            if not service.vectors.waiting():
                break
            await asyncio.sleep(0.01)
        assert not (await service.search("kayak")).vectors_incomplete
    finally:
        await db.close()
        embedder.close()
