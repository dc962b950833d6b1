"""Recall beside the message being answered (the real local MiniLM model).

The message is stored before its reply, so a search for its subject always finds it and
the page's ``match`` read "words". The other conversations listed were the nearest
whatever their subject: the offline brain showed them "From past conversations" (a
question about the dentist answered with the kayak trip and a lentil soup recipe), and
the recall tool gave them to the model without the note that they are unrelated.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.brain.base import BrainRequest
from bot.brain.offline import OfflineBrain
from bot.brain.recall_search import MATCH_NOTES, ConversationSearch
from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.search import SearchService
from bot.search.results import unrelated_mark
from tests.recall_helpers import add_conversation, open_index
from tests.test_search_hybrid import CONVERSATIONS

NOW = "conv-now"


@pytest.fixture
async def service(tmp_path: Path, embedder: EmbeddingService) -> AsyncIterator[SearchService]:
    db = await open_index(tmp_path / "conversations.db")
    search = SearchService(AppConfig(data_dir=tmp_path), db, embedder)
    assert await search.start(), "vectors must be available with the local model"
    for conv_id, (turns, abbreviation) in CONVERSATIONS.items():
        await add_conversation(db, conv_id, turns, abbreviation=abbreviation)
        assert search.vectors is not None
        await search.vectors.index_turns(conv_id)
        await search.vectors.index_abbreviation(conv_id, abbreviation)
    yield search
    await db.close()


async def store_message(search: SearchService, message: str, **day: str) -> None:
    """``message`` stored (and embedded) as turn 1 of the conversation being answered."""
    await add_conversation(search.db, NOW, [("user", message)], **day)
    assert search.vectors is not None
    await search.vectors.index_turns(NOW)


async def ask(search: SearchService, message: str) -> list[str]:
    """The offline reply to ``message``, stored first as turn 1 of its conversation."""
    await store_message(search, message, day="2026-02-01")
    request = BrainRequest(
        profile="owner",
        channel="web",
        text=message,
        model_alias="",
        conversation_id=NOW,
        turn_number=1,
    )
    return (await OfflineBrain(search).reply(request)).text.splitlines()


async def tool(search: SearchService, query: str) -> dict[str, object]:
    wrapped = await ConversationSearch(search.config, SimpleNamespace(search=search)).run(
        {"query": query}, current=(NOW, 1)
    )
    found: dict[str, object] = json.loads(wrapped[wrapped.index("{") : wrapped.rindex("}") + 1])
    return found


async def test_an_unrelated_conversation_is_not_recalled_beside_the_message(
    service: SearchService,
) -> None:
    lines = await ask(service, "did we talk about my dentist?")
    assert lines[1] == "Nothing related turned up in past conversations.", lines


async def test_the_recall_tool_marks_the_nearest_beside_the_message_unrelated(
    service: SearchService,
) -> None:
    await store_message(service, "did we talk about my dentist?")
    # the nearest are listed still, marked as probably unrelated
    found = await tool(service, "my dentist")
    assert found["results"] and found["match"] == "loose"
    assert found["note"] == MATCH_NOTES["loose"]


async def test_a_related_conversation_is_still_recalled_beside_the_message(
    service: SearchService,
) -> None:
    lines = await ask(service, "what did the mechanic say about the brake pedal?")
    assert lines[1] == "From past conversations:"
    assert lines[2].startswith("1. ") and "grinding noise" in lines[2] + lines[-1], lines
    assert not any("sourdough" in line.lower() for line in lines), lines
    found = await tool(service, "brake pedal mechanic")
    assert "match" not in found and "note" not in found
    first = found["results"][0]  # type: ignore[index]
    assert first["conversationId"] == "conv-car"


async def test_search_marks_each_result_listed_after_the_matches_that_is_unrelated(
    service: SearchService,
) -> None:
    # Regression: /search and `my-agent search` listed the nearest conversations after
    # the one that shares the query's words like lesser matches (scores are relative);
    # only a page loose as a whole said "probably unrelated".
    await store_message(service, "did we talk about my dentist?")
    page = await service.search("my dentist")
    assert page.match == "words" and page.results[0].conversation_id == NOW
    first, *rest = page.results
    assert first.to_dict()["match"] == "words" and unrelated_mark(page, first) == ""
    assert rest and all(r.to_dict()["match"] == "loose" for r in rest)
    assert {unrelated_mark(page, r) for r in rest} == {" (probably unrelated)"}
    # a page loose as a whole says it in its heading, not on every line
    loose = replace(page, match="loose")
    assert {unrelated_mark(loose, r) for r in page.results} == {""}
