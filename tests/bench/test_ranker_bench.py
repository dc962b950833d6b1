"""``bench ranker``: leave-one-conversation-out figures and a model file that loads."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import pytest

from bot.bench import ranker
from bot.search.learned import NO_TERMS, load_models
from bot.search.training import TERM_FEATURES, VECTOR_FEATURES
from tests.bench.test_long_memory_stores import DATA, bench_args, local_model  # noqa: F401


def _args(*argv: str) -> argparse.Namespace:
    return bench_args(ranker.add_arguments, *argv)


async def test_cross_validates_and_writes_a_model(tmp_path: Path) -> None:
    second = copy.deepcopy(DATA[0])
    second["sample_id"] = "s2"
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([DATA[0], second]))
    out = tmp_path / "model.json"
    result = await ranker.run(_args(str(path), "--out", str(out), "--epochs", "50", "--pooled"))
    assert result["conversations"] == 2 and result["written"] == str(out)
    for method in ("hybrid", NO_TERMS, "keyword"):
        for run in ("rules", "learned_cross_validated"):
            figures = result[method][run]
            assert 0 <= figures["turn_recall@10"] <= 1
            assert figures["per_category"]["single-hop"]["queries"] == 4
            pooled = result[method]["pooled"][run]  # both conversations in one store
            assert pooled["per_category"]["single-hop"]["queries"] == 4
    models = load_models(out)
    assert set(models) == {"hybrid", NO_TERMS, "keyword"}
    assert not set(models["keyword"].features) & (VECTOR_FEATURES | TERM_FEATURES)
    assert not set(models[NO_TERMS].features) & TERM_FEATURES
    assert TERM_FEATURES <= set(models["hybrid"].features)
    about = json.loads(out.read_text())["about"]
    assert about["epochs"] == 50 and set(about["cross_validated"]) == set(models)


async def test_needs_two_conversations(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(DATA))
    with pytest.raises(SystemExit):
        await ranker.run(_args(str(path)))
