"""The recall benchmarks run end to end on small inputs (same code paths as the real runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bot.bench import embed, locomo_metrics, search
from bot.bench import long_memory as locomo
from tests.recall_helpers import model_path, shared_dir


@pytest.fixture(autouse=True)
def _model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MY_AGENT_EMBEDDING_MODEL_PATH", str(model_path()))
    monkeypatch.chdir(tmp_path)  # benchmarks run from any directory


def _args(module, *argv: str) -> argparse.Namespace:  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_locomo_loader_on_the_dev_slice() -> None:
    samples = locomo.load_samples(shared_dir() / "bench" / "locomo_dev.json")
    assert len(samples) == 6
    assert all(q[1] in locomo.CATEGORIES for s in samples for q in s.questions)
    assert sum(len(s.questions) for s in samples) == 955  # categories 1-4, valid evidence
    for sample in samples:
        ids = {d for _, _, turns in sample.sessions for d, _, _ in turns}
        for _, _, evidence in sample.questions:
            assert evidence and evidence <= ids  # malformed ids parsed or dropped


def test_session_timestamp() -> None:
    assert locomo.session_timestamp("1:56 pm on 8 May, 2023") == "2023-05-08T13:56:00Z"
    assert locomo.session_timestamp("12:09 am on 13 September, 2023") == "2023-09-13T00:09:00Z"


async def test_locomo_run_on_a_tiny_file(tmp_path: Path) -> None:
    data = [
        {
            "sample_id": "t1",
            "conversation": {
                "speaker_a": "Ana",
                "speaker_b": "Ben",
                "session_1_date_time": "10:00 am on 3 March, 2023",
                "session_1": [
                    {
                        "speaker": "Ana",
                        "dia_id": "D1:1",
                        "text": "I adopted a grey cat named Pixel.",
                    },
                    {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! How old is Pixel?"},
                    {"speaker": "Ana", "dia_id": "D1:3", "text": "Two years old, very playful."},
                ],
                "session_2_date_time": "4:30 pm on 9 June, 2023",
                "session_2": [
                    {
                        "speaker": "Ben",
                        "dia_id": "D2:1",
                        "text": "I ran my first marathon in Berlin.",
                    },
                    {
                        "speaker": "Ana",
                        "dia_id": "D2:2",
                        "text": "Congratulations, what was your time?",
                    },
                    {
                        "speaker": "Ben",
                        "dia_id": "D2:3",
                        "text": "Four hours and ten minutes.",
                        "blip_caption": "a medal on a table",
                    },
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
                    "question": "When did Ben run a marathon?",
                    "answer": "June 2023",
                    "evidence": ["D2:1; D9:9"],
                    "category": 2,
                },
                {
                    "question": "What did Ben finish?",
                    "adversarial_answer": "x",
                    "evidence": ["D2:1"],
                    "category": 5,
                },
            ],
        }
    ]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    result = await locomo.run(_args(locomo, str(path)))
    for key in (
        "turn_recall@5",
        "turn_recall@10",
        "turn_recall@25",
        "turn_recall@50",
        "turn_mrr",
        "session_recall@5",
        "session_recall@10",
    ):
        assert key in result and key in result["baseline_bm25"] and key in result["baseline_dense"]
        assert key in result["pooled"]
    assert result["queries"] == 2  # category 5 excluded
    assert result["abbreviations"] == "extractive"
    assert result["method"] == "hybrid"
    assert set(result["per_category"]) == {"single-hop", "temporal"}
    assert result["turn_recall@10"] == 1.0  # six turns: everything is in the top 10
    assert result["session_recall@5"] == 1.0
    json.dumps(result)


async def test_search_bench_small() -> None:
    result = await search.run(
        _args(search, "--conversations", "40", "--turns", "6", "--queries", "5", "--warmup", "1")
    )
    assert result["turns"] == 240 and result["queries"] == 5
    assert result["method"] == ["hybrid"]
    for key in ("p50_ms", "p95_ms", "baseline_p50_ms", "baseline_p95_ms", "ratio"):
        assert result[key] > 0
    json.dumps(result)


async def test_embed_bench_small() -> None:
    result = await embed.run(_args(embed, "--texts", "12", "--words", "8"))
    for key in ("texts_per_s", "raw_texts_per_s", "ratio", "max_loop_lag_ms"):
        assert key in result
    assert result["texts_per_s"] > 0 and result["raw_texts_per_s"] > 0
    json.dumps(result)


def test_average_weights_by_queries_and_keeps_missing_categories() -> None:
    runs = [
        {
            "queries": 2,
            "turn_mrr": 1.0,
            "per_category": {"temporal": {"queries": 2, "turn_mrr": 1.0}},
        },
        {
            "queries": 1,
            "turn_mrr": 0.0,
            "per_category": {
                "temporal": {"queries": 1, "turn_mrr": 0.0},
                "open-domain": {"queries": 1, "turn_mrr": 1.0},
            },
        },
    ]
    out = locomo_metrics.average(runs)
    assert out["queries"] == 3 and out["turn_mrr"] == pytest.approx(0.6667)
    assert out["per_category"]["temporal"] == {"queries": 3, "turn_mrr": pytest.approx(0.6667)}
    assert out["per_category"]["open-domain"] == {"queries": 1, "turn_mrr": 1.0}
