"""VectorIndex: turn windows kept in step, abbreviations, staleness, bit-prefiltered KNN."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

import bot.embedding
from bot.config.model import AppConfig, EmbeddingConfig
from bot.embedding import EmbeddingService
from bot.vector_codec import BitMatrix, sign_bits
from bot.vectors import VectorIndex, window_text
from tests.recall_helpers import add_conversation, open_index, shared_dir


async def _append(db, conv_id: str, number: int, content: str) -> None:  # type: ignore[no-untyped-def]
    def _write(conn) -> None:  # type: ignore[no-untyped-def]
        ts = "2026-01-10T12:00:00+00:00"
        cur = conn.execute(
            "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp) "
            "VALUES (?, ?, 'user', ?, ?)",
            (conv_id, number, content, ts),
        )
        conn.execute(
            "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
            "VALUES (?, ?, ?, ?, ?)",
            (cur.lastrowid, content, conv_id, number, ts),
        )

    await db.run(_write)


def test_window_text_centre_first_and_bounded() -> None:
    turns = ["a" * 10, "b" * 10, "c" * 10, "d" * 10]
    assert window_text(turns, 1, 1) == "b" * 10 + "\n" + "a" * 10 + "\n" + "c" * 10
    assert window_text(turns, 0, 0) == "a" * 10
    long = ["x" * 1000, "y" * 1000, "z" * 1000]
    text = window_text(long, 1, 1)
    assert text.startswith("y" * 1000) and len(text) <= 1200


async def test_bit_shortlist_recall_on_real_sentences(embedder) -> None:  # type: ignore[no-untyped-def]
    """The sign-bit prefilter keeps the exact top 10 of real MiniLM vectors (measured on all
    LoCoMo turn windows: 99.6% at top 10 and 99.4% at top 100 with the 8x shortlist)."""
    data = json.loads((shared_dir() / "bench" / "locomo_dev.json").read_text())
    conv = data[0]["conversation"]
    texts = [
        f"{t['speaker']}: {t['text']}"
        for key in sorted(k for k in conv if k.startswith("session_") and k[8:].isdigit())
        for t in conv[key]
    ][:400]
    # Shortest first: a batch is padded to its longest text, and the dialogue's order
    # mixed one-word turns with long ones (35 s of CPU here, 20 s sorted). The same 400
    # vectors, only their row order differs, which no recall below depends on.
    texts.sort(key=len)
    questions = [q["question"] for q in data[0]["qa"][:20]]
    base = await embedder.embed(texts)
    queries = await embedder.embed(questions)
    matrix = BitMatrix(np.arange(len(base), dtype=np.int64), sign_bits(base))
    recalls = []
    for query in queries:
        shortlist = set(matrix.shortlist(sign_bits(query[None, :])[0], 80).tolist())
        exact = set(np.argsort(-(base @ query))[:10].tolist())
        recalls.append(len(exact & shortlist) / 10)
    assert float(np.mean(recalls)) >= 0.95


def test_bit_matrix_upsert_and_remove() -> None:
    m = BitMatrix.empty(6)
    bits = sign_bits(np.eye(3, 384, dtype=np.float32))
    m.upsert(np.array([1, 2, 3]), bits)
    m.upsert(np.array([2]), bits[:1])
    assert m.ids.tolist() == [1, 2, 3] and (m.bits[1] == bits[0]).all()
    m.remove({1, 3})
    assert m.ids.tolist() == [2]


async def test_windows_reembedded_when_neighbours_arrive(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "c.db")
    vectors = VectorIndex(AppConfig(), db, embedder)
    assert await vectors.open()
    await add_conversation(db, "conv-a", [("user", "first message about kayaks")])
    assert await vectors.index_turns("conv-a") == 1
    assert await vectors.index_turns("conv-a") == 0  # nothing new
    await _append(db, "conv-a", 2, "second message about paddles")
    # turn 1's window now has a right neighbour: both are (re)embedded
    assert await vectors.index_turns("conv-a") == 2
    await _append(db, "conv-a", 3, "third message about rivers")
    assert await vectors.index_turns("conv-a") == 2  # turn 2's window and turn 3
    count = await db.fetchone("SELECT count(*) FROM turns_vec")
    assert count == (3,)
    await db.close()


async def test_readouts_are_neither_embedded_nor_in_windows(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """A readout (``turns.recall = 0``, bot.transcript_lines.recallable) gets no vector and is
    no neighbour in a window; one embedded before migration 5 is pruned at reindex."""
    db = await open_index(tmp_path / "c.db")
    vectors = VectorIndex(AppConfig(), db, embedder)
    assert await vectors.open()
    ids = await add_conversation(
        db,
        "conv-a",
        [("user", "where are the kayaks"), ("assistant", "offline listing"), ("user", "ok")],
    )
    assert await vectors.index_turns("conv-a") == 3
    # what migration 5 does to a conversation embedded before it
    await db.execute("UPDATE turns SET recall = 0 WHERE id = ?", (ids[1],))
    await db.execute("DELETE FROM turn_vectors WHERE conversation_id = 'conv-a'")
    await vectors.reindex_all()
    rows = await db.fetchall("SELECT turn_id, window_last FROM turn_vectors ORDER BY turn_id")
    assert [r[0] for r in rows] == [ids[0], ids[2]]  # no vector for the readout
    assert rows[0][1] == ids[2]  # turn 1's window reaches turn 3, past the readout
    assert await db.fetchone("SELECT count(*) FROM turns_vec") == (2,)  # pruned
    await add_conversation(db, "conv-b", [("user", "kayak rental prices")])
    ids_b = await db.fetchall("SELECT id FROM turns WHERE conversation_id = 'conv-b'")
    assert await vectors.index_turns("conv-b") == 1
    await db.execute(
        "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp, recall) "
        "VALUES ('conv-b', 1, 'assistant', 'offline listing', '2026-01-10T12:00:00Z', 0)"
    )
    assert await vectors.index_turns("conv-b") == 0  # the window did not change
    row = await db.fetchone("SELECT window_last FROM turn_vectors WHERE turn_id = ?", ids_b[0])
    assert row == ids_b[0]
    await db.close()


async def test_abbreviation_vectors_and_knn(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "c.db")
    vectors = VectorIndex(AppConfig(), db, embedder)
    assert await vectors.open()
    await add_conversation(db, "conv-a", [("user", "kayak trip planning")])
    await add_conversation(db, "conv-b", [("user", "tax return deadline")])
    assert await vectors.index_abbreviation("conv-a", "Planning a kayak trip on the river.")
    assert not await vectors.index_abbreviation("conv-a", "Planning a kayak trip on the river.")
    assert await vectors.index_abbreviation("conv-b", "Filing the tax return before April.")
    query = await embedder.embed_one("paddling holiday")
    top = await vectors.knn_abbreviations(query, 1)
    assert list(top) == ["conv-a"]
    await vectors.index_abbreviation("conv-a", "")  # cleared abbreviation: vector removed
    assert list(await vectors.knn_abbreviations(query, 5)) == ["conv-b"]
    await db.close()


async def test_model_change_marks_vectors_stale_and_rebuilds(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "c.db")
    vectors = VectorIndex(AppConfig(), db, embedder)
    assert await vectors.open() and not vectors.stale
    await add_conversation(db, "conv-a", [("user", "one"), ("user", "two")], abbreviation="notes")
    await vectors.index_turns("conv-a")
    await db.execute(
        "UPDATE index_meta SET value = 'another-model@384' WHERE key = 'embedding_model'"
    )
    reopened = VectorIndex(AppConfig(), db, embedder)
    assert await reopened.open()
    assert reopened.stale
    assert await db.fetchone("SELECT count(*) FROM turn_vectors") == (0,)
    done = await reopened.reindex_all()
    # soft coverage on (the default): the content words too ("one" is a stop word)
    assert done == {"turns": 2, "abbreviations": 1, "terms": 1}
    assert reopened.terms_ready
    assert not reopened.stale
    meta = await db.fetchone("SELECT value FROM index_meta WHERE key = 'embedding_model'")
    assert meta == (embedder.model_id,)
    await db.close()


async def test_another_model_under_the_same_name_marks_vectors_stale(  # type: ignore[no-untyped-def]
    tmp_path: Path,
    embedder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Regression: the vector space was named by embedding.model_name and the dimension
    # count only, so pointing embedding.model_path (or MY_AGENT_EMBEDDING_MODEL_PATH) at
    # another 384-dimension model kept every old vector, and search compared the new
    # model's queries with the old model's turns without a word.
    db = await open_index(tmp_path / "c.db")
    load = bot.embedding._without_spinning

    def another_model(factory, kwargs):  # type: ignore[no-untyped-def]
        model = load(factory, kwargs)

        class Other:  # same name, same dimensions, another vector space
            def embed(self, texts, **options):  # type: ignore[no-untyped-def]
                for vector in model.embed(texts, **options):
                    yield np.roll(vector, 7)

        return Other()

    same = EmbeddingService(EmbeddingConfig(model_path=embedder.model_path))
    other = EmbeddingService(EmbeddingConfig(model_path=embedder.model_path))
    try:
        vectors = VectorIndex(AppConfig(), db, embedder)
        assert await vectors.open()
        await add_conversation(
            db, "conv-a", [("user", "one"), ("user", "two")], abbreviation="notes"
        )
        await vectors.index_turns("conv-a")
        # (its notes too: a note without its vector is incomplete, stale as well)
        await vectors.index_abbreviation("conv-a", "notes")
        reopened = VectorIndex(AppConfig(), db, same)
        assert await reopened.open() and not reopened.stale  # the same model: nothing to redo
        monkeypatch.setattr(bot.embedding, "_without_spinning", another_model)
        assert other.model_id == embedder.model_id
        switched = VectorIndex(AppConfig(), db, other)
        with caplog.at_level(logging.WARNING, logger="my_agent.vectors"):
            assert await switched.open()
        assert switched.stale
        assert "another one under the same name" in caplog.text
        assert await db.fetchone("SELECT count(*) FROM turn_vectors") == (0,)
        done = await switched.reindex_all()
        assert done["turns"] == 2 and done["abbreviations"] == 1
        again = VectorIndex(AppConfig(), db, other)
        assert await again.open() and not again.stale
    finally:
        same.close()
        other.close()
        await db.close()


async def test_reindex_prunes_vectors_of_deleted_turns(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "c.db")
    vectors = VectorIndex(AppConfig(), db, embedder)
    await vectors.open()
    await add_conversation(db, "conv-a", [("user", "keep me"), ("user", "drop me")])
    await vectors.index_turns("conv-a")
    await db.execute("DELETE FROM turns WHERE turn_number = 2")
    await vectors.reindex_all()
    assert await db.fetchone("SELECT count(*) FROM turns_vec") == (1,)
    query = await embedder.embed_one("drop me")
    assert len(await vectors.knn_turns(query, 5)) == 1
    await db.close()


async def test_a_failing_conversation_does_not_end_the_rebuild(  # type: ignore[no-untyped-def]
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: one embedding error (onnxruntime on one odd text, out of memory for a
    # moment) raised out of reindex_all, so the daemon's background rebuild after a model
    # change stopped there and every conversation after it kept no vector until a restart.
    db = await open_index(tmp_path / "c.db")
    try:
        for name in ("a", "b", "c"):
            text = "broken text" if name == "b" else f"turn of {name}"
            await add_conversation(
                db,
                f"conv-{name}",
                [("user", text)],
            )
        vectors = VectorIndex(AppConfig(), db, embedder)
        assert await vectors.open() and vectors.stale  # turns indexed before any vector
        working = embedder.embed_sync

        def flaky(texts: list[str]):  # type: ignore[no-untyped-def]
            if any("broken" in t for t in texts):
                raise RuntimeError("onnxruntime: failed to allocate memory")
            return working(texts)

        monkeypatch.setattr(embedder, "embed_sync", flaky)
        done = await vectors.reindex_all()
        assert done["turns"] == 2  # conv-a and conv-c, whatever the order
        assert vectors.stale  # not complete: the next rebuild finishes it
        monkeypatch.setattr(embedder, "embed_sync", working)
        done = await vectors.reindex_all()
        assert done["turns"] == 1 and not vectors.stale
    finally:
        await db.close()


async def test_first_build_is_info_and_the_count_said_once(  # type: ignore[no-untyped-def]
    tmp_path: Path, embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a new owner's first start with a model (turns indexed while the model
    loaded) logged WARNING "vectors are stale or incomplete (... term vectors missing)",
    and every start said "loaded N turn vectors" twice (open, then the rebuild after it).
    A WARNING is kept for vectors really dropped: another model."""
    db = await open_index(tmp_path / "c.db")
    try:
        await add_conversation(db, "conv-a", [("user", "the boiler needs a plumber")])
        vectors = VectorIndex(AppConfig(), db, embedder)
        with caplog.at_level(logging.DEBUG, logger="my_agent.vectors"):
            assert await vectors.open() and vectors.stale
            await vectors.reindex_all()
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert not warnings, [r.getMessage() for r in warnings]
        infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert any(m.startswith("building vectors in the background") for m in infos)
        assert sum(m.startswith("loaded ") for m in infos) == 1, infos
        caplog.clear()
        await db.execute(
            "UPDATE index_meta SET value = 'another-model@384' WHERE key = 'embedding_model'"
        )
        with caplog.at_level(logging.INFO, logger="my_agent.vectors"):
            assert await VectorIndex(AppConfig(), db, embedder).open()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "another-model@384" in warnings[0], warnings
    finally:
        await db.close()


async def test_a_dimension_count_the_model_overrides_leaves_hybrid_search_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: with ``embedding.dimensions: 512`` and the 384 of MiniLM, the embedder
    took the model's count ("using the model's"), but the term-vector cache made before
    the load kept 512: every hybrid search raised "buffer is smaller than requested
    size" (the offline brain's recall was "unavailable", `my-agent search` exited 64
    blaming --cursor)."""
    from bot.search import SearchService
    from tests.recall_helpers import model_path

    service = EmbeddingService(EmbeddingConfig(model_path=str(model_path()), dimensions=512))
    db = await open_index(tmp_path / "c.db")
    try:
        search = SearchService(AppConfig(data_dir=tmp_path), db, service)
        with caplog.at_level(logging.WARNING, logger="my_agent.embedding"):
            assert await search.start()
        assert "embedding.dimensions says 512" in caplog.text
        await add_conversation(db, "conv-a", [("user", "the heat pump clicks at night")])
        await add_conversation(db, "conv-b", [("user", "tomatoes need staking")])
        assert search.vectors is not None
        for conv_id in ("conv-a", "conv-b"):
            await search.vectors.index_turns(conv_id)
        page = await search.search("noisy heating at night")
        assert page.method == "hybrid"
        assert page.results[0].conversation_id == "conv-a"
    finally:
        await db.close()
        service.close()
