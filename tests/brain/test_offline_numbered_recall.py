"""The offline brain recalls a conversation the owner names by its number and topic word.

QA reported that "what did we say in conversation number 24 about topic24?" missed
conversation 24. Words with digits ("topic24") and bare numbers ("24") are FTS5 tokens
of their own, no date is read into the question and no stop word drops them: on fresh
data it is found first, keyword-only and with the local MiniLM model. What hid it was the
question asked before: offline, an earlier copy is a conversation holding only those
words (the offline replies are not recalled), which outranks the conversation it asks
about (with the model, as good as identical), and three of them filled the listing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.brain.base import BrainRequest
from bot.brain.offline import OFFLINE_LABEL, OfflineBrain
from bot.services import open_services
from tests.conftest import make_config, shutdown_services
from tests.recall_helpers import model_path

QUESTION = "what did we say in conversation number 24 about topic24?"


async def _conversations(services: Any, count: int = 30) -> None:
    manager = services.conversations
    for i in range(1, count + 1):
        conv = (await manager.create("telegram")).id
        for j in range(1, 5):
            await manager.append_turn(
                conv, "user", f"Message {j} of conversation number {i} about topic{i}."
            )
        await manager.append_turn(conv, "user", f"For topic{i} we settled on budget {i}00 euros.")
    for _ in range(6):  # the question, asked before (the offline replies are not recalled)
        conv = (await manager.create("telegram")).id
        await manager.append_turn(conv, "user", QUESTION)


@pytest.mark.parametrize("mode", ["keywords", "model"])
async def test_the_named_conversation_is_recalled_first(tmp_path: Path, mode: str) -> None:
    embedding: dict[str, Any] = {"enabled": False}
    if mode == "model":
        embedding = {"enabled": True, "model_path": str(model_path())}
    services = await open_services(make_config(tmp_path, embedding=embedding))
    try:
        await _conversations(services)
        if mode == "model":
            assert await services.search.start()
            await services.search.vectors.reindex_all()
        asking = (await services.conversations.create("telegram")).id
        await services.conversations.append_turn(asking, "user", QUESTION)
        reply = await OfflineBrain(services.search).reply(
            BrainRequest(
                profile="owner",
                channel="telegram",
                text=QUESTION,
                model_alias="",
                conversation_id=asking,
                turn_number=1,
            )
        )
        page = await services.search.search(QUESTION, limit=5)
        assert page.to_dict()["method"] == ("hybrid" if mode == "model" else "keyword"), page
    finally:
        await shutdown_services(services)
    lines = reply.text.splitlines()
    assert lines[0].startswith(OFFLINE_LABEL) and lines[1] == "From past conversations:"
    # conversation 24 itself (not one of the questions: their snippet is the question)
    assert "of conversation number 24 about topic24" in lines[2] or "For topic24" in lines[2]
