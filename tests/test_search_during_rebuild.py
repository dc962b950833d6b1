"""Search while the vectors are rebuilt after a model change (the real local MiniLM):
the conversations not re-embedded yet are found by their words only, and every door
says so. Before, the page said "hybrid" as with complete vectors: a paraphrase found
nothing, and the recall tool's empty list read as "never talked about it"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bot.brain.base import BrainRequest
from bot.brain.offline import PARTIAL, OfflineBrain
from bot.brain.recall_search import ConversationSearch
from bot.command_search import search_answer
from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.search import SearchService
from bot.search.results import REBUILDING, VECTORS_MISSING
from bot.term_vectors import META_KEY as TERMS_KEY
from bot.vector_store import META_KEY
from tests.recall_helpers import add_conversation, open_index
from tests.support import inbound
from tests.test_search_hybrid import CONVERSATIONS

PARAPHRASE = "vehicle squealing sound when slowing down"  # conv-car, no shared keyword


@pytest.fixture
async def rebuilding(
    tmp_path: Path, embedder: EmbeddingService
) -> AsyncIterator[tuple[SearchService, asyncio.Event, asyncio.Task[Any]]]:
    """A store embedded by "another model" reopened with MiniLM: every vector dropped,
    the rebuild started and held until the event is set."""
    config = AppConfig(data_dir=tmp_path)
    db = await open_index(tmp_path / "conversations.db")
    for conv_id, (turns, abbreviation) in CONVERSATIONS.items():
        await add_conversation(db, conv_id, turns, abbreviation=abbreviation)
    await db.run(
        lambda c: c.execute(
            "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, 'old/model@384')",
            (META_KEY,),
        )
    )
    service = SearchService(config, db, embedder)
    assert await service.start()
    assert service.vectors is not None and service.vectors.stale
    held = asyncio.Event()
    rebuild = asyncio.create_task(service.vectors.reindex_all(after=held.wait()))
    yield service, held, rebuild
    held.set()
    await rebuild
    await db.close()


async def test_every_door_says_search_by_meaning_is_incomplete(rebuilding: Any) -> None:
    service, held, rebuild = rebuilding
    page = await service.search(PARAPHRASE)
    assert page.results == [] and page.method == "hybrid"
    assert page.vectors_incomplete and page.to_dict()["vectors_incomplete"] is True
    assert page.vectors_rebuilding and page.to_dict()["vectors_rebuilding"] is True
    # the recall tool: not an empty list the model reads as "never came up"
    tool = ConversationSearch(service.config, SimpleNamespace(search=service))
    wrapped = await tool.run({"query": PARAPHRASE})
    found = json.loads(wrapped[wrapped.index("{") : wrapped.rindex("}") + 1])
    assert found["results"] == [] and found["searchMode"] == "partial"
    assert "rebuilt" in found["note"] and "other words" in found["note"]
    # /search
    services: Any = SimpleNamespace(config=service.config, search=service)
    answer = await search_answer(services, PARAPHRASE, inbound("/search"), None)
    assert answer.text.startswith("No conversations match")
    assert "being rebuilt" in answer.text and "other words" in answer.text
    # the offline brain's recall
    request = BrainRequest(profile="owner", channel="web", text=PARAPHRASE, model_alias="")
    reply = (await OfflineBrain(service).reply(request)).text.splitlines()
    assert reply[1] == f"Nothing related turned up in past conversations. ({PARTIAL})"
    # once rebuilt: found by meaning, no longer said to be incomplete
    held.set()
    await rebuild
    page = await service.search(PARAPHRASE)
    assert not page.vectors_incomplete and "vectors_incomplete" not in page.to_dict()
    assert page.results[0].conversation_id == "conv-car"


async def _every_vector_made(
    tmp_path: Path, embedder: EmbeddingService
) -> tuple[AppConfig, Any, SearchService]:
    """An index of :data:`CONVERSATIONS` whose turns and notes all have their vectors."""
    config = AppConfig(data_dir=tmp_path)
    db = await open_index(tmp_path / "conversations.db")
    for conv_id, (turns, abbreviation) in CONVERSATIONS.items():
        await add_conversation(db, conv_id, turns, abbreviation=abbreviation)
    service = SearchService(config, db, embedder)
    assert await service.start() and service.vectors is not None
    await service.vectors.reindex_all()
    return config, db, service


async def test_a_rebuild_with_every_vector_made_is_not_said_incomplete(
    tmp_path: Path, embedder: EmbeddingService
) -> None:
    # Regression: the daemon runs a rebuild at every start (it embeds what is missing,
    # after the notes owed), and while it waited every search said "search by meaning
    # is being rebuilt for a new model", with every vector made.
    _, db, service = await _every_vector_made(tmp_path, embedder)
    assert service.vectors is not None and not service.vectors.stale
    held = asyncio.Event()
    rebuild = asyncio.create_task(service.vectors.reindex_all(after=held.wait()))
    try:
        await asyncio.sleep(0)
        assert service.vectors.rebuilding
        page = await service.search(PARAPHRASE)
        assert not page.vectors_incomplete and page.results[0].conversation_id == "conv-car"
    finally:
        held.set()
        await rebuild
        await db.close()


async def test_completing_only_the_word_vectors_is_not_said_incomplete(
    tmp_path: Path, embedder: EmbeddingService
) -> None:
    # Regression: with every turn and note embedded, a daemon whose word vectors (soft
    # coverage's ranking features) were incomplete (an index from before their table, a
    # stop before its rebuild reached them) said at every search "search by meaning is
    # being rebuilt", though no conversation was missed by meaning.
    config, db, _ = await _every_vector_made(tmp_path, embedder)
    await db.run(lambda c: c.execute("DELETE FROM index_meta WHERE key = ?", (TERMS_KEY,)))
    service = SearchService(config, db, embedder)
    assert await service.start() and service.vectors is not None
    # a rebuild is owed (the word vectors), nothing that search by meaning reads is missing
    assert service.vectors.stale and not service.vectors.terms_ready
    held = asyncio.Event()
    rebuild = asyncio.create_task(service.vectors.reindex_all(after=held.wait()))
    try:
        await asyncio.sleep(0)
        assert service.vectors.rebuilding
        page = await service.search(PARAPHRASE)
        assert not page.vectors_incomplete and not page.vectors_rebuilding
        assert "vectors_incomplete" not in page.to_dict()
        assert page.results[0].conversation_id == "conv-car"
    finally:
        held.set()
        await rebuild
    assert service.vectors.terms_ready and not service.vectors.stale
    await db.close()


async def test_vectors_missing_at_open_are_said_incomplete(
    tmp_path: Path, embedder: EmbeddingService
) -> None:
    # Turns indexed while keyword-only (the model did not load for a while) have no
    # vector: the page says so until they are embedded, not only when the model changed.
    config, db, _ = await _every_vector_made(tmp_path, embedder)
    await add_conversation(db, "conv-later", [("user", "The brakes squeal again on the bike")])
    service = SearchService(config, db, embedder)
    try:
        assert await service.start()
        page = await service.search(PARAPHRASE)
        assert page.vectors_incomplete and not page.vectors_rebuilding
        services: Any = SimpleNamespace(config=config, search=service)
        # (on the web only: an empty page, which needs no conversation record)
        answer = await search_answer(
            services, f"{PARAPHRASE} channel:telegram", inbound("/search"), None
        )
        assert VECTORS_MISSING in answer.text and REBUILDING not in answer.text
    finally:
        await db.close()
