"""The message-ref Bloom filter (bot.reffilter): duplicates are still caught, new ids skip
the database, and refs recorded while the filter loads are not missed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bot import reffilter
from bot.reffilter import RefFilter, line_refs
from bot.services import close_services, open_services
from bot.transcript import event_line, turn_line
from tests.conftest import make_config
from tests.sqlite_driver import sqlite3
from tests.support import inbound


def test_no_false_negatives_and_about_one_percent_false_positives() -> None:
    refs = RefFilter(capacity=20_000)
    for i in range(20_000):
        refs.add("telegram", f"m{i}")
    assert all(refs.might_contain("telegram", f"m{i}") for i in range(20_000))
    false = sum(refs.might_contain("telegram", f"other{i}") for i in range(20_000))
    assert false < 20_000 * 0.02
    assert not refs.full
    refs.add("telegram", "one more")
    assert refs.full


def test_line_refs_are_the_ones_the_index_records() -> None:
    turn = turn_line(
        "user", "hi", 1, channel="email", metadata={"messageId": "a", "messageRef": "<b@x>"}
    )
    assert line_refs(turn, "web") == [("email", "a", "in"), ("email", "<b@x>", "in")]
    same = turn_line("user", "hi", 1, metadata={"messageId": "a", "messageRef": "a"})
    assert line_refs(same, "telegram") == [("telegram", "a", "in")]
    sent = event_line("message_ref", channel="email", ref="<c@x>", direction="out")
    assert line_refs(sent, "web") == [("email", "<c@x>", "out")]
    assert line_refs(event_line("title_assigned", title="T"), "web") == []


async def test_router_drops_duplicates_and_skips_the_database_for_new_ids(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, owner={"identities": {"telegram": ["7"]}})
    services = await open_services(config)
    try:
        index = services.index
        assert index.refs is not None
        queries: list[Any] = []
        real_fetchone = index.db.fetchone

        async def counting(sql: str, params: Any = ()) -> Any:
            if "message_refs" in sql:
                queries.append(params)
            return await real_fetchone(sql, params)

        index.db.fetchone = counting  # type: ignore[method-assign]
        for i in range(20):
            await services.router.deliver(
                inbound(f"note {i}", sender="7", message_id=f"t{i}", addressed=False)
            )
        assert len(queries) <= 2  # new ids: answered by the filter (rare false positives)
        await services.router.deliver(inbound("again", sender="7", message_id="t3"))
        assert ("telegram", "t3") in queries  # a possible duplicate asks the database
        rows = await services.index_db.fetchall("SELECT content FROM turns ORDER BY id")
        assert [r[0] for r in rows] == [f"note {i}" for i in range(20)]
    finally:
        await close_services(services)


async def test_refs_recorded_before_a_restart_are_loaded(tmp_path: Path) -> None:
    config = make_config(tmp_path, owner={"identities": {"telegram": ["7"]}})
    services = await open_services(config)
    try:
        await services.router.deliver(
            inbound("first", sender="7", message_id="x1", addressed=False)
        )
    finally:
        await close_services(services)
    services = await open_services(config)
    try:
        assert services.index.refs is not None
        assert services.index.refs.might_contain("telegram", "x1")
        await services.router.deliver(
            inbound("first", sender="7", message_id="x1", addressed=False)
        )
        assert len(await services.index_db.fetchall("SELECT id FROM turns")) == 1
    finally:
        await close_services(services)


async def test_refs_noted_while_loading_are_kept(tmp_path: Path) -> None:
    services = await open_services(make_config(tmp_path))
    try:
        index = services.index
        index.refs = None
        loading = asyncio.ensure_future(index.load_refs())
        await asyncio.sleep(0)  # it now waits for its snapshot on the reader thread
        assert index._refs_loading == []
        index.note_refs([turn_line("user", "x", 1, metadata={"messageId": "late"})], "web")
        await loading
        assert index.refs is not None and index.refs.might_contain("web", "late")
    finally:
        await close_services(services)


def test_the_filter_loaded_at_start_sets_the_bits_of_add_in_bulk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every start reads every ref ever recorded (150,000 after a year took 1.8 s one by
    # one): from_index hashes them in bulk, never through add's per-ref positions.
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE message_refs (channel TEXT, ref TEXT)")
    keys = [("telegram", f"m{i}") for i in range(500)] + [("email", f"<{i}@x>") for i in range(9)]
    conn.executemany("INSERT INTO message_refs VALUES (?, ?)", keys)
    one_by_one = RefFilter()
    for key in keys:
        one_by_one.add(*key)
    calls = 0
    real = RefFilter._positions

    def counting(self: RefFilter, channel: str, ref: str) -> Any:
        nonlocal calls
        calls += 1
        return real(self, channel, ref)

    monkeypatch.setattr(RefFilter, "_positions", counting)
    monkeypatch.setattr(reffilter, "LOAD_CHUNK", 64)  # read in several chunks
    loaded = RefFilter.from_index(conn)
    assert calls == 0
    assert loaded._array == one_by_one._array
    assert loaded.count == len(keys) and loaded.capacity == one_by_one.capacity
    small = RefFilter(capacity=50)  # few bits: positions wrap around many times
    small.add_many(keys[:60])
    assert all(small.might_contain(*key) for key in keys[:60])


async def test_one_shot_commands_do_not_load_the_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `conversations list`, `search`, `reindex` deliver no message: reading every ref
    # was half of a 3.5 s `conversations list` at 10,000 conversations.
    from bot.cli_store import _open_and_run

    config = make_config(tmp_path)
    loads = 0
    real = RefFilter.from_index

    def counting(conn: Any) -> RefFilter:
        nonlocal loads
        loads += 1
        return real(conn)

    monkeypatch.setattr(RefFilter, "from_index", staticmethod(counting))

    async def listed(services: Any) -> int:
        assert services.index.refs is None
        return len(await services.conversations.list())

    assert await _open_and_run(config, listed, True, False) == 0
    assert loads == 0
    services = await open_services(config)  # the daemon's open still loads it
    try:
        assert loads == 1 and services.index.refs is not None
    finally:
        await close_services(services)
