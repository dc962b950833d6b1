"""The candidate neighbourhood: turns around the hits, with their vectors, in one hop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bot.db import SyncConn


@dataclass
class Rows:
    """The candidate neighbourhood loaded in one hop: turns (+ vectors) in order."""

    ids: list[int]
    conv: list[str]
    number: list[int]
    sender: list[str]
    timestamp: list[str]
    content: list[str]
    channel: list[str]
    matrix: np.ndarray  # (n, dims) float32, zero rows where a turn has no vector yet
    has: np.ndarray  # bool: the row has a vector
    codes: np.ndarray  # int conversation codes (same code = same conversation)


def load_rows(
    conn: SyncConn,
    ranges: dict[str, list[tuple[int, int]]],
    extra_ids: list[int],
    want_vectors: bool,
    dims: int,
) -> Rows:
    """Turns in ``ranges`` (per conversation, inclusive) plus ``extra_ids``, with their
    float16 vectors, in (conversation, turn number, id) order: one query per 300 ranges."""
    if extra_ids:
        marks = ",".join("?" * len(extra_ids))
        for conv, number in conn.execute(
            f"SELECT conversation_id, turn_number FROM turns WHERE id IN ({marks})", extra_ids
        ):
            ranges.setdefault(str(conv), []).append((int(number), int(number)))
    values: list[Any] = []
    for conv in sorted(ranges):
        for lo, hi in merge(ranges[conv]):
            values.extend((conv, lo, hi))
    vector = "v.vector" if want_vectors else "NULL"
    vector_join = " LEFT JOIN turn_vectors v ON v.turn_id = t.id" if want_vectors else ""
    rows: list[Any] = []
    step = 300  # ranges per statement, far below SQLite's host-parameter limit
    for start in range(0, len(values), step * 3):
        chunk = values[start : start + step * 3]
        spec = ",".join(["(?, ?, ?)"] * (len(chunk) // 3))
        rows.extend(
            conn.execute(
                f"WITH r(c, lo, hi) AS (VALUES {spec}) "
                "SELECT t.id, t.conversation_id, t.turn_number, t.sender, t.timestamp, "
                f"t.content, c.channel, {vector} FROM r JOIN turns t ON t.conversation_id = r.c "
                f"AND t.turn_number BETWEEN r.lo AND r.hi{vector_join} "
                "JOIN conversations c ON c.id = t.conversation_id "
                "ORDER BY t.conversation_id, t.turn_number, t.id",
                chunk,
            ).fetchall()
        )
    n = len(rows)
    conv = [r[1] for r in rows]
    if want_vectors and n:
        zero = bytes(2 * dims)
        has = np.fromiter((r[7] is not None for r in rows), bool, n)
        blob = b"".join(r[7] or zero for r in rows)
        matrix = np.frombuffer(blob, dtype=np.float16).reshape(n, dims).astype(np.float32)
    else:
        has = np.zeros(n, dtype=bool)
        matrix = np.zeros((n, dims if want_vectors else 0), dtype=np.float32)
    code_of: dict[str, int] = {}
    codes = np.fromiter((code_of.setdefault(c, len(code_of)) for c in conv), np.int64, n)
    return Rows(
        ids=[r[0] for r in rows],
        conv=conv,
        number=[r[2] for r in rows],
        sender=[r[3] or "" for r in rows],
        timestamp=[r[4] or "" for r in rows],
        content=[r[5] for r in rows],
        channel=[r[6] for r in rows],
        matrix=matrix,
        has=has,
        codes=codes,
    )


def merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
