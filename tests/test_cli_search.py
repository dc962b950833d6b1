"""``my-agent search`` as the owner uses it: the filters the other doors have, and what an
empty, wordless or keyword-only search prints (bot/cli_search.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bot import cli, exitcodes
from tests.test_cli import Store, store

__all__ = ["store"]  # the fixture, shared with tests/test_cli.py


def test_search_within_one_conversation(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    # The filter the recall tool and the web API have (it had no option here).
    both = store.json("search", "Porto OR sourdough", capsys=capsys)
    assert len(both["results"]) == 2
    web = store.ids["web"]
    page = store.json("search", "Porto OR sourdough", "--conversation", web, capsys=capsys)
    assert [r["conversation_id"] for r in page["results"]] == [web]
    # a mistyped id is said, not listed as "no match"
    capsys.readouterr()
    argv = ["--config", str(store.config_path), "search", "Porto", "--conversation", "conv-x"]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "no conversation conv-x" in captured.err


@pytest.mark.parametrize("query", ["?!...", "🔥🚀", "-- --"])
def test_a_query_with_no_words_is_a_usage_error(
    store: Store, query: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: searched by meaning, such a query (the model's unknown token) listed
    # every conversation as found; keyword-only it printed "no match (keyword)".
    capsys.readouterr()
    assert cli.main(["--config", str(store.config_path), "search", query]) == exitcodes.EX_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and "the query has no words" in captured.err


def test_an_empty_search_says_what_was_searched_and_what_to_try(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: it printed "no match (keyword)" (and a 10 KB query nothing more useful).
    status, text = store.run("search", "xylophone", capsys=capsys)
    assert status == 0
    assert text == (
        "no conversation matches 'xylophone'\n(keyword search only: try other words, or synonyms)\n"
    )
    status, text = store.run("search", "xylophone " * 1000, "--to", "2000-01-01", capsys=capsys)
    assert status == 0 and len(text) < 200
    assert text.startswith("no conversation matches 'xylophone xylophone") and "filters" in text


def test_a_bad_cursor_is_named(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    argv = ["--config", str(store.config_path), "search", "Porto", "--cursor", "nonsense"]
    assert cli.main(argv) == exitcodes.EX_USAGE
    assert "--cursor: malformed search cursor" in capsys.readouterr().err


def test_a_result_after_the_matches_that_is_unrelated_says_so(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As /search marks it (tests/test_search_command.py): on a page that shares the
    # query's words, a result that neither does nor comes close in meaning.
    from bot.search import SearchService

    search = SearchService.search

    async def marked(self: SearchService, *args: Any, **kwargs: Any) -> Any:
        page = await search(self, *args, **kwargs)
        first, *rest = page.results
        loose = [first, *(replace(r, match="loose") for r in rest)]
        return replace(page, method="hybrid", results=loose)

    monkeypatch.setattr(SearchService, "search", marked)
    status, text = store.run("search", "Porto OR sourdough", capsys=capsys)
    heads = [line for line in text.splitlines() if not line.startswith(" ")]
    assert status == 0 and len(heads) == 2, text
    assert not heads[0].endswith("(probably unrelated)")
    assert heads[1].endswith(") (probably unrelated)")
    assert store.json("search", "Porto OR sourdough", capsys=capsys)["results"][1]["match"] == (
        "loose"
    )


def test_an_error_inside_the_search_is_not_blamed_on_the_cursor(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: every ValueError of the search was printed as "--cursor: ..." with
    exit 64 (a usage error): a ranking that failed ("buffer is smaller than requested
    size", a dimension count the model overrode) sent the owner to an option never given.
    A bug is exit 70, as for every command."""
    from bot.search import SearchService

    async def failing(self: Any, query: str, **kwargs: Any) -> Any:
        raise ValueError("buffer is smaller than requested size")

    monkeypatch.setattr(SearchService, "search", failing)
    capsys.readouterr()
    assert cli.main(["--config", str(store.config_path), "search", "Porto"]) == (
        exitcodes.EX_SOFTWARE
    )
    err = capsys.readouterr().err
    assert "--cursor" not in err and "internal error" in err and "buffer is smaller" in err


def test_the_count_of_a_page_leaves_out_the_loosely_related(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: "(1 of 5 shown; ...)" counted the nearest conversations the vector
    # stage lists after the matches, read as five conversations about the query
    # (tests/test_search_hybrid.py measures it with the model).
    from bot.search import SearchService

    search = SearchService.search

    async def nearest(self: SearchService, *args: Any, **kwargs: Any) -> Any:
        page = await search(self, *args, **kwargs)
        return replace(page, method="hybrid", total=page.total + 3, loose=3)

    monkeypatch.setattr(SearchService, "search", nearest)
    status, text = store.run("search", "Porto OR sourdough", "--limit", "1", capsys=capsys)
    assert status == 0
    assert "(1 of 2 matches shown, 3 others probably unrelated; next page: --cursor " in text
    page = store.json("search", "Porto OR sourdough", "--limit", "1", capsys=capsys)
    assert page["total"] == 5 and page["loose"] == 3


def test_an_empty_next_page_says_no_more_match(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a next page with nothing left (its conversations deleted since the
    # first) said "no conversation matches 'Porto'", denying the page just listed.
    from bot.search import SearchService

    search = SearchService.search

    async def emptied(self: SearchService, *args: Any, **kwargs: Any) -> Any:
        page = await search(self, *args, **kwargs)
        return replace(page, results=[], next_cursor=None) if kwargs.get("cursor") else page

    monkeypatch.setattr(SearchService, "search", emptied)
    first = store.json("search", "Porto OR sourdough", "--limit", "1", capsys=capsys)
    assert first["results"] and first["next_cursor"]
    status, text = store.run(
        "search", "Porto OR sourdough", "--cursor", first["next_cursor"], capsys=capsys
    )
    assert status == 0 and text.startswith("no more conversations match 'Porto OR sourdough'")
