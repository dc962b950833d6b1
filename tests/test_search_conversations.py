"""The conversation list: query-word coverage and abbreviation similarity
(bot.search.conversations; docs/search.md "Fourth pass")."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from bot.config.model import AppConfig, SearchConfig
from bot.db import Database
from bot.search import SearchService
from bot.search.conversations import (
    bonuses,
    content_terms,
    coverage,
    rank_conversations,
    rescore,
    starts_word,
)
from bot.search.fusion import Scored
from bot.search.query import first_person
from bot.search.rows import Rows
from tests.recall_helpers import add_conversation, open_index


def test_coverage_counts_terms_that_start_a_word() -> None:
    terms = ["paint", "art", "kayak"]
    # "paint" starts "painting"; "art" only sits inside "restart"; no "kayak"
    assert coverage(["I love painting", "Time to restart"], terms) == pytest.approx(1 / 3)
    assert coverage(["Art and kayaks", "re-paint"], terms) == 1.0  # after "-" a word starts
    assert coverage(["start, then (art)", "_kayak"], terms) == pytest.approx(1 / 3)
    assert coverage(["anything"], []) == 0.0


def test_starts_word_checks_every_occurrence() -> None:
    assert starts_word("restart the art class", "art")  # the second "art" starts a word
    assert not starts_word("restart, smart", "art")
    assert starts_word("art", "art")


def test_content_terms_drop_names_and_stop_words() -> None:
    assert content_terms("What did Melanie paint recently?", {"melanie": "Melanie"}) == [
        "paint",
        "recently",
    ]


def test_coverage_lifts_the_conversation_holding_every_word() -> None:
    terms = ["kayak", "recipe", "garden"]
    texts = {"one": ["kayak trip and a recipe"], "spread": ["kayak", "recipe", "garden"]}
    listed = [("one", 1.0), ("spread", 0.95)]
    cfg = SearchConfig(coverage_weight=0.3, abbreviation_rank_weight=0.0)
    ranked = rank_conversations(cfg, terms, texts, listed, {})
    assert [c for c, _ in ranked] == ["spread", "one"]
    assert ranked[0][1] == 1.0  # the best conversation scores 1 again
    off = SearchConfig(coverage_weight=0.0, abbreviation_rank_weight=0.0)
    assert rank_conversations(off, terms, texts, listed, {}) == listed


def test_abbreviation_similarity_reorders_the_list() -> None:
    listed = [("a", 1.0), ("b", 0.95)]
    abbreviations = {"a": 0.20, "b": 0.45}  # cosines: b's notes are nearer the query
    cfg = SearchConfig(coverage_weight=0.0, abbreviation_rank_weight=0.2)
    assert [c for c, _ in rank_conversations(cfg, [], {}, listed, abbreviations)] == ["b", "a"]
    cfg = SearchConfig(coverage_weight=0.0, abbreviation_rank_weight=0.0)
    assert [c for c, _ in rank_conversations(cfg, [], {}, listed, abbreviations)] == ["a", "b"]


def _scored(
    query: str,
    turns: list[tuple[str, str, str]],
    names: dict[str, str],
    texts: list[str] | None = None,
) -> Scored:
    """A ranking of ``turns`` ((conversation, sender, day), best first) for ``query``,
    their contents ``texts`` (default: one neutral sentence each)."""
    n = len(turns)
    convs = [c for c, _, _ in turns]
    codes = {c: i for i, c in enumerate(dict.fromkeys(convs))}
    rows = Rows(
        list(range(1, n + 1)),
        convs,
        list(range(1, n + 1)),
        [s for _, s, _ in turns],
        [f"{d}T12:00:00Z" for _, _, d in turns],
        texts or ["something was said"] * n,
        ["web"] * n,
        np.zeros((n, 0), np.float32),
        np.zeros(n, bool),
        np.asarray([codes[c] for c in convs], np.int64),
    )
    final = np.linspace(1.0, 0.5, n)
    best: dict[str, float] = {}
    for c, score in zip(convs, final.tolist(), strict=True):
        best.setdefault(c, score)
    return Scored(
        rows,
        np.arange(n),
        final,
        np.ones(n),
        np.zeros(n),
        set(),
        list(best.items()),
        "keyword",
        query=query,
        names=names,
    )


def _only(**weights: float) -> SearchConfig:
    """Every conversation-list term off but ``weights``."""
    off = {
        "coverage_weight": 0.0,
        "abbreviation_rank_weight": 0.0,
        "date_rank_weight": 0.0,
        "participant_rank_weight": 0.0,
        "perspective_rank_weight": 0.0,
    }
    return SearchConfig.model_validate({**off, **weights})


def test_date_bonus_lifts_the_conversation_held_on_the_named_date() -> None:
    turns = [("a", "Ann", "2023-03-01"), ("b", "Ann", "2023-10-08"), ("c", "Ann", "2023-10-20")]
    scored = _scored("What did Ann do in the first weekend of October 2023?", turns, {})
    # a month: both October conversations match fully, the March one not at all
    assert bonuses(_only(date_rank_weight=0.3), scored) == {
        "b": pytest.approx(0.3),
        "c": pytest.approx(0.3),
    }
    # b (0.75 + 0.3) passes a (1.0); c (0.5 + 0.3) stays below a
    assert [c for c, _ in rescore(scored, _only(date_rank_weight=0.3)).conversations] == [
        "b",
        "a",
        "c",
    ]
    # no date in the query, or the weight at 0: nothing added, the list unchanged
    assert bonuses(_only(date_rank_weight=0.3), _scored("What did Ann do?", turns, {})) == {}
    assert rescore(scored, _only()).conversations == scored.conversations
    # a day: full on it, fading over the next week
    day = _scored("What did Ann say on 9 October 2023?", turns, {})
    assert bonuses(_only(date_rank_weight=0.3), day) == {
        "b": pytest.approx(0.3 * (1 - 1 / 8)),
    }


def test_participant_bonus_needs_a_turn_by_the_named_person() -> None:
    turns = [("a", "Bob", "2023-01-01"), ("b", "Ann", "2023-01-01"), ("a", "Carl", "2023-01-01")]
    scored = _scored("What did Ann paint?", turns, {"ann": "Ann"})
    assert bonuses(_only(participant_rank_weight=0.2), scored) == {"b": pytest.approx(0.2)}
    ranked = rescore(scored, _only(participant_rank_weight=0.3)).conversations
    assert [c for c, _ in ranked] == ["b", "a"]
    assert ranked[0][1] == 1.0
    # a query that names nobody: no bonus
    assert bonuses(_only(participant_rank_weight=0.2), _scored("paint", turns, {})) == {}


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = await open_index(tmp_path / "conversations.db")
    yield database
    await database.close()


def _filler(n: int) -> list[tuple[str, str]]:
    return [("assistant", f"Unrelated remark number {i} about the weather") for i in range(n)]


async def test_search_lists_the_covering_conversation_first(db: Database) -> None:
    # the same best turn in both conversations (a tie on the best turn); only
    # conv-b also holds the query's third word, in a turn far from that one
    turn = ("user", "The kayak trip and the recipe for the camp dinner")
    await add_conversation(db, "conv-a", [*_filler(4), turn, *_filler(4)])
    await add_conversation(
        db,
        "conv-b",
        [*_filler(4), turn, *_filler(4), ("user", "The garden " + "and so on " * 30)],
    )
    # a third conversation with the word lowers its idf (the far turn stays weak)
    await add_conversation(db, "conv-c", [("user", "Nothing relevant in the garden")])
    off = AppConfig()
    off.search.coverage_weight = 0.0
    service = SearchService(off, db)
    page = await service.search("kayak recipe garden")
    listed = [r.conversation_id for r in page.results if r.conversation_id != "conv-c"]
    assert listed == ["conv-a", "conv-b"]  # tied: by id
    before = await service.rank("kayak recipe garden")

    service = SearchService(AppConfig(), db)  # defaults: coverage on
    page = await service.search("kayak recipe garden")
    listed = [r.conversation_id for r in page.results if r.conversation_id != "conv-c"]
    assert listed == ["conv-b", "conv-a"]
    assert page.results[0].score == 1.0
    after = await service.rank("kayak recipe garden")
    # only the conversation list changes: the turn ranking is the same
    assert [(t.turn_id, t.score) for t in after.turns] == [
        (t.turn_id, t.score) for t in before.turns
    ]


async def test_a_name_in_the_possessive_names_the_participant(db: Database) -> None:
    """Regression: "What is Anna's favourite dish?" kept "anna's" as a keyword and did not
    see that it names Anna: her turns got no participant prior, and a conversation where
    someone else says "Anna's" was listed above hers."""
    await add_conversation(db, "conv-anna", [("user", "My favourite dish is lasagne with spinach")])
    await add_conversation(db, "conv-bob", [("user", "Anna's favourite dish? No idea, ask her")])
    for conv, sender in (("conv-anna", "Anna"), ("conv-bob", "Bob")):
        await db.execute("UPDATE turns SET sender = ? WHERE conversation_id = ?", (sender, conv))
    service = SearchService(AppConfig(), db)
    for query in ("What is Anna's favourite dish?", "What is Anna’s favourite dish?"):
        scored = await service.scored(query)
        assert scored.names == {"anna": "Anna"}
        ranked = await service.rank(query)
        assert [c for c, _ in ranked.conversations] == ["conv-anna", "conv-bob"]
    assert content_terms("What is Anna's favourite dish?", {"anna": "Anna"}) == [
        "favourite",
        "dish",
    ]


async def test_a_named_date_is_a_day_of_the_owners_calendar(db: Database) -> None:
    """Regression: the date a query names was matched against the turns' UTC days, so an
    owner in New York asking about "March 2" got the conversation of the next morning
    ahead of their own evening one (after 19:00 there, already March 3 in UTC)."""
    said = [("user", "We planted the tomatoes in the garden today")]
    await add_conversation(db, "conv-a", said, at="2026-03-03T15:00:00.000Z")  # March 3
    await add_conversation(db, "conv-b", said, at="2026-03-03T01:30:00.000Z")  # March 2, 20:30
    config = AppConfig()
    config.owner.timezone = "America/New_York"
    query = "the tomatoes in the garden on March 2, 2026"
    page = await SearchService(config, db).search(query)
    assert [r.conversation_id for r in page.results] == ["conv-b", "conv-a"]
    ranked = await SearchService(config, db).rank(query)
    assert ranked.turns[0].conversation_id == "conv-b"
    # in UTC both are March 3, a day after the named date: a tie, listed by id
    page = await SearchService(AppConfig(), db).search(query)
    assert [r.conversation_id for r in page.results] == ["conv-a", "conv-b"]


async def test_a_time_zone_reloaded_dates_the_next_query_in_it(db: Database) -> None:
    """Regression (session 39): the search kept the zone it read at the start, so after
    a SIGHUP took a new ``owner.timezone`` (it replaces ``config.owner``) a date the
    query named was a day of the old zone until a restart."""
    from bot.config.model import OwnerConfig

    said = [("user", "We planted the tomatoes in the garden today")]
    await add_conversation(db, "conv-a", said, at="2026-03-03T15:00:00.000Z")  # March 3
    await add_conversation(db, "conv-b", said, at="2026-03-03T01:30:00.000Z")  # NY: March 2
    config = AppConfig()
    service = SearchService(config, db)
    query = "the tomatoes in the garden on March 2, 2026"
    page = await service.search(query)
    assert [r.conversation_id for r in page.results] == ["conv-a", "conv-b"]  # UTC: a tie
    config.owner = OwnerConfig(timezone="America/New_York")  # what the reload does
    page = await service.search(query)
    assert [r.conversation_id for r in page.results] == ["conv-b", "conv-a"]


async def test_yesterday_is_the_day_before_the_owners_today(db: Database) -> None:
    """Regression: relative dates named no date at all, so "the tomatoes yesterday" ranked
    an old conversation with the same words ahead of yesterday's (and, west of UTC,
    "yesterday" must be the owner's yesterday, not UTC's)."""
    from datetime import UTC, datetime

    said = [("user", "We planted the tomatoes in the garden today")]
    await add_conversation(db, "conv-a", said, at="2026-02-10T15:00:00.000Z")  # weeks ago
    await add_conversation(db, "conv-b", said, at="2026-03-03T01:30:00.000Z")  # NY: March 2
    config = AppConfig()
    config.owner.timezone = "America/New_York"
    service = SearchService(config, db)
    # 02:00 UTC on March 4 is March 3, 21:00 in New York: yesterday there is March 2
    service.now = lambda: datetime(2026, 3, 4, 2, 0, tzinfo=UTC)
    for query in ("the tomatoes in the garden yesterday", "what did I plant yesterday?"):
        page = await service.search(query)
        assert page.results[0].conversation_id == "conv-b", query
    # "three weeks ago" is around February 10
    page = await service.search("the tomatoes in the garden three weeks ago")
    assert page.results[0].conversation_id == "conv-a"
    # with no date in the words, the tie is listed by id
    page = await service.search("the tomatoes in the garden")
    assert [r.conversation_id for r in page.results] == ["conv-a", "conv-b"]


async def test_the_ranker_trains_on_the_conversation_order_it_ranks_with(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SearchService.scored`` (what ``bench ranker`` trains on) and the learned ranker
    at search time see the same conversation order: the list before its re-scoring.
    Regression: after the two were merged, training read the re-scored list."""
    from bot.search import learned
    from bot.search.features import turn_features

    turn = ("user", "The kayak trip and the recipe for the camp dinner")
    await add_conversation(db, "conv-a", [*_filler(4), turn, *_filler(4)])
    await add_conversation(
        db,
        "conv-b",
        [*_filler(4), turn, *_filler(4), ("user", "The garden " + "and so on " * 30)],
    )
    await add_conversation(db, "conv-c", [("user", "Nothing relevant in the garden")])
    query = "kayak recipe garden"
    seen: list[np.ndarray] = []

    def recording(scored: Scored, idx: np.ndarray) -> np.ndarray:
        seen.append(turn_features(scored, idx))
        return seen[-1]

    monkeypatch.setattr(learned, "turn_features", recording)
    ranked = await SearchService(AppConfig(), db).rank(query)  # learned, coverage on

    def pair(conversations: list[tuple[str, float]]) -> list[str]:
        return [c for c, _ in conversations if c != "conv-c"]

    assert pair(ranked.conversations) == ["conv-b", "conv-a"]  # re-scored
    rules = AppConfig()
    rules.search.ranker = "rules"
    scored = await SearchService(rules, db).scored(query)
    assert pair(scored.conversations) == ["conv-a", "conv-b"]  # best turn (tied: by id)
    assert len(seen) == 1
    np.testing.assert_array_equal(
        seen[0], turn_features(scored, scored.order[: AppConfig().search.ranker_depth])
    )


def test_a_conversations_turns_are_its_rows_in_ranking_order() -> None:
    """``Scored.conversation`` finds a conversation's rows through their codes; the turns
    and matched numbers are those of a scan of the whole ranking, best first."""
    rng = random.Random(7)
    turns = [(f"c{rng.randint(0, 9)}", "Ann", "2024-05-01") for _ in range(120)]
    turns.sort(key=lambda t: t[0])  # rows come in conversation order
    scored = _scored("what happened", turns, {})
    scored.order = np.asarray(rng.sample(range(len(turns)), 90))  # some rows dropped
    scored.kw_raw = np.asarray([rng.random() < 0.5 for _ in turns], np.float64)
    for conv in [*{c for c, _, _ in turns}, "absent"]:
        got = scored.conversation(conv, 0.5)
        want = [i for i in scored.order.tolist() if scored.rows.conv[i] == conv]
        assert got.turns == [(scored.rows.number[i], float(scored.final[i])) for i in want]
        direct = [scored.rows.number[i] for i in want if scored.kw_raw[i] > 0]
        assert got.matched == list(dict.fromkeys(direct))
        assert got.text == (scored.rows.content[want[0]] if want else "")


def test_first_person_counts_the_speakers_own_words_against_the_others() -> None:
    assert first_person("Nate: We played this game Catan, I love it!")
    assert first_person("Dave: My dream was to open a shop.")
    assert first_person("I’m so proud of my garden")  # a curly apostrophe
    # a reaction to the other person: more "you" than "I"
    assert not first_person("Dave: Keep at it and never forget your dreams!")
    assert not first_person("I think you did great, your hard work paid off")
    assert not first_person("The festival was great.")  # neither
    assert not first_person("Mine!? Yours.")  # as many of each
    assert not first_person("Iris: Brilliant")  # a name, not a word of either kind


def test_perspective_lifts_a_conversation_whose_turn_tells_of_the_speaker() -> None:
    turns = [
        ("cheer", "Dave", "2023-05-01"),
        ("own", "Dave", "2023-06-01"),
        ("x", "Cal", "2023-07-01"),
    ]
    texts = [
        "Dave: Keep chasing your dreams, Calvin, you can do it!",
        "Dave: My dream was to open a car shop, and I did it.",
        "Cal: Nice weather.",
    ]
    scored = _scored("What are Dave's dreams?", turns, {"dave": "Dave"}, texts)
    cfg = _only(perspective_rank_weight=0.2)
    # own: 0.75 of the best turn's score, the only first-person turn; min-max over the
    # conversations among the first perspective_depth turns: own 1, the others 0
    assert bonuses(cfg, scored) == {"own": pytest.approx(0.2)}
    # 0.75 + 0.2 stays under the best turn's 1; 0.75 + 0.3 passes it
    assert [c for c, _ in rescore(scored, cfg).conversations] == ["cheer", "own", "x"]
    cfg = _only(perspective_rank_weight=0.3)
    assert [c for c, _ in rescore(scored, cfg).conversations] == ["own", "cheer", "x"]
    assert rescore(scored, _only()).conversations == scored.conversations
    # beyond the depth the turn is not read
    deep = _only(perspective_rank_weight=0.2, perspective_depth=1)
    assert bonuses(deep, scored) == {}


def test_perspective_changes_nothing_where_no_turn_is_in_the_first_person() -> None:
    turns = [("a", "Ann", "2023-05-01"), ("b", "Ann", "2023-06-01")]
    texts = ["Ann: 東京に行った", "Ann: 大阪に行った"]  # no English pronoun at all
    scored = _scored("Where did Ann go?", turns, {"ann": "Ann"}, texts)
    assert bonuses(_only(perspective_rank_weight=0.2), scored) == {}


def test_perspective_leaves_a_query_for_an_identifier_alone() -> None:
    turns = [("code", "Ann", "2023-05-01"), ("ask", "Ann", "2023-06-01")]
    texts = ["The code for the garage door is QX-55821.", "How should I send payment reminders?"]
    scored = _scored("payment reminder QX-55821", turns, {}, texts)
    assert bonuses(_only(perspective_rank_weight=0.2), scored) == {}
    words = _scored("payment reminder", turns, {}, texts)
    assert bonuses(_only(perspective_rank_weight=0.2), words) == {"ask": pytest.approx(0.2)}
