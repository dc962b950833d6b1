"""Hybrid search with the real local MiniLM model (fails under CI=true if it is missing)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bot.brain.tools import RecallTools
from bot.command_search import search_answer
from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.search import SearchService
from bot.search.doors import count_line
from bot.search.results import unrelated_mark
from tests.recall_helpers import add_conversation, open_index
from tests.support import inbound

CONVERSATIONS = {
    "conv-car": (
        [
            ("user", "My car makes a grinding noise whenever I press the brake pedal."),
            ("assistant", "That usually means the brake pads are worn down to the metal."),
            ("user", "The mechanic quoted 240 euros to replace the pads and rotors."),
        ],
        "Owner asked about a grinding brake noise; worn pads, mechanic quote 240 euros.",
    ),
    "conv-bread": (
        [
            ("user", "My sourdough loaf came out flat and dense again."),
            ("assistant", "Your starter may be too weak; feed it twice a day before baking."),
            ("user", "I will try a longer bulk fermentation this weekend."),
        ],
        "Sourdough loaf flat and dense; stronger starter and longer fermentation.",
    ),
    "conv-ticket": (
        [
            ("user", "Please remember ticket OPS-7731 for the database failover drill."),
            ("assistant", "Noted OPS-7731: the failover drill is scheduled for Thursday."),
        ],
        "Ticket OPS-7731 failover drill on Thursday.",
    ),
    "conv-invoices": (
        [
            ("user", "How should I chase unpaid invoices and send payment reminders?"),
            ("assistant", "Send a polite payment reminder a week after the invoice is due."),
        ],
        "Chasing unpaid invoices with payment reminders.",
    ),
    "conv-garage": (
        [("user", "The code for the garage door is QX-55821, keep it safe.")],
        "Garage door code QX-55821.",
    ),
    "conv-holiday": (
        [
            ("user", "We are planning a beach holiday in Portugal in August."),
            ("assistant", "The Algarve coast is warm and sunny in August."),
        ],
        "Beach holiday in Portugal (Algarve) in August.",
    ),
}


@pytest.fixture
def config(tmp_path: Path) -> AppConfig:
    return AppConfig(data_dir=tmp_path)


@pytest.fixture
async def store(tmp_path: Path, config: AppConfig, embedder: EmbeddingService):  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "conversations.db")
    service = SearchService(config, db, embedder)
    assert await service.start(), "vectors must be available with the local model"
    for conv_id, (turns, abbreviation) in CONVERSATIONS.items():
        await add_conversation(db, conv_id, turns, abbreviation=abbreviation)
        assert service.vectors is not None
        assert await service.vectors.index_turns(conv_id) == len(turns)
        assert await service.vectors.index_abbreviation(conv_id, abbreviation)
    yield db, service
    await db.close()


async def test_paraphrase_without_shared_keyword(store) -> None:  # type: ignore[no-untyped-def]
    db, service = store
    query = "vehicle squealing sound when slowing down"  # no keyword in common with conv-car
    keyword_only = await SearchService(AppConfig(), db).search(query)
    assert keyword_only.results == []
    page = await service.search(query)
    assert page.method == "hybrid"
    assert page.results[0].conversation_id == "conv-car"


async def test_exact_identifier_found_by_keyword_when_vectors_disagree(  # type: ignore[no-untyped-def]
    store, config: AppConfig
) -> None:
    db, service = store
    query = "payment reminder QX-55821"
    # vectors alone prefer the conversation about payment reminders ...
    vectors_only = config.model_copy(
        update={"search": config.search.model_copy(update={"keyword_weight": 0.0})}
    )
    ranking = await SearchService(vectors_only, db, service.embedder, service.vectors).rank(query)
    assert ranking.conversations[0][0] == "conv-invoices"
    # ... the hybrid ranking puts the one holding the exact identifier first
    page = await service.search(query)
    assert page.results[0].conversation_id == "conv-garage"
    assert page.results[0].matched_turns == [1]
    page = await service.search("OPS-7731")
    assert page.results[0].conversation_id == "conv-ticket"
    assert page.results[0].matched_turns == [1, 2]


async def test_keyword_only_hit_still_ranks(store) -> None:  # type: ignore[no-untyped-def]
    db, service = store
    # A turn stored after the vectors were built has no vector yet: found by keyword only.
    await add_conversation(db, "conv-fresh", [("user", "zanzibar itinerary draft")])
    page = await service.search("zanzibar")
    ids = [r.conversation_id for r in page.results]
    assert "conv-fresh" in ids
    fresh = page.results[ids.index("conv-fresh")]
    assert fresh.score > 0.3 and fresh.matched_turns == [1]
    ranking = await service.rank("zanzibar")
    hits = [h for h in ranking.turns if h.conversation_id == "conv-fresh"]
    assert hits and hits[0].vector == 0.0 and hits[0].keyword > 0


async def test_fts_syntax_never_errors_in_hybrid(store) -> None:  # type: ignore[no-untyped-def]
    _, service = store
    for text in ['"', "NEAR(", "a AND OR NOT", "*", "-brake", "col:umn", "(((", "東京 🚀", ""]:
        page = await service.search(text)
        # text with no words at all is not embedded (nothing to mean)
        assert page.method == ("hybrid" if text.strip() else "keyword")
    page = await service.search('"brake" NEAR(pads, rotors) -metal')
    assert page.results[0].conversation_id == "conv-car"


async def test_filters_apply_to_vector_hits(store) -> None:  # type: ignore[no-untyped-def]
    db, service = store
    await add_conversation(
        db,
        "conv-car-mail",
        [("user", "The brakes squeal on my bicycle.")],
        channel="email",
        day="2026-05-01",
    )
    assert service.vectors is not None
    await service.vectors.index_turns("conv-car-mail")
    query = "vehicle squealing sound when slowing down"
    page = await service.search(query, channel="email")
    assert [r.conversation_id for r in page.results] == ["conv-car-mail"]
    page = await service.search(query, date_to="2026-02-01")
    ids = [r.conversation_id for r in page.results]
    assert "conv-car-mail" not in ids and ids[0] == "conv-car"
    page = await service.search(query, date_from="2026-04-01")
    assert [r.conversation_id for r in page.results] == ["conv-car-mail"]
    page = await service.search(query, conversation_id="conv-bread")
    assert {r.conversation_id for r in page.results} == {"conv-bread"}


async def test_rrf_method_from_config(store, config: AppConfig) -> None:  # type: ignore[no-untyped-def]
    db, service = store
    rrf_config = config.model_copy(
        update={"search": config.search.model_copy(update={"method": "rrf"})}
    )
    rrf = SearchService(rrf_config, db, service.embedder, service.vectors)
    page = await rrf.search("vehicle squealing sound when slowing down")
    assert page.method == "hybrid"
    assert page.results[0].conversation_id == "conv-car"
    page = await rrf.search("OPS-7731")
    assert page.results[0].conversation_id == "conv-ticket"


async def test_keyword_weight_zero_is_pure_vectors(store, config: AppConfig) -> None:  # type: ignore[no-untyped-def]
    db, service = store
    vec_only = config.model_copy(
        update={"search": config.search.model_copy(update={"keyword_weight": 0.0})}
    )
    ranking = await SearchService(vec_only, db, service.embedder, service.vectors).rank(
        "sourdough bread baking"
    )
    assert ranking.conversations[0][0] == "conv-bread"


async def test_a_model_failing_mid_run_degrades_one_search_to_keyword_and_recovers(  # type: ignore[no-untyped-def]
    store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: an error from a loaded model (onnxruntime out of memory) raised out of
    # the search, so /search, the recall tool and the offline reply failed with it.
    _db, service = store
    embedder = service.embedder
    working = embedder.embed_sync

    def broken(texts: list[str]):  # type: ignore[no-untyped-def]
        raise RuntimeError("onnxruntime: failed to allocate memory")

    monkeypatch.setattr(embedder, "embed_sync", broken)
    page = await service.search("brake pads mechanic")
    assert page.method == "keyword"  # labelled: the caller can say recall is degraded
    assert page.results[0].conversation_id == "conv-car"
    monkeypatch.setattr(embedder, "embed_sync", working)
    page = await service.search("vehicle squealing sound when slowing down")
    assert page.method == "hybrid"
    assert page.results[0].conversation_id == "conv-car"


@pytest.mark.parametrize("query", ["?!...;;", "🔥🔥🚀", "-- ** --"])
async def test_a_query_with_no_words_finds_nothing_and_says_so(  # type: ignore[no-untyped-def]
    store, query: str
) -> None:
    # Regression: the model embeds such a query as its unknown token, whose "nearest"
    # turns are any: every conversation was listed as found, the first with score 1.0
    # (the offline brain answered a 👍 with three unrelated conversations).
    _db, service = store
    page = await service.search(query)
    assert page.results == [] and page.total == 0 and page.next_cursor is None
    assert page.no_words and page.to_dict()["no_words"] is True
    # one word among them is searched as usual, by meaning too
    found = await service.search(f"{query} vehicle squealing")
    assert not found.no_words and found.results[0].conversation_id == "conv-car"
    assert "no_words" not in found.to_dict()


async def test_a_page_says_whether_its_results_share_words_or_only_meaning(store) -> None:  # type: ignore[no-untyped-def]
    # Regression: scores are relative (the best conversation scores 1), so a query about
    # nothing in the store listed every conversation, the first at 1.0, as a perfect
    # match: the model and the owner could not tell it from a real find.
    db, service = store
    words = await service.search("grinding brake noise")
    assert words.match == "words" and "match" not in words.to_dict()
    meaning = await service.search("vehicle squealing sound when slowing down")
    assert meaning.match == "meaning" and meaning.results[0].conversation_id == "conv-car"
    loose = await service.search("quantum chromodynamics lattice gauge theory")
    assert loose.match == "loose" and loose.to_dict()["match"] == "loose"
    assert loose.results and loose.results[0].score == 1.0  # still listed: the nearest
    # a keyword-only search finds only what shares a word
    keyword_only = await SearchService(AppConfig(), db).search("grinding brake noise")
    assert keyword_only.method == "keyword" and keyword_only.match == "words"


async def test_a_query_naming_a_day_finds_that_days_conversations_by_their_date(store) -> None:  # type: ignore[no-untyped-def]
    # Regression: "what did we talk about on 3 February 2026?" shares no word with the
    # conversation held that day, which the date ranked first; but the page said
    # "nothing uses these words or comes close in meaning: the nearest, probably
    # unrelated", the recall tool told the model not to present it, and the offline
    # brain answered that nothing related had come up.
    db, service = store
    plumber = [("user", "The plumber comes to fix the leaking sink on Monday.")]
    await add_conversation(db, "conv-feb", plumber, day="2026-02-03")
    assert await service.vectors.index_turns("conv-feb") == 1
    page = await service.search("what did we talk about on 3 February 2026")
    assert page.match == "date" and page.to_dict()["match"] == "date"
    first, *rest = page.results
    assert first.conversation_id == "conv-feb" and first.match == "date"
    assert rest and all(r.match == "loose" for r in rest)  # held on other days
    assert page.loose == page.total - 1
    # words found elsewhere still make a page of words: the day's conversation is no
    # "probably unrelated" one on it
    both = await service.search("the brake noise, and what we said on 3 February 2026")
    assert both.match == "words"
    by_id = {r.conversation_id: r.match for r in both.results}
    assert by_id["conv-car"] == "words" and by_id["conv-feb"] == "date"
    assert unrelated_mark(both, next(r for r in both.results if r.match == "date")) == ""
    # the model is told how they were found, and not to set them aside
    tools = RecallTools(service.config, SimpleNamespace(search=service))
    out = await tools.search_conversations({"query": "what did we talk about on 3 February 2026"})
    found = json.loads(out.split("\n", 2)[2].rsplit("\n</recalled_data>", 1)[0])
    assert found["match"] == "date" and "held on the dates it names" in found["note"]
    assert found["totalMatches"] == 1 and found["probablyUnrelated"] == page.loose
    assert "probablyUnrelated" not in found["results"][0]


async def test_a_full_width_query_ranks_as_its_ascii_form(store) -> None:  # type: ignore[no-untyped-def]
    # Regression: the keyword side reads the query in NFKC, the model did not: a query
    # typed with a Japanese keyboard's full-width letters embedded as unknown tokens, so
    # the conversations "nearest" to it were any (a kayak query ranked a Chinese one
    # first, above the kayak trip its words found).
    _, service = store
    ascii_page = await service.search("grinding brake pedal")
    wide_page = await service.search("ｇｒｉｎｄｉｎｇ ｂｒａｋｅ ｐｅｄａｌ")
    assert wide_page.results[0].conversation_id == "conv-car"
    assert [(r.conversation_id, r.score) for r in wide_page.results] == [
        (r.conversation_id, r.score) for r in ascii_page.results
    ]


class _NoRecords:
    """``services.conversations`` for /search over this bare index: no records, so each
    result is named by the index row."""

    async def get(self, conv_id: str) -> None:
        return None


async def test_the_total_counts_the_matches_apart_from_the_loosely_related(store) -> None:  # type: ignore[no-untyped-def]
    # Regression: the vector stage lists the nearest conversations whatever they are,
    # and `total` counted them all: /search said "5 of 6 shown" for one conversation
    # about brakes, read as six conversations about them.
    _, service = store
    page = await service.search("grinding brake noise", limit=5)
    assert page.total == 6 and page.loose == 5 and page.to_dict()["loose"] == 5
    assert [r.match for r in page.results] == ["words", "loose", "loose", "loose", "loose"]
    assert count_line(page) == "5 shown: 1 of 1 match, 4 of 5 probably unrelated"
    services: Any = SimpleNamespace(
        config=service.config, search=service, conversations=_NoRecords()
    )
    answer = await search_answer(services, "grinding brake noise", inbound("/search"), None)
    # no "add words to narrow it down": the one match is shown, the rest are unrelated
    assert answer.text.splitlines()[-1] == "5 shown: 1 of 1 match, 4 of 5 probably unrelated."
    # more matches than shown: they are counted, the unrelated ones apart
    two = await service.search("brake sourdough invoices", limit=2)
    matches = two.total - two.loose
    assert matches == 3 and [r.match for r in two.results] == ["words", "words"]
    assert count_line(two) == f"2 of 3 matches shown, {two.loose} others probably unrelated"
    # a page of nothing but the nearest says so
    loose = await service.search("quantum chromodynamics lattice gauge theory", limit=2)
    assert loose.loose == loose.total == 6
    assert count_line(loose) == "2 of 6 shown, all probably unrelated"
    # a keyword-only search lists only what shares the words
    keyword = await SearchService(service.config, service.db).search("brake", limit=1)
    assert keyword.loose == 0
    # the recall tool counts them apart too, and marks each one
    tools = RecallTools(service.config, SimpleNamespace(search=service))
    out = await tools.search_conversations({"query": "grinding brake noise", "limit": 5})
    found = json.loads(out.split("\n", 2)[2].rsplit("\n</recalled_data>", 1)[0])
    assert found["totalMatches"] == 1 and found["probablyUnrelated"] == 5
    assert [r.get("probablyUnrelated", False) for r in found["results"]] == [False] + [True] * 4
    out = await tools.search_conversations({"query": "quantum chromodynamics", "limit": 2})
    found = json.loads(out.split("\n", 2)[2].rsplit("\n</recalled_data>", 1)[0])
    assert found["totalMatches"] == 6 and found["match"] == "loose"  # the note says it
    assert "probablyUnrelated" not in found
