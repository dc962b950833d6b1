"""Term vectors and the learned ranker's soft coverage (docs/search.md "Fifth pass")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bot.bench.search_store import add_term_vectors
from bot.config.model import AppConfig
from bot.db import Database
from bot.search import SearchService, learned, soft
from bot.search.features import INDEX, turn_features
from bot.search.learned import DEFAULT_MODEL, NO_TERMS, load_models, model_key
from bot.search.soft import content_words
from bot.search.training import TERM_FEATURES, VECTOR_FEATURES, default_features
from bot.term_vectors import Bound, TermCache, missing
from bot.vectors import VectorIndex
from tests.recall_helpers import add_conversation, open_index

MUSIC = [
    ("user", "Caroline: How was your weekend?"),
    ("assistant", "Mel: I practised the violin and the clarinet for hours, my fingers hurt."),
    ("user", "Caroline: Nice. I repaired the garden fence and painted the shed."),
    ("assistant", "Mel: The weather was lovely for that."),
]
QUESTION = "What instruments does Mel play?"


def _soft_config(tmp_path: Path, on: bool = True) -> AppConfig:
    config = AppConfig(data_dir=tmp_path)
    config.search.soft_coverage = on
    return config


def _unit(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_content_words_leave_out_labels_stop_words_numbers_and_short_words() -> None:
    words = content_words("Mel: I played the violin 20 times in 2023, it's a joy on TV")
    assert words == frozenset({"played", "violin", "times", "joy"})
    assert "mel" not in content_words("Mel: hello violin")  # the sender label is not text
    cache = TermCache(4)
    words = cache.vocabulary.words

    def turn(text: str) -> set[str]:
        (ids,) = cache.turns([7], [text])
        return {words[i] for i in ids.tolist()}

    assert turn("Mel: hello violin") == {"hello", "violin"}
    first = cache.turns([7], ["Mel: hello violin"])[0]
    assert cache.turns([7], ["Mel: hello violin"])[0] is first  # remembered by turn id
    # another text under the same id (a rebuilt index): tokenised again
    assert turn("Mel: cello lessons") == {"cello", "lessons"}


def _vectors_of(bound: Bound, words: list[str]) -> dict[str, list[float]]:
    """word -> its vector, for the ``words`` that have one (through ``bound``)."""
    cols, matrix = bound.vectors(bound.ids(words))
    return {w: matrix[c].tolist() for w, c in zip(words, cols.tolist(), strict=True) if c >= 0}


async def test_term_cache_reads_stored_words_and_stays_bounded(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "c.db")
    words = ["alpha", "bravo", "charlie"]
    vectors = np.eye(3, 4, dtype=np.float32)
    await db.run(lambda c: add_vectors(c, words, vectors))
    assert await db.run(lambda c: missing(c, ["bravo", "delta", "alpha"])) == ["delta"]
    cache = TermCache(4, size=2)
    got = await db.run(lambda c: _vectors_of(cache.bind(c), ["alpha", "delta", "charlie"]))
    assert sorted(got) == ["alpha", "charlie"]
    assert got["charlie"] == [0.0, 0.0, 1.0, 0.0]
    got = await db.run(lambda c: _vectors_of(cache.bind(c), ["bravo", "charlie", "bravo"]))
    assert len(cache) == 1 and got["bravo"] == [0.0, 1.0, 0.0, 0.0]
    # full: the cache started over ("bravo" in row 0); the others are read again from disk
    got = await db.run(lambda c: _vectors_of(cache.bind(c), ["alpha", "charlie", "bravo"]))
    for i, word in enumerate(words):
        assert got[word] == vectors[i].tolist()
    await db.close()


async def test_term_cache_grows_its_matrix(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "c.db")
    words = [f"word{i:05d}" for i in range(1500)]  # more than the first 1,024 rows
    vectors = np.random.default_rng(3).standard_normal((1500, 4)).astype(np.float16)
    await db.run(lambda c: add_vectors(c, words, vectors))
    cache = TermCache(4, size=1200)
    for _ in range(2):  # from disk; then partly from memory (the cache started over)
        got = await db.run(lambda c: _vectors_of(cache.bind(c), words))
        for i in (0, 1023, 1024, 1499):
            assert got[words[i]] == vectors[i].astype(np.float32).tolist()
        assert len(got) == 1500 and 0 < len(cache) <= 1200
    await db.close()


def table_source(table: dict[str, np.ndarray], asked: list[set[str]] | None = None) -> Bound:
    """A term cache reading hand-made vectors from ``table`` (what it is asked for goes to
    ``asked``)."""
    dims = len(next(iter(table.values())))

    def read(words: list[str]) -> tuple[list[str], np.ndarray]:
        if asked is not None:
            asked.append(set(words))
        found = [w for w in words if w in table]
        return found, np.asarray([table[w] for w in found], np.float32).reshape(len(found), dims)

    return Bound(TermCache(dims), read)


def add_vectors(conn, words: list[str], vectors: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    from bot.term_vectors import store

    store(conn, words, vectors)


async def _keyword_scored(tmp_path: Path, db: Database, query: str):  # type: ignore[no-untyped-def]
    service = SearchService(AppConfig(data_dir=tmp_path), db)
    service.config.search.ranker = "rules"
    return await service.scored(query)


async def test_soft_features_match_words_by_meaning(tmp_path: Path) -> None:
    """Hand-made vectors: "instruments" is close to "violin" and "clarinet", far from the
    garden words; the violin turn gets the soft match, the fence turn does not."""
    db = await open_index(tmp_path / "c.db")
    await add_conversation(db, "conv-a", MUSIC)
    scored = await _keyword_scored(tmp_path, db, "Which instruments and a fence?")
    near, far = _unit(1, 0.2, 0, 0), _unit(0, 0, 1, 0)
    table = {"instruments": _unit(1, 0, 0, 0), "violin": near, "clarinet": near}
    table["fence"] = _unit(0, 1, 0, 0)
    for word in ("repaired", "garden", "painted", "shed", "weather", "lovely", "weekend"):
        table[word] = far
    asked: list[set[str]] = []
    soft.attach(scored, table_source(table, asked), depth=10)
    assert {"instruments", "fence", "violin", "garden"} <= asked[0]
    idx = scored.order[:10]
    x = turn_features(scored, idx)
    at = {scored.rows.number[i]: j for j, i in enumerate(idx.tolist())}
    col = {name: x[:, INDEX[name]] for name in soft.SOFT_FEATURES}
    violin, fence = at[2], at[3]
    cosine = float(near @ table["instruments"])
    # two query words: "instruments" (best match: violin) and "fence" (exact in turn 3)
    assert col["soft_cov"][violin] == pytest.approx((cosine + float(near @ table["fence"])) / 2)
    assert col["soft_max"][violin] == pytest.approx(cosine)  # not in the turn literally
    assert col["soft_new6"][violin] == 1 and col["soft_new6"][fence] == 0
    assert col["soft_max"][fence] == pytest.approx(0.0)  # its only match is literal
    assert col["soft_hit6"][fence] == pytest.approx(0.5)
    # turn 3's window holds the violin turn: both words are matched there
    assert col["soft_win"][fence] == pytest.approx((cosine + 1.0) / 2)
    assert col["soft_prev"][fence] == pytest.approx(col["soft_cov"][violin])
    assert col["conv_soft"][violin] == col["conv_soft"][fence] > col["soft_cov"][violin]
    # without term vectors every soft column is 0 and the ranker picks its other model
    scored.terms = None
    assert not turn_features(scored, idx)[:, [INDEX[f] for f in TERM_FEATURES]].any()
    await db.close()


def test_models_and_their_features() -> None:
    models = load_models(DEFAULT_MODEL)
    assert set(models) == {"hybrid", NO_TERMS, "keyword"}
    assert TERM_FEATURES <= set(models["hybrid"].features)
    assert not TERM_FEATURES & set(models[NO_TERMS].features)
    assert not (TERM_FEATURES | VECTOR_FEATURES) & set(models["keyword"].features)
    assert set(default_features(True, terms=False)) == set(models[NO_TERMS].features)
    assert set(default_features(True)) == set(models["hybrid"].features)


async def test_term_vectors_follow_the_turns_and_the_model(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "c.db")
    vectors = VectorIndex(_soft_config(tmp_path), db, embedder)
    assert await vectors.open() and vectors.terms_ready and not vectors.stale  # empty store
    await add_conversation(db, "conv-a", MUSIC[:2])
    await vectors.index_turns("conv-a")
    stored = {r[0] for r in await db.fetchall("SELECT term FROM term_vectors")}
    assert stored == set(content_words(MUSIC[0][1]) | content_words(MUSIC[1][1]))
    # a model change drops them with the turn vectors; reindex_all rebuilds and completes
    await db.execute(
        "UPDATE index_meta SET value = 'another-model@384' WHERE key = 'embedding_model'"
    )
    reopened = VectorIndex(_soft_config(tmp_path), db, embedder)
    assert await reopened.open() and reopened.stale and not reopened.terms_ready
    assert await db.fetchone("SELECT count(*) FROM term_vectors") == (0,)
    done = await reopened.reindex_all()
    assert done["terms"] == len(stored) and reopened.terms_ready and not reopened.stale
    await db.close()


async def test_with_soft_coverage_off_no_word_is_embedded_and_a_later_switch_completes(
    tmp_path: Path, embedder
) -> None:  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "c.db")
    on = VectorIndex(_soft_config(tmp_path), db, embedder)
    assert await on.open() and on.terms_ready  # an empty store, complete
    await add_conversation(db, "conv-a", MUSIC[:2])
    await on.index_turns("conv-a")
    words = (await db.fetchone("SELECT count(*) FROM term_vectors") or (0,))[0]
    assert words > 0
    off = VectorIndex(_soft_config(tmp_path, on=False), db, embedder)  # nobody reads them
    assert await off.open() and not off.stale and not off.terms_ready
    await add_conversation(db, "conv-b", MUSIC[2:])
    await off.index_turns("conv-b")
    assert await off.reindex_all() == {"turns": 0, "abbreviations": 0, "terms": 0}
    assert await db.fetchone("SELECT count(*) FROM term_vectors") == (words,)
    # conv-b's words are missing now: switched on again, the table is completed first
    again = VectorIndex(_soft_config(tmp_path), db, embedder)
    assert await again.open() and again.stale and not again.terms_ready
    done = await again.reindex_all()
    assert done["terms"] > 0 and again.terms_ready
    stored = {r[0] for r in await db.fetchall("SELECT term FROM term_vectors")}
    assert stored == set().union(*(content_words(text) for _, text in MUSIC))
    await db.close()


async def test_an_index_from_before_the_term_vectors_is_completed(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    db = await open_index(tmp_path / "c.db")
    await add_conversation(db, "conv-a", MUSIC)
    first = VectorIndex(_soft_config(tmp_path), db, embedder)
    await first.open()
    await first.reindex_all()
    await db.execute("DELETE FROM term_vectors")
    await db.execute("DELETE FROM index_meta WHERE key = 'term_vectors'")
    service = SearchService(_soft_config(tmp_path), db, embedder)
    assert await service.start()
    vectors = service.vectors
    assert vectors is not None and vectors.stale and not vectors.terms_ready
    # degraded mode: hybrid search ranks with the model that has no soft features
    scored = await service.scored(QUESTION)
    assert scored.method == "hybrid" and scored.terms is None and model_key(scored) == NO_TERMS
    page = await service.search(QUESTION)
    assert page.method == "hybrid" and page.results
    await vectors.reindex_all()
    assert vectors.terms_ready
    scored = await service.scored(QUESTION)
    assert scored.terms is not None and model_key(scored) == "hybrid"
    service.term_features = False
    assert model_key(await service.scored(QUESTION)) == NO_TERMS
    # switched off: the model without the soft features ranks
    service.term_features = True
    service.config.search.soft_coverage = False
    scored = await service.scored(QUESTION)
    assert scored.terms is None and model_key(scored) == NO_TERMS
    # on by default (issue 8: it meets the latency goal, docs/benchmarks.md session 9)
    assert AppConfig().search.soft_coverage is True
    await db.close()


async def test_real_word_vectors_find_the_instruments(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """MiniLM's own word vectors: "instruments" is matched in the violin turn only."""
    db = await open_index(tmp_path / "c.db")
    service = SearchService(_soft_config(tmp_path), db, embedder)
    await service.start()  # an empty index: its words arrive with the turns
    await add_conversation(db, "conv-a", MUSIC)
    assert service.vectors is not None
    await service.vectors.index_turns("conv-a")
    scored = await service.scored(QUESTION)
    assert scored.terms is not None and "instruments" not in scored.terms  # no turn has it
    await db.run(lambda c: add_vectors(c, ["instruments"], embedder.embed_sync(["instruments"])))
    service.config.search.ranker = "rules"
    scored = await service.scored(QUESTION)
    idx = scored.order[:10]
    x = turn_features(scored, idx)
    at = {scored.rows.number[i]: j for j, i in enumerate(idx.tolist())}
    best = x[:, INDEX["soft_max"]]
    assert best[at[2]] >= 0.5 and best[at[2]] > best[at[3]] + 0.15
    ranking = await service.rank(QUESTION)
    assert ranking.turns and learned.model_key(scored) == "hybrid"
    await db.close()


async def test_bench_search_store_gets_term_vectors(tmp_path: Path) -> None:
    db = await open_index(tmp_path / "c.db")
    added = await db.run(lambda c: add_term_vectors(c, 8, "m@8"))
    assert added > 1000
    assert await db.run(lambda c: add_term_vectors(c, 8, "m@8")) == 0  # already there
    meta = await db.fetchone("SELECT value FROM index_meta WHERE key = 'term_vectors'")
    assert meta == ("m@8",)
    await db.close()


async def test_the_default_configuration_ranks_with_the_soft_features(
    tmp_path: Path, embedder
) -> None:  # type: ignore[no-untyped-def]
    """Soft coverage is on by default: a store indexed with the defaults gets its words'
    vectors as turns arrive, and hybrid search ranks with the model that reads them."""
    db = await open_index(tmp_path / "c.db")
    service = SearchService(AppConfig(data_dir=tmp_path), db, embedder)
    assert await service.start()
    await add_conversation(db, "conv-a", MUSIC)
    assert service.vectors is not None and service.vectors.terms_ready
    await service.vectors.index_turns("conv-a")
    stored = {r[0] for r in await db.fetchall("SELECT term FROM term_vectors")}
    assert stored == set().union(*(content_words(text) for _, text in MUSIC))
    scored = await service.scored(QUESTION)
    assert scored.terms is not None and model_key(scored) == "hybrid"
    await db.close()


async def test_a_han_run_is_compared_by_its_character_pairs(tmp_path: Path) -> None:
    """Regression: soft coverage took a run of Han characters for one word, so the
    question "东京塔在哪里" (one "word") and the turn "我们去了东京塔看夜景" (another)
    shared nothing, literally or by meaning. Their character pairs are compared now, as
    the keyword side reads such runs (docs/search.md "Languages written without spaces")."""
    assert soft.query_words("东京塔在哪里？", {})[:2] == ["东京", "京塔"]
    assert {"东京", "京塔", "夜景"} <= content_words("Mel: 我们去了东京塔看夜景")
    assert {"東京", "タワ"} <= content_words("東京タワーに行った")  # NFKC, kana too
    # Latin words keep their 3-letter floor; a piece of such a run is content at 1-2
    assert not soft.is_content_word("to") and soft.is_content_word("猫")
    db = await open_index(tmp_path / "c.db")
    trip = [
        ("user", "Mei: 我们去了东京塔看夜景"),
        ("assistant", "Li: 我在家里修了花园的篱笆"),
    ]
    await add_conversation(db, "conv-zh", trip)
    scored = await _keyword_scored(tmp_path, db, "东京塔")
    table = {w: _unit(1, 0, 0, 0) for w in ("东京", "京塔")}
    for word in content_words(trip[0][1]) | content_words(trip[1][1]):
        table.setdefault(word, _unit(0, 0, 1, 0))
    soft.attach(scored, table_source(table), depth=10)
    assert scored.terms is not None and scored.terms.query == ("东京", "京塔")
    idx = scored.order[:10]
    x = turn_features(scored, idx)
    at = {scored.rows.number[i]: j for j, i in enumerate(idx.tolist())}
    tower = at[1]
    assert x[tower, INDEX["soft_cov"]] == pytest.approx(1.0)  # both pairs, literally
    assert x[tower, INDEX["soft_hit6"]] == pytest.approx(1.0)
    await db.close()
