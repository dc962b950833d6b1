"""The vector rebuild gives way to live work: it waits for what comes first, embeds in
the background (live embeddings first) and a slice of a conversation at a time, and
says how far it is."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bot.command_status import search_line, vector_rebuild_state
from bot.config.model import AppConfig, EmbeddingConfig
from bot.embedding import EmbeddingService
from bot.embedding_priority import BACKGROUND_BATCH, embedding_in_background, in_background
from bot.vector_knn import VectorMatrices
from bot.vector_rebuild import REBUILD_SLICE, RebuildProgress
from bot.vectors import VectorIndex
from tests.recall_helpers import add_conversation, open_index

DIMS = 16
WAIT = 30.0  # generous: the machine may be loaded; nothing here waits unless broken


class _Model:
    def embed(self, texts: list[str], batch_size: int = 32) -> Any:
        for text in texts:
            vector = np.ones(DIMS, dtype=np.float32)
            vector[len(text) % DIMS] += 1.0
            yield vector / np.linalg.norm(vector)


class RecordingEmbedder(EmbeddingService):
    """The real service (worker thread, batches, priority) around a stand-in model that
    records each batch (``("live" | "background", texts)``) and can hold one."""

    def __init__(self, batch_size: int = 32) -> None:
        super().__init__(EmbeddingConfig(dimensions=DIMS, batch_size=batch_size))
        self.batches: list[tuple[str, list[str]]] = []
        self.hold_next_background = False
        self.hold_prefix = "background"  # the texts a held batch starts with
        self.held = threading.Event()  # a held batch has reached the worker
        self.release = threading.Event()

    def _load(self) -> Any:
        return _Model()

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if self.hold_next_background and texts and texts[0].startswith(self.hold_prefix):
            self.hold_next_background = False
            self.held.set()
            assert self.release.wait(WAIT)
        return super().embed_sync(texts)

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.batches.append(("background" if embedding_in_background() else "live", texts))
        return await super().embed(texts)


async def test_background_batches_wait_for_live_embeddings() -> None:
    """A live embedding's batches are not interleaved with a background one's: without
    the priority, the rebuild's batch queued on the worker between a search's."""
    order: list[str] = []
    started, release = threading.Event(), threading.Event()
    service = EmbeddingService(EmbeddingConfig(batch_size=1, dimensions=DIMS))
    service._load = _Model  # type: ignore[method-assign]
    plain = service.embed_sync

    def recording(texts: list[str]) -> np.ndarray:
        order.extend(texts)
        if texts == ["live-1"]:
            started.set()
            assert release.wait(WAIT)
        return plain(texts)

    service.embed_sync = recording  # type: ignore[method-assign]

    async def background() -> None:
        with in_background():
            await service.embed([f"bg-{i}" for i in range(BACKGROUND_BATCH + 1)])

    try:
        live = asyncio.ensure_future(service.embed(["live-1", "live-2", "live-3"]))
        assert await asyncio.to_thread(started.wait, WAIT)
        rebuild = asyncio.ensure_future(background())
        for _ in range(20):  # turns of the loop: the background task reaches its wait
            await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(asyncio.gather(live, rebuild), WAIT)
    finally:
        release.set()
        service.close()
    assert order[:3] == ["live-1", "live-2", "live-3"], order
    assert len(order) == 3 + BACKGROUND_BATCH + 1


async def test_background_batches_are_small() -> None:
    service = RecordingEmbedder()
    sizes: list[int] = []
    plain = service.embed_sync
    service.embed_sync = lambda texts: (sizes.append(len(texts)), plain(texts))[1]  # type: ignore[method-assign]
    try:
        with in_background():
            await service.embed(["t"] * (2 * BACKGROUND_BATCH + 1))
        await service.embed(["t"] * (2 * BACKGROUND_BATCH + 1))  # live: embedding.batch_size
    finally:
        service.close()
    assert sizes == [BACKGROUND_BATCH, BACKGROUND_BATCH, 1, 2 * BACKGROUND_BATCH + 1]


def _config() -> AppConfig:
    return AppConfig.model_validate({"search": {"soft_coverage": False}})


async def test_a_reply_waits_for_one_slice_of_the_rebuild_not_a_whole_conversation(
    tmp_path: Path,
) -> None:
    """Regression: the rebuild embedded a conversation's every window under the index's
    lock: a reply's own windows (and so its turn's vector) waited behind all of them."""
    long_turns = 3 * REBUILD_SLICE + 2
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        await add_conversation(
            db, "conv-long", [("user", f"background turn {i}") for i in range(long_turns)]
        )
        vectors = VectorIndex(_config(), db, embedder)
        assert await vectors.open() and vectors.stale
        embedder.hold_next_background = True
        rebuild = asyncio.ensure_future(vectors.reindex_all())
        assert await asyncio.to_thread(embedder.held.wait, WAIT)
        # a reply lands in another conversation while the rebuild's first batch runs
        await add_conversation(db, "conv-live", [("user", "live turn")], at="2026-01-11T09:00:00Z")
        reply = asyncio.ensure_future(vectors.index_turns("conv-live"))
        for _ in range(20):  # turns of the loop: the reply waits for the index's lock
            await asyncio.sleep(0)
        embedder.release.set()
        assert await asyncio.wait_for(reply, WAIT) == 1
        before_reply = sum(
            len(texts)
            for kind, texts in embedder.batches[: embedder.batches.index(("live", ["live turn"]))]
            if kind == "background"
        )
        assert before_reply <= REBUILD_SLICE, embedder.batches
        done = await asyncio.wait_for(rebuild, WAIT)
        assert done["turns"] == long_turns
    finally:
        embedder.release.set()
        embedder.close()
        await db.close()


async def test_the_rebuild_waits_for_what_comes_first_and_says_how_far(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        for name in ("a", "b"):
            await add_conversation(db, f"conv-{name}", [("user", f"turn of {name}")])
        vectors = VectorIndex(_config(), db, embedder)
        assert await vectors.open() and vectors.stale
        notes = asyncio.Event()
        services = SimpleNamespace(vectors=vectors, vector_search_available=lambda: True)
        assert vector_rebuild_state(services) == "embedding the vectors still missing"
        rebuild = asyncio.ensure_future(vectors.reindex_all(after=notes.wait()))
        for _ in range(20):
            await asyncio.sleep(0)
        assert vectors.rebuilding and vectors.progress == RebuildProgress(waiting=True)
        assert vector_rebuild_state(services) == (
            "embedding the vectors still missing, after the notes owed"
        )
        # the sweep's retry does not overtake the rebuild waiting for the notes
        assert await vectors.retry_unfinished() is None
        assert embedder.batches == []
        notes.set()
        assert (await asyncio.wait_for(rebuild, WAIT))["turns"] == 2
        assert not vectors.rebuilding and vectors.progress is None and not vectors.stale
        assert vector_rebuild_state(services) is None
    finally:
        embedder.close()
        await db.close()


def test_the_status_says_how_far_the_rebuild_is() -> None:
    vectors = SimpleNamespace(
        rebuilding=True,
        stale=True,
        missing=True,
        progress=RebuildProgress(done=120, total=800, windows=3400),
    )
    services = SimpleNamespace(vectors=vectors, vector_search_available=lambda: True)
    # Regression: "120 of 800 conversations" did not say which were done
    state = (
        "embedding the vectors still missing: 120 of 800 conversations done, "
        "3400 turn windows embedded so far"
    )
    assert vector_rebuild_state(services) == state
    assert search_line(services) == (  # type: ignore[arg-type]
        f"Search: hybrid (keyword + vectors), {state} "
        "(turns written before the model loaded, or while it was unavailable)"
    )
    vectors.dropped = "the model changed from old-model@384"  # this start dropped them
    assert search_line(services).endswith(f"{state} (the model changed from old-model@384)")  # type: ignore[arg-type]
    vectors.dropped = None
    vectors.progress = None  # a retry of what a failed pass left: no cause named
    assert search_line(services) == (  # type: ignore[arg-type]
        "Search: hybrid (keyword + vectors), embedding the vectors still missing"
    )


async def test_the_status_names_a_new_model_only_when_the_start_dropped_the_vectors(
    tmp_path: Path,
) -> None:
    """Regression (session 41): after an ordinary restart (same model) whose only
    missing vectors were of turns that came while the model loaded, /status said
    "... (a new model, or turns added offline)": neither was true."""
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        await add_conversation(db, "conv-a", [("user", "turn of a")])
        first = VectorIndex(_config(), db, embedder)
        assert await first.open()
        assert (await first.reindex_all())["turns"] == 1
        # turns that came while the next start's model loaded: no vector yet
        await add_conversation(db, "conv-b", [("user", "background turn of b")])

        async def status_while_rebuilding(vectors: VectorIndex) -> str:
            assert await vectors.open() and vectors.missing
            services = SimpleNamespace(vectors=vectors, vector_search_available=lambda: True)
            embedder.hold_next_background = True
            rebuild = asyncio.ensure_future(vectors.reindex_all())
            assert await asyncio.to_thread(embedder.held.wait, WAIT)
            line = search_line(services)  # type: ignore[arg-type]
            embedder.held.clear()
            embedder.release.set()
            await asyncio.wait_for(rebuild, WAIT)
            embedder.release.clear()
            return line

        line = await status_while_rebuilding(VectorIndex(_config(), db, embedder))
        assert "model changed" not in line and "offline" not in line
        assert line.endswith("(turns written before the model loaded, or while it was unavailable)")
        # a new model drops every vector: that cause is named
        before = embedder.model_id
        embedder.close()
        embedder = RecordingEmbedder()
        embedder.config.model_name = "another-model"
        line = await status_while_rebuilding(VectorIndex(_config(), db, embedder))
        assert line.endswith(f"(the model changed from {before})")
    finally:
        embedder.close()
        await db.close()


async def test_a_rebuild_that_only_completes_the_word_vectors_says_so(tmp_path: Path) -> None:
    """Regression: with every turn and note vector in place, the rebuild that completes
    the word vectors (soft coverage switched on) was reported as "embedding the vectors
    still missing (a new model, or turns added offline)", and so was the check every
    start runs with nothing to do."""
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        for name in ("a", "b"):
            await add_conversation(db, f"conv-{name}", [("user", f"turn of {name}")])
        first = VectorIndex(_config(), db, embedder)  # soft coverage off: no word vectors
        assert await first.open()
        assert (await first.reindex_all())["turns"] == 2
        words_on = AppConfig.model_validate({"search": {"soft_coverage": True}})
        vectors = VectorIndex(words_on, db, embedder)
        assert await vectors.open()
        assert vectors.stale and not vectors.missing and not vectors.terms_ready
        services = SimpleNamespace(vectors=vectors, vector_search_available=lambda: True)
        assert vector_rebuild_state(services) is None  # nothing runs yet, nothing missing
        embedder.hold_next_background = True
        embedder.hold_prefix = ""  # the word vectors' first batch
        rebuild = asyncio.ensure_future(vectors.reindex_all())
        assert await asyncio.to_thread(embedder.held.wait, WAIT)
        assert vector_rebuild_state(services) == "completing the word vectors of the ranking"
        assert search_line(services) == (  # type: ignore[arg-type]
            "Search: hybrid (keyword + vectors), completing the word vectors of the ranking"
        )
        embedder.release.set()
        done = await asyncio.wait_for(rebuild, WAIT)
        assert done["turns"] == 0 and done["terms"] > 0
        assert vectors.terms_ready and vector_rebuild_state(services) is None
        # the next start's check, nothing to do: it says nothing while it runs
        again = VectorIndex(words_on, db, embedder)
        assert await again.open() and not again.stale
        services.vectors = again
        checking = asyncio.ensure_future(again.reindex_all())
        await asyncio.sleep(0)
        assert again.rebuilding and vector_rebuild_state(services) is None
        await asyncio.wait_for(checking, WAIT)
    finally:
        embedder.release.set()
        embedder.close()
        await db.close()


@pytest.mark.parametrize("kind", ["turn", "note"])
async def test_a_vector_embedded_as_a_rebuild_ends_stays_in_the_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Regression (session 39): the rebuild every start runs ended by reading the
    in-memory KNN matrix again, outside the index's lock. A message embedded meanwhile (the
    backlog delivered at start) went into the old matrix only: its vector was stored but
    search by meaning never shortlisted it until a restart. The same for a note's vector.

    The interleaving of the old code is forced: the message's embedding is held until the
    reload has read the table, and the reload waits for the message to be stored."""
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        await add_conversation(db, "conv-a", [("user", f"old turn {i}") for i in range(3)])
        vectors = VectorIndex(_config(), db, embedder)
        assert await vectors.open()
        await vectors.reindex_all()  # every vector made: what a start finds

        stored = threading.Event()
        original_read = VectorMatrices.read.__func__  # type: ignore[attr-defined]

        def read_then_wait(cls: type[VectorMatrices], conn: Any, dims: int) -> VectorMatrices:
            matrices = original_read(cls, conn, dims)
            embedder.release.set()  # the message goes on, into the matrix in place
            assert stored.wait(WAIT)
            return matrices

        monkeypatch.setattr(VectorMatrices, "read", classmethod(read_then_wait))

        async def message() -> None:
            if kind == "turn":
                await vectors.index_turns("conv-b")
            else:
                await vectors.index_abbreviation("conv-b", "a brand new note about kayaks")

        live: list[asyncio.Task[None]] = []
        original_prune = vectors._prune

        async def prune_then_a_message() -> None:
            await original_prune()
            # a message arrives as the rebuild ends, its embedding under way
            await add_conversation(db, "conv-b", [("user", "a brand new turn about kayaks")])
            embedder.hold_next_background = True
            embedder.hold_prefix = "a brand new"
            task = asyncio.ensure_future(message())
            task.add_done_callback(lambda _: stored.set())
            live.append(task)
            assert await asyncio.to_thread(embedder.held.wait, WAIT)

        monkeypatch.setattr(vectors, "_prune", prune_then_a_message)
        await asyncio.wait_for(vectors.reindex_all(), WAIT)
        embedder.release.set()
        await asyncio.wait_for(live[0], WAIT)

        if kind == "note":
            note = await embedder.embed_one("a brand new note about kayaks")
            assert "conv-b" in await vectors.knn_abbreviations(note, 10)
            return
        (turn_id,) = [
            r[0]
            for r in await db.fetchall(
                "SELECT turn_id FROM turn_vectors WHERE conversation_id = 'conv-b'"
            )
        ]
        query = await embedder.embed_one("a brand new turn about kayaks")
        assert turn_id in await vectors.knn_turns(query, 10)
    finally:
        embedder.release.set()
        embedder.close()
        await db.close()
