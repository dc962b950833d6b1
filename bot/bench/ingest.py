"""``my-agent bench ingest``: messages received -> durable + indexed, against a bare baseline.

The product path: ``Router.deliver`` for every message (dedup check, routing, durable
transcript append with fsync, FTS index update), with the offline brain answering each
message in the background (durable reply turn, outbox) as in production (under another
name: :class:`MembersAnswered`). Parties are
group chats, one conversation each. ``deliver`` returns once the message is durable in
its transcript and in the index, so its duration is the latency "received -> durable +
indexed". The phases, all reported (docs/benchmarks.md):

- throughput (closed loop): the parties send concurrently, one message in flight each
  (like a channel adapter); ``throughput_msgs_per_s`` = messages / time until the last
  ``deliver`` returned (replies still being produced meanwhile compete for the machine).
  Its latencies are ``saturated_*``: by Little's law ~ parties / throughput.
- latency (open loop): messages arrive on a fixed schedule at ``--rate``; ``p50_ms`` /
  ``p99_ms`` count from the scheduled arrival, so a backlog shows up in them.
- sequential: one message at a time, the next one as soon as the previous is stored
  (replies in the background): the latency of a message that finds no queue.

The baseline, measured in the same run on the same disk, before and after the product
(the median of the two): a bare loop of JSONL append + fsync + FTS5 insert + commit.

``written_bytes_per_message``: what the throughput phase handed to ``write(2)`` per message
(its reply included), transcripts, journal, both databases' WAL and their checkpoints,
from ``/proc/self/io``; ``baseline_written_bytes_per_message`` the same for the bare loop.
Unlike the latencies it does not depend on how noisy the disk is: the volume every flush
has to push (``None`` where ``/proc`` has no I/O counters).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.bench.ingest_load import baseline, per_message, percentiles, written_bytes
from bot.bench.ingest_phases import drain_replies, message, open_loop, sequential
from bot.brain.offline import OfflineBrain
from bot.config import build_config
from bot.db import connect_sync


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--parties", type=int, default=100)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--no-replies", action="store_true", help="ingest only, no brain")
    parser.add_argument(
        "--rate",
        type=float,
        default=2000.0,
        help="open-loop arrival rate (msgs/s) of the latency phase",
    )
    parser.add_argument("--latency-messages", type=int, default=4000)
    parser.add_argument(
        "--curve-rates",
        default="250,500,1000,1500",
        help="more open-loop rates (comma-separated msgs/s) for latency_curve; '' for none",
    )
    parser.add_argument("--curve-messages", type=int, default=2000)
    parser.add_argument(
        "--sequential-messages",
        type=int,
        default=2000,
        help="messages of the sequential phase (one in flight at a time)",
    )


class MembersAnswered(OfflineBrain):
    """The offline brain under another name, so that every member's message is answered
    with its short notice (a durable reply turn and an outbox row): since session 40 the
    offline brain leaves a group member's message unanswered, and the bench would have
    measured ingestion without the reply load it has always reported."""

    name = "bench"


async def product(
    directory: Path,
    count: int,
    parties: int,
    replies: bool,
    rate: float = 0.0,
    latency_messages: int = 0,
    sequential_messages: int = 0,
    curve_rates: tuple[float, ...] = (),
    curve_messages: int = 0,
) -> dict[str, Any]:
    from bot.services import close_services, open_services

    # Every message is answered, as the module says: the members' answer budgets (40 an
    # hour per group, 120 for all groups: trust.group_replies_per_hour*) bound paid model
    # calls in production, and at their defaults they left ~99% of a full run's messages
    # unanswered, so the bench measured ingestion without the reply load it reports.
    sent = count + latency_messages + sequential_messages + curve_messages * len(curve_rates)
    raw = {
        "data_dir": str(directory / "data"),
        "embedding": {"enabled": False},
        "channels": {"web": {"enabled": False}},
        "brain": {"provider": "offline"},
        "trust": {
            "group_replies_per_hour": max(1, sent),
            "group_replies_per_hour_total": max(1, sent),
        },
    }
    config = build_config(raw, env={})
    services = await open_services(config, brain=MembersAnswered(None))
    latencies: list[float] = []
    per_party = [count // parties + (1 if p < count % parties else 0) for p in range(parties)]

    async def party(p: int) -> None:
        for k in range(per_party[p]):
            msg = message(p + k * parties, parties, replies)
            t0 = time.perf_counter()
            await services.router.deliver(msg)
            latencies.append((time.perf_counter() - t0) * 1000)

    bytes_before = written_bytes()
    start = time.perf_counter()
    await asyncio.gather(*(party(p) for p in range(parties)))
    ingest_s = time.perf_counter() - start
    await drain_replies(services)
    total_s = time.perf_counter() - start
    for path in (config.index_path, config.state_path):  # the WAL's copy back counts too
        checkpointer = connect_sync(path)
        try:
            checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            checkpointer.close()
    written = per_message(bytes_before, written_bytes(), count)
    open_p50 = open_p99 = achieved = open_drain = 0.0
    if latency_messages and rate > 0:
        open_p50, open_p99, achieved = await open_loop(
            services, latency_messages, parties, rate, replies, count
        )
        drain_start = time.perf_counter()
        await drain_replies(services)
        open_drain = time.perf_counter() - drain_start
    curve = []
    for k, curve_rate in enumerate(curve_rates):
        c50, c99, c_achieved = await open_loop(
            services, curve_messages, parties, curve_rate, replies, count, f"c{k}-"
        )
        curve.append(
            {
                "rate_msgs_per_s": curve_rate,
                "achieved_msgs_per_s": round(c_achieved, 1),
                "p50_ms": round(c50, 3),
                "p99_ms": round(c99, 3),
            }
        )
        await drain_replies(services)
    seq_p50 = seq_p99 = seq_rate = 0.0
    if sequential_messages:
        seq_p50, seq_p99, seq_rate = await sequential(
            services, sequential_messages, parties, replies, count + latency_messages
        )
        await drain_replies(services)
    turns = await services.index.turn_rows()
    deferred = services.incoming.deferred
    await close_services(services)
    latencies.sort()
    return {
        "curve": curve,
        "open_p50_ms": open_p50,
        "open_p99_ms": open_p99,
        "open_rate": achieved,
        "sequential_p50_ms": seq_p50,
        "sequential_p99_ms": seq_p99,
        "sequential_rate": seq_rate,
        "ingest_seconds": ingest_s,
        "throughput": count / ingest_s,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "replies_done_seconds": total_s,
        "written_bytes_per_message": written,
        "indexed_turns": turns,
        "messages_sent": sent,  # all phases' messages (each answered, unless --no-replies)
        "replies_deferred": deferred,
        "open_replies_drain_seconds": open_drain,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="my-agent-bench-"))
    try:
        # Same disk, same run: the baseline first and last, the product in between.
        bare: list[float] = []
        bare_written: list[float] = []
        before = baseline(base / "baseline1", min(args.messages, 5000), bare, 0.0, bare_written)
        ours = await product(
            base / "product",
            args.messages,
            args.parties,
            not args.no_replies,
            args.rate,
            args.latency_messages,
            args.sequential_messages,
            tuple(float(r) for r in args.curve_rates.split(",") if r.strip()),
            args.curve_messages,
        )
        after = baseline(base / "baseline2", min(args.messages, 5000), bare, 0.0, bare_written)
        bare_open: list[float] = []
        if args.latency_messages and args.rate > 0:
            baseline(base / "baseline3", args.latency_messages, bare_open, args.rate)
        for k, point in enumerate(ours["curve"]):  # the bare loop on each curve schedule
            bare_curve: list[float] = []
            baseline(
                base / f"baseline-c{k}", args.curve_messages, bare_curve, point["rate_msgs_per_s"]
            )
            point["baseline_p50_ms"], point["baseline_p99_ms"] = (
                round(v, 3) for v in percentiles(bare_curve)
            )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    baseline_tp = statistics.median([before, after])
    expected = ours["messages_sent"] * (1 if args.no_replies else 2)
    goals = {"throughput_msgs_per_s": 2000, "ratio": 0.6, "p99_ms": 5}
    ratio = ours["throughput"] / baseline_tp
    return {
        "benchmark": "ingest",
        "messages": args.messages,
        "parties": args.parties,
        "replies": not args.no_replies,
        "throughput_msgs_per_s": round(ours["throughput"], 1),
        # Latency at a steady arrival rate (open loop): received -> durable + indexed.
        "p50_ms": round(ours["open_p50_ms"], 3),
        "p99_ms": round(ours["open_p99_ms"], 3),
        "latency_arrival_rate_msgs_per_s": round(ours["open_rate"], 1),
        # The same at lower arrival rates: where p99 stays low.
        "latency_curve": ours["curve"],
        # Latency while saturated (closed loop, one message in flight per party).
        "saturated_p50_ms": round(ours["p50_ms"], 3),
        "saturated_p99_ms": round(ours["p99_ms"], 3),
        # Latency one message at a time (no queue in front of it).
        "sequential_p50_ms": round(ours["sequential_p50_ms"], 3),
        "sequential_p99_ms": round(ours["sequential_p99_ms"], 3),
        "sequential_msgs_per_s": round(ours["sequential_rate"], 1),
        "baseline_throughput_msgs_per_s": round(baseline_tp, 1),
        "baseline_runs_msgs_per_s": [round(before, 1), round(after, 1)],
        # the bare loop's own per-message latency: what the disk allows a p99 to be
        "baseline_p50_ms": round(percentiles(bare)[0], 3),
        "baseline_p99_ms": round(percentiles(bare)[1], 3),
        # the bare loop on the latency phase's schedule (same rate, same count)
        "baseline_open_p50_ms": round(percentiles(bare_open)[0], 3) if bare_open else None,
        "baseline_open_p99_ms": round(percentiles(bare_open)[1], 3) if bare_open else None,
        "ratio": round(ratio, 3),
        "replies_completed_seconds": round(ours["replies_done_seconds"], 2),
        # replies that waited for a flood of incoming messages to pause (bot/arrivals.py)
        "replies_deferred": ours["replies_deferred"],
        # after the latency phase's last message, until its last reply was stored
        "latency_phase_replies_drain_seconds": round(ours["open_replies_drain_seconds"], 2),
        # bytes written per message (and reply): the volume the flushes push to the disk
        "written_bytes_per_message": ours["written_bytes_per_message"],
        "baseline_written_bytes_per_message": (
            round(statistics.median(bare_written), 1) if bare_written else None
        ),
        "indexed_turns": ours["indexed_turns"],
        "indexed_turns_expected": expected,
        "goals": goals,
        # Every mode against its goal, none left out.
        "goals_met": {
            "throughput_msgs_per_s": ours["throughput"] >= goals["throughput_msgs_per_s"],
            "ratio": ratio >= goals["ratio"],
            "p99_ms": ours["open_p99_ms"] <= goals["p99_ms"],
            "sequential_p99_ms": ours["sequential_p99_ms"] <= goals["p99_ms"],
            "saturated_p99_ms": ours["p99_ms"] <= goals["p99_ms"],
        },
    }
