"""Soft coverage by word ids (docs/search.md "session 8") gives the features the first,
set-based version gave: that version is kept here as the reference, written plainly."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from bot.config.model import AppConfig
from bot.ranking import Neighbourhood
from bot.search import SearchService, soft
from bot.search.fusion import Scored
from bot.search.soft import SOFT_FEATURES, content_words, query_words
from tests.recall_helpers import add_conversation, open_index
from tests.test_search_soft import table_source

WORDS = (
    "violin clarinet cello guitar garden fence shed painted repaired weather lovely "
    "weekend hiking camping camped camp dog dogs puppy cat pets museum painting paintings "
    "instrument instruments music played playing concert"
).split()
FILLER = "the a and I it's we were 2023 42 on TV ok of to".split()


def reference(scored: Scored, table: dict[str, np.ndarray], depth: int) -> np.ndarray:
    """The soft features of ``scored``'s best ``depth`` rows, as the set-based version
    computed them: every row's words a set of strings, a loop per query word."""
    rows = scored.rows
    n = len(rows.ids)
    hood = Neighbourhood(rows.codes, np.asarray(rows.number, dtype=np.int64))

    def neighbour(offset: int) -> np.ndarray:
        out = np.full(n, -1, dtype=np.int64)
        got, src = hood.shift(offset, 1)
        out[got] = src
        return out

    idx = scored.order[:depth]
    prev, after = neighbour(-1)[idx], neighbour(1)[idx]
    query = [w for w in query_words(scored.query, scored.names) if w in table]
    k = len(idx)
    out = np.zeros((k, len(SOFT_FEATURES)))
    if not query or not k:
        return out
    qv = np.asarray([table[w] for w in query], np.float32)

    def best(row: int) -> np.ndarray:
        words = [w for w in content_words(rows.content[row]) if w in table] if row >= 0 else []
        if not words:
            return np.zeros(len(query))
        sims = np.einsum("wd,qd->wq", np.asarray([table[w] for w in words], np.float32), qv)
        return sims.max(axis=0).astype(np.float64)

    own = np.asarray([best(r) for r in idx.tolist()])
    before = np.asarray([best(r) for r in prev.tolist()])
    nxt = np.asarray([best(r) for r in after.tolist()])
    win = np.maximum(own, np.maximum(before, nxt))
    df = (own >= 0.6).sum(axis=0)
    idf = np.log((k + 1) / (df + 0.5))
    idf = idf / (idf.sum() or 1.0)
    literal = np.asarray(
        [
            [any(w[:5] == q[:5] for w in content_words(rows.content[r])) for q in query]
            for r in idx.tolist()
        ]
    )
    columns = {
        "soft_cov": own.mean(axis=1),
        "soft_idf": own @ idf,
        "soft_win": win.mean(axis=1),
        "soft_win_idf": win @ idf,
        "soft_prev": before.mean(axis=1),
        "soft_next": nxt.mean(axis=1),
        "soft_hit5": (own >= 0.5).mean(axis=1),
        "soft_hit6": (own >= 0.6).mean(axis=1),
        "soft_new5": ((own >= 0.5) & ~literal).sum(axis=1),
        "soft_new6": ((own >= 0.6) & ~literal).sum(axis=1),
        "soft_max": np.where(literal, 0.0, own).max(axis=1),
        "soft_ramp": np.clip((own - 0.3) / 0.7, 0.0, 1.0).mean(axis=1),
    }
    codes = rows.codes[idx].tolist()
    conv = {c: win[[j for j, d in enumerate(codes) if d == c]].max(axis=0) for c in codes}
    columns["conv_soft"] = np.asarray([conv[c].mean() for c in codes])
    for j, name in enumerate(SOFT_FEATURES):
        out[:, j] = columns[name]
    return out


def _turn(rng: random.Random) -> str:
    words = [rng.choice(WORDS + FILLER) for _ in range(rng.randint(0, 12))]
    words = [w.capitalize() if rng.random() < 0.1 else w for w in words]
    return f"{rng.choice(['Mel', 'Caroline'])}: {' '.join(words)}"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_word_ids_give_the_set_based_features(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    db = await open_index(tmp_path / "c.db")
    for c in range(3):
        turns = [("user" if i % 2 else "assistant", _turn(rng)) for i in range(30)]
        await add_conversation(db, f"conv-{c}", turns)
    vectors = np.random.default_rng(seed).standard_normal((len(WORDS), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # a few words have no vector yet (added in the background): they never match
    table = {w: v for w, v in zip(WORDS, vectors, strict=True) if w not in ("cat", "camp")}
    service = SearchService(AppConfig(data_dir=tmp_path), db)
    service.config.search.ranker = "rules"
    source = table_source(table)  # one cache for every query: its memory is exercised
    checked = 0
    for _ in range(12):
        query = " ".join(rng.choice([*WORDS, "what", "cat", "xylophone"]) for _ in range(3))
        scored = await service.scored(query)
        if not len(scored.order):
            continue
        soft.attach(scored, source, depth=20)
        got = soft.features(scored, scored.order[:20])
        want = reference(scored, table, 20)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
        checked += got.any()
    assert checked >= 6  # most queries matched something
    await db.close()
