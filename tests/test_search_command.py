"""``/search`` as the owner types it on a phone: filters as words, answers that fit a
message, and what an empty or degraded search says (bot/command_search.py)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from bot.command_search import ECHO_CHARS, SEARCH_USAGE, search_options
from tests.recall_helpers import Relabelled
from tests.test_commands import Core, core

__all__ = ["core"]  # the fixture, shared with tests/test_commands.py


async def _kayaks(core: Core) -> tuple[str, str]:
    """A web conversation on the evening of 2999-03-01 in New York (already 03-02 in
    UTC), and a Telegram one the next day."""
    core.s.config.owner.timezone = "America/New_York"
    manager = core.s.conversations
    evening = await manager.create("web")
    await manager.append_turn(
        evening.id, "user", "kayak rental by the lake", timestamp="2999-03-02T01:30:00.000Z"
    )
    later = await manager.create("telegram")
    await manager.append_turn(
        later.id, "user", "kayak lessons on Saturday", timestamp="2999-03-02T15:00:00.000Z"
    )
    return evening.id, later.id


def test_filters_are_words_of_their_own_anywhere_in_the_query() -> None:
    assert search_options("kayak channel:Web rental from:2026-02-01 to:2026-02-28") == (
        "kayak rental",
        {"channel": "Web", "from": "2026-02-01", "to": "2026-02-28"},
    )
    # a colon inside another word is the query's
    assert search_options("ERR:4521 at 10:30") == ("ERR:4521 at 10:30", {})


async def test_search_filters_by_channel_and_the_owners_whole_days(core: Core) -> None:
    # Regression: /search took no filter ("channel:telegram" was searched for as words),
    # though the recall tool and `my-agent search` filter by channel and dates.
    evening, later = await _kayaks(core)
    both = await core.say("/search kayak")
    assert evening in both and later in both
    day = await core.say("/search kayak from:2999-03-01 to:2999-03-01")
    assert evening in day and later not in day and "[web, 2999-03-01, " in day
    assert day.startswith("Results for 'kayak'")
    telegram = await core.say("/search channel:Telegram kayak")
    assert later in telegram and evening not in telegram
    none = await core.say("/search kayak channel:email")
    assert none == "No conversations match 'kayak' with these filters. " + (
        "(keyword search only: try other words)"
    )


async def test_a_wrong_filter_is_named_not_searched(core: Core) -> None:
    await _kayaks(core)
    for args, said in (
        ("kayak from:2999-02-30", "from: is not an ISO date like 2026-02-14: '2999-02-30'"),
        ("kayak from:2999-03-02 to:2999-03-01", "from: 2999-03-02 is after to: 2999-03-01"),
        ("kayak channel:telgram", "channel: 'telgram' is not a channel (one of web, telegram"),
        # the loopback ingress is for scripts and tests, not one the owner talks on
        ("kayak channel:sms", "channel: 'sms' is not a channel (one of web, telegram, email)\n"),
    ):
        answer = await core.say(f"/search {args}")
        assert said in answer and answer.endswith(SEARCH_USAGE), answer
    assert await core.say("/search from:2999-03-01") == SEARCH_USAGE  # filters, no query


async def test_a_filter_without_a_value_is_named_not_ignored(core: Core) -> None:
    # Regression (session 41): "from:" with nothing after it was read as no filter, and
    # the search ran over every date (or channel) without a word.
    evening, later = await _kayaks(core)
    for args, said in (
        ("kayak from:", "from: has no value: give a date like 2026-02-14\n"),
        ("kayak to: from:2999-03-01", "to: has no value: give a date like 2026-02-14\n"),
        ("Channel: kayak", "channel: has no value: give one of web, telegram, email\n"),
    ):
        answer = await core.say(f"/search {args}")
        assert answer.startswith(said) and answer.endswith(SEARCH_USAGE), answer
        assert evening not in answer and later not in answer
    assert await core.say("/search from:") == SEARCH_USAGE  # no query: the usage alone


async def test_a_filter_given_twice_is_named_not_settled_by_the_last(core: Core) -> None:
    # Regression (session 42): a repeated filter silently kept the last one:
    # "from:2999-03-01 from:2999-03-02" searched from 03-02, "channel:" twice the second.
    evening, later = await _kayaks(core)
    for args, said in (
        (
            "kayak from:2999-03-01 from:2999-03-02",
            "from: is given twice (from:2999-03-01 and from:2999-03-02): give it once\n",
        ),
        (
            "channel:web kayak Channel:telegram",
            "channel: is given twice (channel:web and Channel:telegram): give it once\n",
        ),
        ("kayak to:2999-03-02 to:", "to: is given twice (to:2999-03-02 and to:): give it once\n"),
    ):
        answer = await core.say(f"/search {args}")
        assert answer.startswith(said) and answer.endswith(SEARCH_USAGE), answer
        assert evening not in answer and later not in answer
    # each once, as before
    assert evening in await core.say("/search kayak from:2999-03-01 to:2999-03-01 channel:web")


async def test_a_pasted_page_is_not_echoed_back_whole(core: Core) -> None:
    # Regression: the answer repeated the query: a 10 KB query made a 12 KB answer,
    # three Telegram messages of the owner's own text.
    await _kayaks(core)
    answer = await core.say("/search " + "kayak rental lake " * 600)
    assert len(answer) < 1000, len(answer)
    heading = answer.splitlines()[0]
    assert heading.startswith("Results for 'kayak rental lake") and "…'" in heading
    assert len(heading) < ECHO_CHARS + 50


async def test_a_query_with_no_words_says_so(core: Core) -> None:
    await _kayaks(core)
    assert await core.say("/search ?!…") == (
        "Nothing to search for in '?!…': give words to look for."
    )


async def test_a_keyword_only_search_says_so(core: Core) -> None:
    # Regression: the heading ended in "(keyword)", and an empty keyword-only search said
    # only "No conversations match": a miss by meaning read as "never talked about it".
    await _kayaks(core)
    answer = await core.say("/search rental")
    assert answer.splitlines()[0] == "Results for 'rental' (keyword search only):"
    assert await core.say("/search canoe hire") == (
        "No conversations match 'canoe hire'. (keyword search only: try other words)"
    )


async def test_the_three_doors_list_the_same_conversations(core: Core) -> None:
    # SPEC: one engine behind /search, `my-agent search` (SearchService.search, as
    # tests/test_cli_search.py runs it) and the recall tool, filters included.
    import json

    from bot.brain.tools import RecallTools, execute, tool_map

    evening, later = await _kayaks(core)
    tools = tool_map(RecallTools(core.s.config, core.s).tools())
    for words, channel, span in (
        ("kayak", None, {}),
        ("kayak", "telegram", {}),
        ("kayak", None, {"from": "2999-03-01", "to": "2999-03-01"}),
    ):
        typed = words + (f" channel:{channel}" if channel else "")
        typed += "".join(f" {key}:{day}" for key, day in span.items())
        answer = await core.say(f"/search {typed}")
        shown = [line.rsplit("(", 1)[1].rstrip(")") for line in answer.splitlines()[1:]]
        args: dict[str, object] = {"query": words, "limit": 5, "dateRange": span}
        if channel:
            args["channel"] = channel
        content, err = await execute(tools, "search_conversations", args)
        body = json.loads(content.split("\n", 2)[2].rsplit("\n</recalled_data>", 1)[0])
        assert not err and [r["conversationId"] for r in body["results"]] == shown, typed
        expected = {later} if channel else {evening} if span else {evening, later}
        assert set(shown) == expected, typed


async def test_results_that_share_no_word_say_so(core: Core, monkeypatch: Any) -> None:
    # Regression: scores are relative (the first scores 1), so a search about nothing
    # in the store was answered "Results for ...", as if found.
    await _kayaks(core)
    unpatched = SimpleNamespace(search=core.s.search.search)
    for match, heading in (
        ("date", "No conversation uses the words of 'rental'; those of the dates it names:"),
        ("meaning", "No conversation uses the words of 'rental'; the closest by meaning:"),
        (
            "loose",
            "Nothing mentions 'rental' or comes close to it; the nearest, probably unrelated:",
        ),
    ):
        labelled = Relabelled(unpatched, method="hybrid", match=match)
        monkeypatch.setattr(core.s.search, "search", labelled.search)
        answer = (await core.say("/search rental")).splitlines()
        assert answer[0] == heading and answer[1].startswith("1. ")


async def test_a_result_after_the_matches_that_is_unrelated_says_so(
    core: Core, monkeypatch: Any
) -> None:
    # Regression: on a page that shares the query's words, the nearest conversations
    # listed after the matches read like lesser matches (scores are relative).
    await _kayaks(core)
    search = core.s.search.search

    async def marked(*args: Any, **kwargs: Any) -> Any:
        page = await search(*args, **kwargs)
        first, *rest = page.results
        loose = [first, *(replace(r, match="loose") for r in rest)]
        return replace(page, method="hybrid", results=loose)

    monkeypatch.setattr(core.s.search, "search", marked)
    answer = (await core.say("/search kayak")).splitlines()
    assert answer[0] == "Results for 'kayak':"
    assert "(probably unrelated)" not in answer[1]
    assert answer[2].startswith("2. ") and "] (probably unrelated) " in answer[2]
    assert answer[2].endswith(")") and "(conv-" in answer[2].rsplit(" ", 1)[1]


async def test_a_conversation_found_by_its_title_says_so(core: Core) -> None:
    # A conversation found by the title the owner gave it (bot/search/titles.py) was
    # said to be found by "its notes", which it may not even have.
    manager = core.s.conversations
    rec = await manager.create("web")
    await manager.append_turn(rec.id, "user", "the disks keep failing")
    await manager.rename(rec.id, "Homelab storage saga")
    answer = await core.say("/search homelab")
    assert rec.id in answer and ", its title]" in answer
    # no snippet to show, and no double space in its place
    assert f"its title] ({rec.id})" in answer
