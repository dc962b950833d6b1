"""The dashboard's channels chart (channels/web/analytics.py): messages per channel per
day of the owner's calendar, summed in SQLite. Until session 41 the turns were counted
per minute and put on their day in Python on the event loop: at 100,000 turns 48 ms
of its CPU, Telegram and mail waiting meanwhile."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.config import build_config
from bot.db import Database
from bot.events import iso
from bot.schema import INDEX_MIGRATIONS
from channels.web.analytics import Analytics

SVG = "{http://www.w3.org/2000/svg}"
# The window's 30 days hold Europe's and North America's change to summer time.
NOW = datetime(2026, 3, 31, 12, tzinfo=UTC)
CHANNELS = ("web", "telegram", "email")


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "conversations.db", INDEX_MIGRATIONS)
    yield database
    await database.close()


def _analytics(db: Database, zone: str) -> Analytics:
    config = build_config({"owner": {"timezone": zone}, "channels": {"web": {"enabled": False}}})
    services = SimpleNamespace(index=SimpleNamespace(db=db))
    return Analytics(SimpleNamespace(config=config, services=services), now=lambda: NOW)  # type: ignore[arg-type]


async def _store(db: Database, stamps: list[str], seed: int = 5) -> list[tuple[str, str]]:
    """Turns at ``stamps`` in conversations of each channel, a third of them with a
    channel of their own (a group's turn, a mail's), the rest none (the
    conversation's); returns each turn's (timestamp, channel)."""
    rng = random.Random(seed)
    made: list[tuple[str, str]] = []

    def fill(conn: Any) -> None:
        for k, channel in enumerate(CHANNELS):
            conn.execute(
                "INSERT INTO conversations (id, channel, created, updated) VALUES (?, ?, ?, ?)",
                (f"conv-{k}", channel, iso(NOW), iso(NOW)),
            )
        for n, stamp in enumerate(stamps):
            k = rng.randrange(len(CHANNELS))
            own = rng.choice(CHANNELS) if n % 3 == 0 else None
            conn.execute(
                "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp,"
                " channel) VALUES (?, ?, 'user', 'x', ?, ?)",
                (f"conv-{k}", n, stamp, own),
            )
            made.append((stamp, own or CHANNELS[k]))

    await db.run(fill)
    return made


def _charted(svg: str) -> Counter[tuple[str, str]]:
    return Counter(
        {
            (str(r.get("data-channel")), str(r.get("data-day"))): int(str(r.get("data-value")))
            for r in ET.fromstring(svg).iter(f"{SVG}rect")
            if r.get("data-channel")
        }
    )


@pytest.mark.parametrize("zone", ["Europe/Berlin", "Asia/Kolkata", "America/St_Johns", "UTC"])
async def test_the_chart_counts_each_turn_on_its_day_of_the_owners_calendar(
    db: Database, zone: str
) -> None:
    # The result is the one of the per-minute count it replaces: each turn's UTC minute
    # put on the owner's day (computed here turn by turn), turns before the window left
    # out, and a turn at each day's first minute, just before it and late in it.
    tz = ZoneInfo(zone)
    today = NOW.astimezone(tz).date()
    rng = random.Random(11)
    stamps = [iso(NOW - timedelta(seconds=rng.uniform(0, 32 * 86400))) for _ in range(1500)]
    for back in range(31):
        midnight = datetime.combine(today - timedelta(days=back), datetime.min.time(), tz)
        for shift in (-0.001, 0.0, 59.999, 3600 * 23.99):
            stamps.append(iso(midnight + timedelta(seconds=shift)))
    stamps.append(iso(midnight)[:19] + "Z")  # written without milliseconds
    made = await _store(db, stamps)
    first = today - timedelta(days=29)
    expected: Counter[tuple[str, str]] = Counter()
    for stamp, channel in made:
        day = datetime.fromisoformat(f"{stamp[:16]}+00:00").astimezone(tz).date()
        if first <= day <= today:
            expected[(channel, day.isoformat())] += 1
    charted = _charted(await _analytics(db, zone).channels_chart())
    assert charted == expected
    assert sum(charted.values()) > 1000


async def test_the_event_loop_reads_one_row_per_day_and_channel(db: Database) -> None:
    # Regression (session 41): the query returned a row per minute and channel (64,000
    # in a month of 100,000 turns), each parsed and put on its day on the event loop.
    await _store(db, [iso(NOW - timedelta(minutes=7 * n)) for n in range(4000)])
    read: list[int] = []
    fetchall = db.fetchall

    async def counted(sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        rows = await fetchall(sql, params)
        read.append(len(rows))
        return rows

    db.fetchall = counted  # type: ignore[method-assign]
    svg = await _analytics(db, "Europe/Berlin").channels_chart(days=30)
    assert sum(_charted(svg).values()) == 4000  # 19.4 days of them: all in the window
    assert read and max(read) <= 30 * len(CHANNELS), read
