"""``bench locomo --stores DIR``: stores are kept, reused while their inputs are unchanged."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.bench import long_memory as locomo
from bot.bench.embed import model_config
from bot.embedding import EmbeddingService
from tests.recall_helpers import model_path
from tests.sqlite_driver import sqlite3

DATA = [
    {
        "sample_id": "s1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "10:00 am on 3 March, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! How old is Pixel?"},
            ],
            "session_2_date_time": "4:30 pm on 9 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "I ran my first marathon in Berlin."},
                {"speaker": "Ana", "dia_id": "D2:2", "text": "Congrats, what was your time?"},
            ],
        },
        "qa": [
            {
                "question": "What is the name of Ana's cat?",
                "answer": "Pixel",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Where did Ben run a marathon?",
                "answer": "Berlin",
                "evidence": ["D2:1"],
                "category": 4,
            },
        ],
    }
]


@pytest.fixture(autouse=True)
def local_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The local model, found as the daemon finds it; run from an empty directory.
    (Autouse here and in every module that imports it.)"""
    monkeypatch.setenv("MY_AGENT_EMBEDDING_MODEL_PATH", str(model_path()))
    monkeypatch.chdir(tmp_path)


def bench_args(
    add_arguments: Callable[[argparse.ArgumentParser], None], *argv: str
) -> argparse.Namespace:
    """A benchmark's command line parsed by its own ``add_arguments``."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def _args(*argv: str) -> argparse.Namespace:
    return bench_args(locomo.add_arguments, *argv)


async def test_stores_are_reused_with_the_same_figures(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(DATA))
    stores = tmp_path / "stores"
    first = await locomo.run(_args(str(path), "--stores", str(stores)))
    assert first["reused_stores"] == 0 and first["load_seconds"] > 0
    assert (stores / "s0" / "bench-store.json").exists()
    assert (stores / "pooled" / "bench-store.json").exists()
    second = await locomo.run(_args(str(path), "--stores", str(stores)))
    assert second["reused_stores"] == 1 and second["load_seconds"] == 0
    for key in ("turn_recall@10", "turn_mrr", "session_recall@5"):
        assert second[key] == first[key]
        assert second["baseline_bm25"][key] == first["baseline_bm25"][key]
        assert second["pooled"][key] == first["pooled"][key]
    assert second["queries"] == first["queries"] == 2


async def test_fingerprint_follows_what_is_embedded(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(DATA))
    samples = locomo.load_samples(path)
    config, _ = model_config(None)
    embedder = EmbeddingService(config.embedding)
    base = locomo.fingerprint(samples, embedder, config)
    assert locomo.fingerprint(samples, embedder, config) == base
    wider = config.model_copy(deep=True)
    wider.embedding.turn_window = config.embedding.turn_window + 1
    assert locomo.fingerprint(samples, embedder, wider) != base  # other windows embedded
    edited = locomo.load_samples(path)
    number, stamp, turns = edited[0].sessions[0]
    edited[0].sessions[0] = (number, stamp, [*turns[:-1], (turns[-1][0], "Ben", "Ben: changed")])
    assert locomo.fingerprint(edited, embedder, config) != base  # another turn text


async def test_a_store_from_other_inputs_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(DATA))
    stores = tmp_path / "stores"
    await locomo.run(_args(str(path), "--stores", str(stores), "--no-pooled"))
    manifest = stores / "s0" / "bench-store.json"
    data = json.loads(manifest.read_text())
    data["fingerprint"] = "something else"
    manifest.write_text(json.dumps(data))
    again = await locomo.run(_args(str(path), "--stores", str(stores), "--no-pooled"))
    assert again["reused_stores"] == 0 and again["turn_recall@10"] == 1.0


async def test_a_kept_store_without_term_vectors_is_completed(tmp_path: Path) -> None:
    """A store kept from before the term vectors is reused and completed, not ranked
    without them (the soft-coverage features would be silently missing)."""
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(DATA))
    stores = tmp_path / "stores"
    soft = tmp_path / "soft.yaml"  # term vectors are built only with soft coverage on
    soft.write_text("search:\n  soft_coverage: true\n")
    await locomo.run(
        _args(str(path), "--stores", str(stores), "--no-pooled", "--config", str(soft))
    )
    conn = sqlite3.connect(stores / "s0" / "conversations" / "conversations.db")
    words = conn.execute("SELECT count(*) FROM term_vectors").fetchone()[0]
    assert words > 0
    conn.execute("DELETE FROM term_vectors")
    conn.execute("DELETE FROM index_meta WHERE key = 'term_vectors'")
    conn.commit()
    conn.close()
    again = await locomo.run(
        _args(str(path), "--stores", str(stores), "--no-pooled", "--config", str(soft))
    )
    assert again["reused_stores"] == 1
    conn = sqlite3.connect(stores / "s0" / "conversations" / "conversations.db")
    assert conn.execute("SELECT count(*) FROM term_vectors").fetchone()[0] == words
    assert conn.execute("SELECT value FROM index_meta WHERE key = 'term_vectors'").fetchone()
    conn.close()
