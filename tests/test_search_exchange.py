"""Question -> answer inheritance and the length prior (docs/search.md, third pass)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bot.config.model import AppConfig
from bot.db import Database
from bot.ranking import Neighbourhood, asks, length_prior
from bot.search import SearchService
from tests.recall_helpers import add_conversation, open_index


def test_asks_sees_a_final_question_even_before_an_attachment_note() -> None:
    assert asks("Nate: Wow, that sounds awesome! What's it about?")
    assert asks("Did you see that band?  ")
    assert asks("Look at this! Which one do you like? [shares a photo of two bowls]")
    assert not asks("It's a mix of drama and romance!")
    assert not asks("Really? Yes, I went there last week.")
    assert not asks("[a note only]?]")  # nothing but a bracket: not a question
    assert not asks("")
    # the fast path reads the last character: white space of any script still counts
    assert asks("何ですか？\u3000")
    assert asks("Why? [photo]\u2028")
    assert not asks("A statement.\u00a0")


def test_shifts_are_computed_once_per_neighbourhood_and_cannot_be_written() -> None:
    """The fusion, soft coverage and the learned features share one neighbourhood per
    ranking: a caller writing into a shared shift would corrupt the others' windows."""
    hood = Neighbourhood(np.array([0, 0, 0, 1, 1]), np.array([1, 2, 3, 1, 2]))
    rows, src = hood.shift(1, 2)
    assert hood.shift(1, 2)[0] is rows
    assert rows.tolist() == [0, 1, 3] and src.tolist() == [1, 2, 4]
    with pytest.raises(ValueError):
        rows[0] = 4
    assert hood.shift(-1, 1)[0].tolist() == [1, 2, 4]


def test_length_prior_grows_to_one_at_full_length() -> None:
    values = length_prior(["", "x" * 50, "x" * 200, "x" * 900], 200)
    assert values.tolist() == [0.0, 0.25, 1.0, 1.0]
    assert length_prior([], 200).size == 0


def test_answer_inherits_a_share_of_the_question_it_follows() -> None:
    # conversation 0: turns 1-4; conversation 1: turns 1 and 3 (2 not loaded)
    hood = Neighbourhood(np.array([0, 0, 0, 0, 1, 1]), np.array([1, 2, 3, 4, 1, 3]))
    values = np.array([0.2, 1.0, 0.1, 0.5, 0.9, 0.0])
    asking = np.array([False, True, False, False, True, False])
    out = hood.answers_inherit(values, asking, 0.8)
    assert out[2] == pytest.approx(0.8)  # the reply to turn 2
    assert out[3] == 0.5  # two turns later: nothing (and not chained through turn 3)
    assert out[1] == 1.0  # the question keeps its own score
    assert out[5] == 0.0  # turn 3 does not follow turn 1: the reply was not loaded
    assert out[0] == 0.2
    high = np.array([0.2, 0.5, 0.9, 0.5, 0.9, 0.0])
    assert hood.answers_inherit(high, asking, 0.8)[2] == 0.9  # never lowered
    assert np.array_equal(hood.answers_inherit(values, asking, 0.0), values)


def test_only_someone_else_answers() -> None:
    """A question followed by the same speaker's next message (the owner's questions in a
    row, once the offline brain's readouts are out of the index) passes nothing on."""
    hood = Neighbourhood(np.array([0, 0, 0, 0]), np.array([1, 2, 3, 4]))
    values = np.array([1.0, 0.1, 0.9, 0.1])
    asking = np.array([True, False, True, False])
    speakers = np.array([0, 0, 0, 1])  # the owner three times, then someone else
    out = hood.answers_inherit(values, asking, 0.8, speakers)
    assert out[1] == 0.1  # the owner's own next message is no answer
    assert out[3] == pytest.approx(0.72)  # the other speaker's reply is
    assert hood.answers_inherit(values, asking, 0.8)[1] == pytest.approx(0.8)  # no speakers


async def test_the_owners_next_question_does_not_inherit(db: Database, tmp_path: Path) -> None:
    turns = [
        ("user", "Where did we park the kayak last summer?"),
        ("user", "Which lake was the kayak trip on?"),
        ("user", "Who lent us the paddles?"),
    ]
    await add_conversation(db, "conv-owner", turns)
    ranking = await _service(db, tmp_path).rank("kayak lake")
    scores = {h.turn_number: h.score for h in ranking.turns}
    assert ranking.turns[0].turn_number == 2
    assert scores[3] < 0.8 * scores[2]  # the next question holds neither word


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = await open_index(tmp_path / "conversations.db")
    yield database
    await database.close()


def _service(db: Database, tmp_path: Path, **search: float) -> SearchService:
    config = AppConfig(data_dir=tmp_path)
    config.search.ranker = "rules"  # these rules, not the learned order built on them
    for key, value in search.items():
        setattr(config.search, key, value)
    return SearchService(config, db)  # no embedder: keyword-only, rules apply alike


async def test_reply_to_a_matching_question_ranks_next_to_it(db: Database, tmp_path: Path) -> None:
    filler = [("user", f"Filler line number {i} about the weather and the bus.") for i in range(8)]
    turns = [
        *filler,
        ("user", "I finally finished my first screenplay last Friday."),
        ("assistant", "Congratulations! Which genre is the screenplay?"),
        ("user", "A mix of drama and romance, with a sad ending."),
        *filler,
    ]
    await add_conversation(db, "conv-film", turns)
    query = "What genre is the screenplay?"

    def score(ranking, number: int) -> float:  # type: ignore[no-untyped-def]
        return next(h.score for h in ranking.turns if h.turn_number == number)

    with_rule = await _service(db, tmp_path).rank(query)
    without = await _service(db, tmp_path, answer_weight=0.0).rank(query)
    question, reply = 10, 11
    assert score(with_rule, reply) >= 0.8 * score(with_rule, question) - 1e-9
    assert score(without, reply) < 0.8 * score(without, question)
    assert [h.turn_number for h in with_rule.turns[:3]].count(reply) == 1


async def test_longer_turn_gains_on_a_short_one(db: Database, tmp_path: Path) -> None:
    await add_conversation(db, "conv-short", [("user", "Pottery, yes!")])
    long_turn = (
        "I signed up for a pottery class yesterday; we threw bowls on the wheel, glazed "
        "them in blue and the teacher showed us how to fire them in the kiln at home."
    )
    await add_conversation(db, "conv-long", [("user", long_turn)])

    def ratio(ranking) -> float:  # type: ignore[no-untyped-def]
        by_conv = {h.conversation_id: h.score for h in ranking.turns}
        return by_conv["conv-long"] / by_conv["conv-short"]

    with_prior = await _service(db, tmp_path).rank("pottery")
    without = await _service(db, tmp_path, length_weight=0.0).rank("pottery")
    assert without.turns[0].conversation_id == "conv-short"  # bm25 favours the short turn
    assert ratio(with_prior) > ratio(without) + 0.05


def test_has_time_words_answers_like_the_pattern() -> None:
    """The per-word cache (``has_time_words``, used by the "when" prior and the learned
    ranker's features) says exactly what ``TIME_WORDS.search`` says."""
    from bot.ranking import TIME_WORDS, has_time_words

    texts = [
        "We met last Tuesday after lunch",
        "LAST",
        "the lastly-named item",
        "in 2023, not 20234 or 202",
        "Nächste Woche? Next week!",
        "weekends are for hiking",
        "a weekend trip in March",
        "monday_morning is one word",
        "nothing to see here",
        "",
        "Ago.",
    ]
    for text in texts:
        assert has_time_words(text) == bool(TIME_WORDS.search(text)), text
