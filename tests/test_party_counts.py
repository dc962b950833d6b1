"""Third parties' hourly counts read a range of an index by time, not every message
stored (index migration 9): an untrusted party's messages (bot/party_limits.py), the
model's answers to known parties (bot/party_budget.py), command answers, and the
parties a start owes something (bot/party_resume.py). With a million stored stranger
messages each count was a scan of a million rows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.db import apply_migrations
from bot.party_reads import PartyReads
from bot.party_resume import _recent_parties
from bot.schema import INDEX_MIGRATIONS
from tests.sqlite_driver import sqlite3

HOUR = "2026-01-01T10:00:00Z"
TIME_INDEXES = {"external_messages_time", "external_messages_party_time"}


class _Capture:
    """A database that records the SQL it is asked, and answers nothing."""

    def __init__(self) -> None:
        self.sql: list[tuple[str, tuple[Any, ...]]] = []

    async def fetchone(self, sql: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        self.sql.append((sql, tuple(args)))
        return (0,)

    async def fetchall(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        self.sql.append((sql, tuple(args)))
        return []


class _Reads(PartyReads):
    def __init__(self, db: Any) -> None:
        self.db = db


@pytest.fixture
def index() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    apply_migrations(conn, INDEX_MIGRATIONS)
    try:
        yield conn
    finally:
        conn.close()


def _plan(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, args).fetchall()
    return " | ".join(str(r[3]) for r in rows)


def _indexes(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'external_messages'"
    )
    return {r[0] for r in rows}


async def _sql_of(read: Callable[[PartyReads], Awaitable[Any]]) -> tuple[str, tuple[Any, ...]]:
    db = _Capture()
    await read(_Reads(db))
    ((sql, args),) = db.sql
    return sql, args


READS: dict[str, Callable[[PartyReads], Awaitable[Any]]] = {
    "untrusted, all": lambda r: r.untrusted_messages_since(HOUR),
    "untrusted, one": lambda r: r.untrusted_messages_since(HOUR, "p1234567"),
    "answers, all": lambda r: r.answers_since(HOUR),
    "answers, one": lambda r: r.answers_since(HOUR, "p1234567"),
    "commands, all": lambda r: r.command_answers_since(HOUR),
    "commands, one": lambda r: r.command_answers_since(HOUR, "p1234567"),
}


@pytest.mark.parametrize("name", list(READS))
async def test_each_hourly_count_reads_a_range_by_time(
    index: sqlite3.Connection, name: str
) -> None:
    # Regression: external_messages had no index on timestamp: the count of all parties
    # was "SCAN external_messages" (every message stored), one party's walked all of
    # theirs (a flooding stranger's million) and read each row for its time.
    sql, args = await _sql_of(READS[name])
    plan = _plan(index, sql, args)
    assert "timestamp>?" in plan, plan
    assert any(name in plan for name in TIME_INDEXES), plan
    assert "SCAN" not in plan, plan


async def test_a_start_finds_the_parties_it_owes_through_the_window(
    index: sqlite3.Connection,
) -> None:
    # Regression: "SELECT DISTINCT ... JOIN" walked every party's messages at each start.
    db = _Capture()
    services = type("S", (), {"external": _Reads(db)})()
    await _recent_parties(services, "known", HOUR)  # type: ignore[arg-type]
    ((sql, args),) = db.sql
    plan = _plan(index, sql, args)
    assert "external_messages_time (timestamp>?)" in plan, plan
    assert "SCAN" not in plan, plan


def test_a_fresh_index_has_the_time_indexes(index: sqlite3.Connection) -> None:
    assert TIME_INDEXES <= _indexes(index)


def test_an_index_of_the_previous_version_gets_them_and_keeps_its_rows(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "conversations.db")
    try:
        before = [m.__name__ for m in INDEX_MIGRATIONS].index("_index_v9")
        apply_migrations(conn, INDEX_MIGRATIONS[:before])
        conn.execute(
            "INSERT INTO external_parties (id, channel, party_key, tier, created, updated)"
            " VALUES ('p1234567', 'telegram', '777', 'untrusted', ?, ?)",
            (HOUR, HOUR),
        )
        conn.executemany(
            "INSERT INTO external_messages (party_id, direction, content, timestamp)"
            " VALUES ('p1234567', 'in', ?, ?)",
            [(f"spam {n}", f"2026-01-01T10:{n:02d}:00Z") for n in range(60)],
        )
        conn.commit()
        assert not TIME_INDEXES & _indexes(conn)
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        assert TIME_INDEXES <= _indexes(conn)
        since = "2026-01-01T10:30:00Z"
        (count,) = conn.execute(
            "SELECT count(*) FROM external_messages INDEXED BY external_messages_time"
            " WHERE timestamp >= ?",
            (since,),
        ).fetchone()
        assert count == 30
    finally:
        conn.close()
