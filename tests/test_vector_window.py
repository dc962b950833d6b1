"""Another ``embedding.turn_window`` drops the stored turn windows and rebuilds them at
the new size in the background, as another model does every vector; the notes' vectors
and the word vectors of soft coverage, which do not depend on it, are kept.

Regression (session 42): the size was recorded nowhere, so a change was never noticed:
the windows kept their old size (a conversation's last ones for good, ``window_last``
being compared as if the size were the same) and ``/status`` named no cause."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from bot.command_status import search_line
from bot.config.model import AppConfig
from bot.db import Database
from bot.vector_store import WINDOW_KEY
from bot.vectors import VectorIndex, window_text
from tests.recall_helpers import add_conversation, open_index
from tests.test_vector_rebuild import RecordingEmbedder

TURNS = [
    ("user", "the kayak trip on the lake"),
    ("assistant", "noted: Saturday at nine"),
    ("user", "bring the paddles and the spare rope"),
    ("assistant", "and the dry bags for the phones"),
]
NOTES = "Kayak trip: the lake, Saturday at nine."


def _config(radius: int) -> AppConfig:
    # (soft coverage on: the word vectors are seen to be kept as well)
    return AppConfig.model_validate({"embedding": {"turn_window": radius}})


async def _stored(db: Database) -> tuple[dict[int, int], list[bytes], int]:
    """The windows' ``window_last`` by turn id, the notes' vectors, the word count."""
    windows = dict(await db.fetchall("SELECT turn_id, window_last FROM turn_vectors"))
    notes = [bytes(r[0]) for r in await db.fetchall("SELECT vector FROM abbreviation_vectors")]
    (words,) = await db.fetchone("SELECT count(*) FROM term_vectors")
    return windows, notes, int(words)


async def _built(db: Database, embedder: RecordingEmbedder, radius: int) -> list[int]:
    """A conversation (with notes) whose every vector is embedded at ``radius``."""
    ids = await add_conversation(db, "conv-a", TURNS, abbreviation=NOTES)
    first = VectorIndex(_config(radius), db, embedder)
    assert await first.open()
    done = await first.reindex_all()
    assert done["turns"] == len(TURNS) and done["abbreviations"] == 1
    return ids


async def _recorded(db: Database) -> str | None:
    """The window size the store records."""
    row = await db.fetchone("SELECT value FROM index_meta WHERE key = ?", (WINDOW_KEY,))
    return None if row is None else str(row[0])


def _embedded(embedder: RecordingEmbedder) -> list[str]:
    return [text for _, texts in embedder.batches for text in texts]


async def test_another_turn_window_rebuilds_the_windows_alone(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        ids = await _built(db, embedder, radius=1)
        _, notes, words = await _stored(db)
        assert notes and words
        embedder.batches.clear()

        wider = VectorIndex(_config(2), db, embedder)
        assert await wider.open()
        assert wider.stale and wider.missing
        assert wider.dropped == "embedding.turn_window changed from 1 to 2"
        assert await db.fetchone("SELECT count(*) FROM turn_vectors") == (0,)
        assert await db.fetchone("SELECT count(*) FROM turns_vec") == (0,)
        # /status names the cause of the rebuild
        services = SimpleNamespace(vectors=wider, vector_search_available=lambda: True)
        assert search_line(services).endswith(  # type: ignore[arg-type]
            "(embedding.turn_window changed from 1 to 2)"
        )
        # the notes' vectors and the word vectors are kept as they were
        assert (await _stored(db))[1:] == (notes, words)

        done = await wider.reindex_all()
        assert done == {"turns": len(TURNS), "abbreviations": 0, "terms": 0}
        contents = [content for _, content in TURNS]
        assert sorted(_embedded(embedder)) == sorted(
            window_text(contents, at, 2) for at in range(len(TURNS))
        )
        windows, kept_notes, kept_words = await _stored(db)
        # each window saw two turns on either side (the last turn at most)
        assert windows == {turn: ids[min(at + 2, len(ids) - 1)] for at, turn in enumerate(ids)}
        assert (kept_notes, kept_words) == (notes, words)
        assert not wider.stale and not wider.missing
        assert await _recorded(db) == "2"
    finally:
        embedder.close()
        await db.close()


async def test_the_same_turn_window_rebuilds_nothing(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        await _built(db, embedder, radius=2)
        before = await _stored(db)
        embedder.batches.clear()
        again = VectorIndex(_config(2), db, embedder)
        assert await again.open()
        assert not again.stale and not again.missing and again.dropped is None
        assert await again.reindex_all() == {"turns": 0, "abbreviations": 0, "terms": 0}
        assert embedder.batches == []
        assert await _stored(db) == before
    finally:
        embedder.close()
        await db.close()


async def test_a_store_without_the_record_is_taken_as_the_configured_size(
    tmp_path: Path,
) -> None:
    """A store embedded before session 42 records no size: each start's rebuild had
    re-embedded every window whose ``window_last`` disagreed with the configured size,
    so it is taken as that one (recorded, nothing dropped)."""
    db = await open_index(tmp_path / "c.db")
    embedder = RecordingEmbedder()
    try:
        await _built(db, embedder, radius=2)
        await db.execute("DELETE FROM index_meta WHERE key = ?", (WINDOW_KEY,))
        before = await _stored(db)
        embedder.batches.clear()
        again = VectorIndex(_config(2), db, embedder)
        assert await again.open()
        assert not again.stale and again.dropped is None
        assert await again.reindex_all() == {"turns": 0, "abbreviations": 0, "terms": 0}
        assert await _stored(db) == before
        assert await _recorded(db) == "2"
    finally:
        embedder.close()
        await db.close()
