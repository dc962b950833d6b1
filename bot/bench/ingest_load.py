"""The load of ``my-agent bench ingest``: synthetic messages and the bare baseline loop.

The messages' words follow a Zipf-like vocabulary (a few common words, many rare ones)
so that the index sees realistic keyword selectivity; the bare loop is what the product
is measured against on the same disk: JSONL append + fsync + FTS5 insert + commit, one
message at a time (docs/benchmarks.md "ingest").
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from bot.db import connect_sync

WORDS = (
    "server deploy invoice garden holiday budget kiwi lasagne marathon python "
    "schedule contract dentist birthday paris tickets printer backup laptop insurance "
    "meeting report draft recipe flight hotel museum concert bicycle repair"
).split()


_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "ze",
    "pa",
    "do",
    "gu",
    "he",
    "ji",
    "ba",
    "co",
    "fe",
    "ly",
    "wa",
    "xi",
)
# A Zipf-like vocabulary: a few common words and many rare ones, like real messages, so
# keyword search selectivity is realistic (a 30-word vocabulary matches every message).
VOCABULARY = list(WORDS) + [
    a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES[:12]
]


def written_bytes() -> int | None:
    """Bytes this process has passed to write calls so far (``wchar``), None if unknown."""
    try:
        with open("/proc/self/io") as counters:
            for line in counters:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def per_message(before: int | None, after: int | None, count: int) -> float | None:
    if before is None or after is None or count <= 0:
        return None
    return round((after - before) / count, 1)


def message_text(i: int) -> str:
    n = len(VOCABULARY)
    words = []
    for k in range(12):
        x = ((i * 2654435761 + k * 40503) % 1_000_003) / 1_000_003
        words.append(VOCABULARY[min(n - 1, int(n * x**3))])  # skewed towards common words
    return f"message {i}: " + " ".join(words)


def baseline(
    directory: Path,
    count: int,
    latencies: list[float] | None = None,
    rate: float = 0.0,
    written: list[float] | None = None,
) -> float:
    """Bare loop: JSONL append + fsync + FTS5 insert + commit. Returns messages/s and
    adds each message's duration (ms) to ``latencies``: the disk's own p99, and the bytes
    it wrote per message to ``written``.

    With ``rate``, message ``i`` arrives at ``i / rate`` s (the open-loop schedule of the
    product's latency phase) and its latency counts from that arrival: what the bare loop
    gives under the same load, stalls of the disk included."""
    directory.mkdir(parents=True, exist_ok=True)
    conn = connect_sync(directory / "baseline.db")
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS t USING fts5(content, conversation_id "
        "UNINDEXED, tokenize='porter unicode61')"
    )
    path = directory / "baseline.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    bytes_before = written_bytes()
    start = time.perf_counter()
    try:
        for i in range(count):
            t0 = time.perf_counter()
            if rate > 0:
                due = start + i / rate
                if t0 < due:
                    time.sleep(due - t0)
                t0 = due
            line = {"type": "turn", "role": "user", "content": message_text(i), "turnNumber": i + 1}
            os.write(fd, (json.dumps(line) + "\n").encode())
            os.fsync(fd)
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO t (content, conversation_id) VALUES (?, ?)",
                (line["content"], "conv-x"),
            )
            conn.execute("COMMIT")
            if latencies is not None:
                latencies.append((time.perf_counter() - t0) * 1000)
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # the product's checkpoints count too
    finally:
        os.close(fd)
        conn.close()
    bytes_each = per_message(bytes_before, written_bytes(), count)
    if written is not None and bytes_each is not None:
        written.append(bytes_each)
    return count / (time.perf_counter() - start)


def percentiles(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return statistics.median(values), values[min(len(values) - 1, int(len(values) * 0.99))]
