"""Search cursors: bounded in size, and pages that neither repeat nor skip a conversation
while new turns arrive between them (bot.search.cursor)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from functools import reduce
from operator import xor
from pathlib import Path

import pytest

from bot.config.model import AppConfig
from bot.db import Database
from bot.search import InvalidCursor, SearchService
from bot.search import cursor as cursors
from tests.recall_helpers import add_conversation, open_index


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await open_index(tmp_path / "conversations.db")
    yield database
    await database.close()


async def _lift(db: Database, conv_id: str, words: int) -> None:
    """A new turn in ``conv_id`` that makes it a better match for "invoice"."""

    def _write(conn) -> None:  # type: ignore[no-untyped-def]
        number = conn.execute(
            "SELECT coalesce(max(turn_number), 0) + 1 FROM turns WHERE conversation_id = ?",
            (conv_id,),
        ).fetchone()[0]
        ts = "2026-01-11T12:00:00+00:00"
        content = "invoice " * words + "paid at last"
        cur = conn.execute(
            "INSERT INTO turns (conversation_id, turn_number, role, content, timestamp) "
            "VALUES (?, ?, 'user', ?, ?)",
            (conv_id, number, content, ts),
        )
        conn.execute(
            "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
            "VALUES (?, ?, ?, ?, ?)",
            (cur.lastrowid, content, conv_id, number, ts),
        )
        conn.execute(
            "UPDATE conversations SET turn_count = turn_count + 1, updated = ? WHERE id = ?",
            (ts, conv_id),
        )

    await db.run(_write)


@pytest.mark.parametrize("fresh", [True, False], ids=["new-process", "daemon"])
async def test_twenty_pages_with_new_turns_never_repeat_or_skip_and_stay_short(
    db: Database, fresh: bool
) -> None:
    # Regression: the cursor carried 4 bytes of every conversation listed, ~7 characters
    # per result: 700 after 100 results, 8 KB after a keyword tail's 1,000 (past the web
    # API's request-line limit). It now stays short, and still lists every conversation
    # once when each page is ranked again with new turns in between.
    for i in range(120):
        await add_conversation(db, f"conv-{i:03d}", [("user", "invoice " * (1 + i % 40) + "x")])
    service = SearchService(AppConfig(), db)
    page = await service.search("invoice", limit=5)
    seen = [r.conversation_id for r in page.results]
    lengths = []
    pages = 1
    while page.next_cursor is not None:
        lengths.append(len(page.next_cursor))
        # between pages the owner goes on talking: a new best match, or an old
        # conversation not listed yet lifted to the top by a new turn
        if pages % 2:
            await add_conversation(db, f"conv-new-{pages}", [("user", "invoice " * 60)])
        else:
            unlisted = sorted({f"conv-{i:03d}" for i in range(120)} - set(seen))
            if unlisted:
                await _lift(db, unlisted[-1], 50 + pages)
        if fresh:  # `my-agent search --cursor`: a new process ranks again
            service = SearchService(AppConfig(), db)
        else:  # the daemon, the page asked after the cached ranking expired (2 minutes)
            service._pages.clear()
        page = await service.search("invoice", limit=5, cursor=page.next_cursor)
        seen.extend(r.conversation_id for r in page.results)
        pages += 1
        assert pages < 100
    assert pages >= 20
    assert len(seen) == len(set(seen)), "a conversation was listed twice"
    everything = await db.fetchall("SELECT id FROM conversations")
    assert set(seen) == {row[0] for row in everything}, "a conversation was skipped"
    assert max(lengths) <= 64, lengths  # fits Telegram's callback data, any URL


def test_resolve_finds_what_moved_across_the_boundary() -> None:
    order = [f"c{i}" for i in range(30)]
    state = cursors.after(set(order[:10]), order, b"f" * 6)
    assert state.prefix == 10 and not state.extra
    assert cursors.resolve(state, order) == set(order[:10])
    # c25 rose to the top (pushing c9 out of the first ten); c3 dropped below
    moved = ["c25", *order[:3], *order[4:9], "c10", "c9", "c3", *order[11:25], *order[26:]]
    assert cursors.resolve(state, moved) == set(order[:10])
    # three in, three out: refused rather than guessed
    wild = ["c27", "c28", "c29", *order[3:10], *order[:3], *order[10:27]]
    assert cursors.resolve(state, wild) is None
    # a listed conversation far below the prefix is carried explicitly
    state = cursors.after({*order[:5], "c20"}, order, b"f" * 6)
    assert len(state.extra) == 1
    decoded = cursors.decode(cursors.encode(state), b"f" * 6)
    assert decoded == state and cursors.resolve(decoded, order) == {*order[:5], "c20"}


async def test_a_cursor_of_session_16_is_refused_as_expired(db: Database) -> None:
    await add_conversation(db, "conv-a", [("user", "invoice one")])
    old = "eyJvIjogMSwgImYiOiAiYWJjIiwgInMiOiAiQUFBQSJ9"  # {"o": 1, "f": "abc", "s": "AAAA"}
    with pytest.raises(InvalidCursor, match="expired"):
        await SearchService(AppConfig(), db).search("invoice", cursor=old)


def test_after_matches_a_full_scan_of_the_ranking() -> None:
    """``after`` stops scanning once every listed conversation past the prefix is found;
    the cursor is the one a scan of the whole ranking gives (listed ones beyond the
    prefix, and listed ones the ranking no longer holds)."""
    rng = random.Random(3)
    order = [f"conv-{i}" for i in range(400)]
    for _ in range(200):
        listed = set(order[: rng.randint(0, 30)])
        listed |= set(rng.sample(order, rng.randint(0, 5)))
        if rng.random() < 0.3:
            listed.add("conv-gone")
        got = cursors.after(listed, order, b"f" * 6)
        prefix = 0
        while prefix < len(order) and order[prefix] in listed:
            prefix += 1
        head = reduce(xor, (cursors.id_hash(c) for c in order[:prefix]), 0)
        extra = frozenset(cursors.digest(c) for c in order[prefix:] if c in listed)
        assert (got.prefix, got.prefix_hash, got.extra) == (prefix, head, extra)


async def test_a_new_turn_pushing_a_listed_one_into_the_tail_does_not_refuse_the_cursor(
    db: Database,
) -> None:
    # Regression (session 41): 80 conversations say "invoice", more turns than the
    # keyword stage reads (``search.candidates``, 50). Each new matching message ranks
    # its conversation and pushes the last ranked one into the unread keyword tail;
    # when that one was already listed, a cursor from another process (``my-agent
    # search --cursor``) could not find it and was refused ("the results changed too
    # much") on page 3 here, page 5 with one matching turn a conversation.
    for i in range(80):
        said = "invoice " * (1 + i % 4) + f"filler{i}" + " lorem" * (i % 17)
        await add_conversation(
            db, f"conv-{i:03d}", [("user", said), ("assistant", f"the invoice {i}")]
        )
    page = await SearchService(AppConfig(), db).search("invoice", limit=10)
    assert not page.total_exact  # the tail is past the ranked ones
    seen = [r.conversation_id for r in page.results]
    pages = 1
    while page.next_cursor is not None:
        said = "invoice invoice" + " lorem" * pages
        await add_conversation(db, f"conv-new-{pages:02d}", [("user", said)])
        service = SearchService(AppConfig(), db)  # each page a new process
        page = await service.search("invoice", limit=10, cursor=page.next_cursor)
        seen.extend(r.conversation_id for r in page.results)
        pages += 1
        assert pages < 40
    assert len(seen) == len(set(seen)), "a conversation was listed twice"
    everything = await db.fetchall("SELECT id FROM conversations")
    assert set(seen) == {row[0] for row in everything}, "a conversation was skipped"


async def test_a_first_page_does_not_read_the_tail(db: Database) -> None:
    # The tail is read for a cursor only when the ranked ones cannot resolve it
    # (session 41): a first page within the ranked ones never pays for it.
    for i in range(80):
        await add_conversation(db, f"conv-{i:03d}", [("user", "invoice " * (1 + i % 40) + "x")])
    service = SearchService(AppConfig(), db)
    reads = 0
    read_tail = service._read_tail

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        await read_tail(*args, **kwargs)

    service._read_tail = counted  # type: ignore[method-assign]
    page = await service.search("invoice", limit=10)
    assert page.next_cursor and reads == 0
    fresh = SearchService(AppConfig(), db)
    fresh._read_tail = counted  # type: ignore[method-assign]
    await fresh.search("invoice", limit=10, cursor=page.next_cursor)
    assert reads == 0  # nothing moved: the ranked ones resolve the cursor
