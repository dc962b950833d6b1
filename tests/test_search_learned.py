"""The learned ranker: features, the model file, the re-ordering (docs/search.md, fourth pass)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bot.config.model import AppConfig
from bot.db import Database
from bot.ranking import asks
from bot.search import SearchService, learned
from bot.search.features import FEATURES, INDEX, turn_features
from bot.search.learned import DEFAULT_MODEL, LinearRanker, ModelError, load_models, rerank
from bot.search.training import VECTOR_FEATURES, Group, default_features, fit
from tests.recall_helpers import add_conversation, open_index

FILLER = [("user", f"Filler line number {i} about the weather and the bus.") for i in range(6)]
POTTERY = [
    *FILLER,
    ("user", "Did you go to the pottery class?"),
    (
        "assistant",
        "Yes! I made a blue bowl and a small mug at the pottery class on Sunday, and the "
        "teacher showed us how the kiln works.",
    ),
    ("user", "Pottery class sounds fun."),
    *FILLER,
]


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = await open_index(tmp_path / "conversations.db")
    await add_conversation(database, "conv-pottery", POTTERY)
    await add_conversation(database, "conv-other", [("user", "A bowl of soup for dinner.")])
    yield database
    await database.close()


def _service(db: Database, tmp_path: Path, **search: object) -> SearchService:
    config = AppConfig(data_dir=tmp_path)
    for key, value in search.items():
        setattr(config.search, key, value)
    return SearchService(config, db)  # no embedder: keyword-only


def _column(matrix: np.ndarray, name: str) -> np.ndarray:
    return matrix[:, INDEX[name]]


async def test_features_of_a_small_store(db: Database, tmp_path: Path) -> None:
    service = _service(db, tmp_path, ranker="rules")
    scored = await service.scored("When did they make a bowl at the pottery class?")
    idx = scored.order[:10]
    x = turn_features(scored, idx)
    assert x.shape == (len(idx), len(FEATURES)) and x.dtype == np.float32
    rows = scored.rows
    numbers = [rows.number[i] for i in idx.tolist()]
    at = {(rows.conv[i], rows.number[i]): j for j, i in enumerate(idx.tolist())}
    answer, question = at[("conv-pottery", 8)], at[("conv-pottery", 7)]
    # query content terms: bowl, pottery, class (stop words and "when"/"make" left out)
    assert _column(x, "coverage")[answer] == pytest.approx(1.0)
    assert _column(x, "coverage")[question] == pytest.approx(2 / 3)
    assert _column(x, "asks")[question] == 1 and _column(x, "asks")[answer] == 0
    assert _column(x, "prev_asks")[answer] == 1 and _column(x, "prev_asks")[question] == 0
    assert _column(x, "prev_base")[answer] == pytest.approx(scored.signals["base"][idx[question]])
    assert _column(x, "chars")[answer] == pytest.approx(math.log1p(len(POTTERY[7][1])), rel=1e-6)
    assert _column(x, "kw_raw").tolist() == pytest.approx(scored.kw_raw[idx].tolist(), rel=1e-6)
    assert _column(x, "final").tolist() == pytest.approx(scored.final[idx].tolist(), rel=1e-6)
    assert _column(x, "final_rank").tolist() == pytest.approx(np.log1p(np.arange(len(idx))))
    assert _column(x, "time_words")[answer] == 1  # "Sunday"
    assert _column(x, "when_time")[answer] == 1
    # keyword-only: no vector feature, and the query's own columns are the same everywhere
    assert not x[:, [INDEX[f] for f in VECTOR_FEATURES]].any()
    assert set(_column(x, "q_when")) == {1.0} and set(_column(x, "q_what")) == {0.0}
    assert len(set(numbers)) == len(numbers)
    other = [j for j, i in enumerate(idx.tolist()) if rows.conv[i] == "conv-other"]
    assert other and _column(x, "coverage")[other[0]] == pytest.approx(1 / 3)  # "bowl"


def test_the_shipped_model_file_loads() -> None:
    models = load_models(DEFAULT_MODEL)
    assert set(models) == {"hybrid", learned.NO_TERMS, "keyword"}
    assert set(models["hybrid"].features) == set(default_features(True))
    assert not set(models["keyword"].features) & VECTOR_FEATURES
    for model in models.values():
        assert np.all(np.isfinite(model.weights)) and np.any(model.weights != 0)
    body = json.loads(DEFAULT_MODEL.read_text())
    assert body["about"]["cross_validated"]["hybrid"]["learned"] > 0


def test_a_bad_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError):
        LinearRanker(("no_such_feature",), np.zeros(1), np.ones(1), np.ones(1))
    with pytest.raises(ModelError):
        LinearRanker(("chars", "words"), np.zeros(2), np.ones(2), np.ones(1))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    cfg = AppConfig().search.model_copy(update={"ranker_model": broken})
    assert learned.model_for(cfg, "hybrid") is None  # the rules rank alone
    rules = AppConfig().search.model_copy(update={"ranker": "rules"})
    assert learned.model_for(rules, "hybrid") is None


def _one_feature(path: Path, name: str, weight: float) -> Path:
    model = LinearRanker((name,), np.zeros(1), np.ones(1), np.asarray([weight]))
    learned.save_models(path, {"keyword": model, "hybrid": model}, {})
    return path


async def test_rerank_follows_the_model_and_keeps_scores_monotonic(
    db: Database, tmp_path: Path
) -> None:
    query = "pottery class bowl"
    rules = await _service(db, tmp_path, ranker="rules").scored(query)
    longest = _one_feature(tmp_path / "chars.json", "chars", 1.0)
    shortest = _one_feature(tmp_path / "short.json", "chars", -1.0)
    for path, sign in ((longest, 1), (shortest, -1)):
        got = await _service(db, tmp_path, ranker_model=path).rank(query)
        rows = rules.rows
        length = {rows.ids[i]: len(rows.content[i]) for i in range(len(rows.ids))}
        depth = min(60, len(rules.order))
        top = [length[t.turn_id] for t in got.turns[:depth]]
        assert top == sorted(top, reverse=sign > 0)
        scores = [t.score for t in got.turns]
        assert scores == sorted(scores, reverse=True)  # the rules' scores, handed out in order
        assert sorted(scores[:depth]) == pytest.approx(sorted(rules.final[rules.order[:depth]]))
        # conversations by their best turn
        assert got.conversations[0][0] == got.turns[0].conversation_id


async def test_depth_bounds_the_reordering(db: Database, tmp_path: Path) -> None:
    query = "pottery class bowl"
    rules = await _service(db, tmp_path, ranker="rules").scored(query)
    model = LinearRanker(("chars",), np.zeros(1), np.ones(1), np.asarray([-1.0]))
    out = rerank(rules, model, 3)
    assert sorted(out.order[:3].tolist()) == sorted(rules.order[:3].tolist())
    assert out.order[3:].tolist() == rules.order[3:].tolist()
    assert rerank(rules, model, 1) is rules


async def test_the_shipped_model_orders_a_store(db: Database, tmp_path: Path) -> None:
    """Keyword-only (the degraded mode): the shipped keyword model decides the order, and
    it puts the reply that holds the fact first, where the rules put the question that
    repeats the words."""
    query = "What did they make at the pottery class?"
    rules_service = _service(db, tmp_path, ranker="rules")
    rules = await rules_service.scored(query)
    got = await _service(db, tmp_path).rank(query)
    assert got.method == "keyword"
    model = load_models(DEFAULT_MODEL)["keyword"]
    idx = rules.order[:60]
    expected = idx[np.argsort(-model.score(turn_features(rules, idx)), kind="stable")]
    assert [t.turn_id for t in got.turns[: len(idx)]] == [rules.rows.ids[i] for i in expected]
    number = {t.turn_id: t.turn_number for t in got.turns}
    assert number[got.turns[0].turn_id] == 8  # the reply with the bowl and the mug
    assert [rules.rows.number[i] for i in rules.order[:1]] != [8]


async def test_identifier_queries_keep_the_rules_order(db: Database, tmp_path: Path) -> None:
    await add_conversation(db, "conv-code", [("user", "The door code is QX-55821.")])
    path = _one_feature(tmp_path / "short.json", "chars", -1.0)
    query = "pottery QX-55821"
    rules = await _service(db, tmp_path, ranker="rules").rank(query)
    got = await _service(db, tmp_path, ranker_model=path).rank(query)
    assert [t.turn_id for t in got.turns] == [t.turn_id for t in rules.turns]
    assert learned.has_identifier(query) and not learned.has_identifier("pottery class")


@pytest.mark.parametrize("query", ["QX55821", "pottery A380", "tokenzqc9m3"])
def test_a_code_written_as_one_word_is_an_identifier(query: str) -> None:
    # Regression: "tokenzqc9m3", unique to one turn, found its conversation, but the
    # model ranked the conversation's likelier-looking turns above it: the snippet was
    # a turn without the code (the rules' order puts the exact word first)
    assert learned.has_identifier(query)


@pytest.mark.parametrize("query", ["my 18th birthday", "at 10am", "music of the 90s", "a 5km run"])
def test_a_number_with_an_ending_is_no_identifier(query: str) -> None:
    assert not learned.has_identifier(query)


def test_fit_learns_which_feature_marks_the_evidence() -> None:
    rng = np.random.default_rng(7)
    groups = []
    for _ in range(40):
        x = rng.normal(size=(20, len(FEATURES))).astype(np.float32)
        labels = (x[:, INDEX["coverage"]] > 1.0).astype(np.int8)
        groups.append(Group(x, labels))
    features = ("coverage", "chars", "words")
    model = fit(groups, features)
    assert model.weights[0] > 5 * max(abs(model.weights[1]), abs(model.weights[2]))
    again = fit(groups, features)
    assert np.array_equal(model.weights, again.weights)  # deterministic
    x = groups[0].features
    order = np.argsort(-model.score(x))
    positives = int(groups[0].labels.sum())
    assert set(order[:positives].tolist()) == set(np.flatnonzero(groups[0].labels).tolist())


ZH_FILLER = [("user", f"今天的天气不错，第{i}路公交车很准时。") for i in range(6)]
ZH_POTTERY = [
    *ZH_FILLER,
    ("user", "你去上陶艺课了吗？"),
    (
        "assistant",
        "去了！周日的陶艺课上我做了一个蓝色的碗和一个小杯子，老师还教我们窑是怎么工作的。",
    ),
    ("user", "陶艺课听起来很有趣。"),
    *ZH_FILLER,
]


async def test_chinese_query_terms_are_covered_as_english_ones_are(tmp_path: Path) -> None:
    # Regression: a run of Han characters was one term (its 5-character stem): a Chinese
    # query's terms were in no turn, every coverage feature was 0 and the learned ranker
    # ranked Chinese without the evidence it weighs most in English. Pieces of the run
    # (pairs of characters, a one-character word itself) are the terms now: the same
    # 1, 2/3, 1/3 as the English store above.
    database = await open_index(tmp_path / "zh.db")
    try:
        await add_conversation(database, "conv-pottery", ZH_POTTERY)
        await add_conversation(database, "conv-other", [("user", "晚饭喝了一碗汤。")])
        scored = await _service(database, tmp_path, ranker="rules").scored("陶艺课 碗")
        idx = scored.order[:10]
        x = turn_features(scored, idx)
        at = {(scored.rows.conv[i], scored.rows.number[i]): j for j, i in enumerate(idx.tolist())}
        coverage = _column(x, "coverage")
        assert coverage[at[("conv-pottery", 8)]] == pytest.approx(1.0)
        assert coverage[at[("conv-pottery", 7)]] == pytest.approx(2 / 3)
        assert coverage[at[("conv-other", 1)]] == pytest.approx(1 / 3)
        assert _column(x, "win_coverage")[at[("conv-pottery", 6)]] == pytest.approx(2 / 3)
        question = await _service(database, tmp_path, ranker="rules").scored(
            "他们什么时候在陶艺课上做了碗？"
        )
        best = turn_features(question, question.order[:3])
        assert _column(best, "coverage").max() > 0
        # and the shipped model orders it as it orders the English store: the answer, the
        # reply after it, then the question (a question asked with "？" is one too)
        ranked = await _service(database, tmp_path).scored("陶艺课 碗")
        assert [ranked.rows.number[i] for i in ranked.order[:3].tolist()] == [8, 9, 7]
        # 什么时候 asks "when" (session 21, bot/cjk_dates.py): after the answer come the
        # turns with time words, the filler's 今天 ("today"), as an English store whose
        # filler says "Today ..." ranks them for "When did they make a bowl ...?"
        ranked = await _service(database, tmp_path).scored("他们什么时候在陶艺课上做了碗？")
        top = [ranked.rows.number[i] for i in ranked.order[:3].tolist()]
        assert top[0] == 8 and set(top[1:]) == {6, 10}, top
    finally:
        await database.close()


def test_a_full_width_or_arabic_question_mark_asks() -> None:
    # Regression: only "?" made a turn a question; "你去了吗？" and "هل ذهبت؟" did not.
    assert asks("你去上陶艺课了吗？") and asks("هل ذهبت؟") and asks("Did you go? ")
    assert not asks("去了！")
