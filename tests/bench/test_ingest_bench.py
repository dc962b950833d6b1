"""``my-agent bench ingest`` on a small load: every phase runs, every message is stored
and indexed (with its reply), and every mode is reported against the goals."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bot.bench import ingest, ingest_load


async def test_ingest_bench_small_run_reports_every_mode(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    ingest.add_arguments(parser)
    args = parser.parse_args(
        [
            "--messages", "60",
            "--parties", "6",
            "--latency-messages", "20",
            "--rate", "400",
            "--sequential-messages", "10",
            "--curve-rates", "100,200",
            "--curve-messages", "8",
            "--dir", str(tmp_path),
        ]
    )  # fmt: skip
    out = await ingest.run(args)
    assert out["messages"] == 60 and out["replies"] is True
    # user turn + the offline brain's reply for every message of every phase
    assert out["indexed_turns"] == out["indexed_turns_expected"] == (60 + 20 + 10 + 16) * 2
    assert [c["rate_msgs_per_s"] for c in out["latency_curve"]] == [100, 200]
    assert all(c["p99_ms"] > 0 and c["achieved_msgs_per_s"] > 0 for c in out["latency_curve"])
    assert all(c["baseline_p99_ms"] > 0 for c in out["latency_curve"])
    for key in (
        "throughput_msgs_per_s",
        "baseline_throughput_msgs_per_s",
        "ratio",
        "p50_ms",
        "p99_ms",
        "saturated_p99_ms",
        "sequential_p50_ms",
        "sequential_p99_ms",
        "baseline_p50_ms",
        "baseline_p99_ms",
        "baseline_open_p50_ms",
        "baseline_open_p99_ms",
        "written_bytes_per_message",
        "baseline_written_bytes_per_message",
    ):
        assert out[key] > 0, key
    assert set(out["goals_met"]) == {
        "throughput_msgs_per_s",
        "ratio",
        "p99_ms",
        "sequential_p99_ms",
        "saturated_p99_ms",
    }
    assert (tmp_path / "product" / "data" / "conversations").is_dir()
    # the members' replies yielded to the phases' floods, and the wait is reported
    assert out["replies_deferred"] >= 1
    assert out["latency_phase_replies_drain_seconds"] >= 0


async def test_ingest_bench_without_replies_indexes_only_the_messages(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    ingest.add_arguments(parser)
    args = parser.parse_args(
        ["--messages", "30", "--parties", "3", "--latency-messages", "0",
         "--sequential-messages", "5", "--no-replies", "--curve-rates", "",
         "--dir", str(tmp_path)]
    )  # fmt: skip
    out = await ingest.run(args)
    assert out["indexed_turns"] == out["indexed_turns_expected"] == 35
    assert out["p99_ms"] == 0  # no open-loop phase was asked for
    assert out["baseline_open_p99_ms"] is None


async def test_ingest_bench_answers_past_the_groups_answer_budget(tmp_path: Path) -> None:
    """Regression: the members' answer budget (trust.group_replies_per_hour, 40 a group)
    left a full run's messages past the 40th of each group unanswered, so the bench
    reported 24,120 of 48,000 turns and measured no reply load."""
    parser = argparse.ArgumentParser()
    ingest.add_arguments(parser)
    args = parser.parse_args(
        ["--messages", "45", "--parties", "1", "--latency-messages", "0",
         "--sequential-messages", "0", "--curve-rates", "", "--dir", str(tmp_path)]
    )  # fmt: skip
    out = await ingest.run(args)
    assert out["indexed_turns"] == out["indexed_turns_expected"] == 90


def test_the_open_loop_baseline_follows_the_arrival_schedule(tmp_path: Path) -> None:
    latencies: list[float] = []
    achieved = ingest_load.baseline(tmp_path, 20, latencies, rate=200)
    assert 20 / achieved >= 19 / 200  # never ahead of the schedule: 20 arrivals span 95 ms
    assert len(latencies) == 20 and min(latencies) > 0


async def test_open_loop_fails_when_a_delivery_fails() -> None:
    """The open loop keeps only the messages in flight; a failed one still fails the run
    (after the others finished), and every other message is timed."""
    delivered: list[str] = []

    class Router:
        async def deliver(self, msg: object) -> None:
            if getattr(msg, "message_id", "") == "o3":
                raise RuntimeError("disk full")
            delivered.append(getattr(msg, "message_id", ""))

    class Services:
        router = Router()

    with pytest.raises(RuntimeError, match="disk full"):
        await ingest.open_loop(Services(), 8, 2, 2000.0, False, 0)
    assert sorted(delivered) == sorted(f"o{i}" for i in range(8) if i != 3)
    p50, p99, achieved = await ingest.open_loop(Services(), 2, 2, 2000.0, False, 10)
    assert p99 >= p50 >= 0 and achieved > 0
