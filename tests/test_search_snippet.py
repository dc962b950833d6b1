"""A result's snippet: where it is cut, and what it costs (bot.search.fusion.snippet).

Before session 40 a snippet looked for every term it was given (the offline brain gave
the 50,000 distinct words of a pasted log, 36 s of scanning on the event loop), a match
at the end of a 1 MB line sat at the snippet's end where the previews that show its
start never reached, and the results' snippets were made on the event loop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import bot.search.pages as pages
import bot.search.query as query_module
from bot.config.model import AppConfig
from bot.search import SearchService
from bot.search.fusion import SNIPPET_TERMS, snippet
from bot.search.query import MAX_QUERY_CHARS, bounded_query
from tests.recall_helpers import add_conversation, open_index

TEXT = "lorem ipsum " * 100 + "the kayak is at the boathouse " + "dolor sit " * 100


def test_a_snippet_looks_for_its_first_terms_only() -> None:
    absent = [f"absent{i}" for i in range(SNIPPET_TERMS)]
    assert "kayak" in snippet(TEXT, [*absent[1:], "kayak"])
    # a term past the first SNIPPET_TERMS is not looked for: the snippet is the start
    assert snippet(TEXT, [*absent, "kayak"]) == snippet(TEXT, [])
    assert snippet(TEXT, []).startswith("lorem ipsum")


def test_a_match_at_the_end_of_a_long_line_is_in_the_snippets_first_half() -> None:
    text = "x" * 1_000_000 + " tail marker nospacesentinel"
    shown = snippet(text, ["nospacesentinel"])
    assert shown.startswith("…") and shown.endswith("nospacesentinel")
    # `my-agent search` shows 150 characters of it, the offline reply 197
    assert shown.index("nospacesentinel") <= 1 + 220 // 2
    # away from the end the window keeps its width, the match a quarter in
    middle = snippet(TEXT, ["kayak"])
    assert len(middle) == 222 and middle.index("kayak") == 1 + 220 // 4


def test_a_long_query_is_normalised_only_as_far_as_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[int] = []

    def normalise(text: str) -> str:
        read.append(len(text))
        return text

    monkeypatch.setattr(query_module, "normalise", normalise)
    assert len(bounded_query("grüße aus köln " * 100_000)) <= MAX_QUERY_CHARS
    assert read == [8 * MAX_QUERY_CHARS]


async def test_the_results_snippets_are_made_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await open_index(tmp_path / "conversations.db")
    try:
        await add_conversation(db, "conv-log", [("user", "checkout log " + "y" * 100_000)])
        on_loop: list[bool] = []

        def shown(text: str, terms: list[str]) -> str:
            on_loop.append(threading.current_thread() is threading.main_thread())
            return snippet(text, terms)

        monkeypatch.setattr(pages, "snippet", shown)
        page = await SearchService(AppConfig(data_dir=tmp_path), db).search("checkout log")
        assert [r.conversation_id for r in page.results] == ["conv-log"]
        assert on_loop == [False]
    finally:
        await db.close()
