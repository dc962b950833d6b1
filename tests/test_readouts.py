"""Readouts (``bot.transcript_lines.recallable``): the offline brain's labelled replies and the
apology stay in the transcript and in ``turns`` but are never searched, embedded,
abbreviated or used for a title. Regression tests for the offline brain quoting its own
earlier listing ("a quote of a quote") and for offline notes built from the label."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.brain.offline import OFFLINE_LABEL
from bot.db import apply_migrations, connect_sync
from bot.events import InboundMessage
from bot.healthcheck import index_consistency
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.abbreviation import Abbreviator, abbreviate
from bot.reply_generation import APOLOGY
from bot.schema import INDEX_MIGRATIONS
from bot.transcript_lines import recallable

_ids = itertools.count(1)


def _web(text: str) -> InboundMessage:
    return InboundMessage(
        channel="web", sender_id="owner", text=text, message_id=f"r{next(_ids)}", chat_id="web"
    )


async def _say(services: Any, text: str) -> None:
    await services.router.deliver(_web(text))
    for _ in range(500):  # the reply runs in the background
        if not services.replies.queue.pending():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the reply did not finish")


async def _fts(services: Any, word: str) -> list[int]:
    rows = await services.index_db.fetchall(
        "SELECT rowid FROM turns_fts WHERE turns_fts MATCH ?", (f'"{word}"',)
    )
    return [int(r[0]) for r in rows]


def test_which_turns_are_readouts() -> None:
    assert not recallable({"role": "assistant", "model": "offline", "content": "x"})
    assert not recallable({"role": "assistant", "model": "error", "content": APOLOGY})
    assert recallable({"role": "assistant", "model": "claude-sonnet-4-5", "content": "x"})
    assert recallable({"role": "assistant", "content": "no model recorded"})
    assert recallable({"role": "user", "model": "offline", "content": "a user said it"})


async def test_a_readout_is_recorded_but_not_searched(services: Any) -> None:
    manager = services.conversations
    conv = (await manager.create("web")).id
    await manager.append_turn(conv, "user", "Where did we park the kayak?")
    await manager.append_turn(
        conv, "assistant", f"{OFFLINE_LABEL} zebracorn listing", turn_number=1, model="offline"
    )
    await manager.append_turn(conv, "user", "And the paddles?")
    await manager.append_turn(
        conv, "assistant", "In the shed, next to the zebracorn.", turn_number=2, model="sonnet"
    )
    rows = await services.index_db.fetchall(
        "SELECT role, recall FROM turns WHERE conversation_id = ? ORDER BY id", (conv,)
    )
    assert rows == [("user", 1), ("assistant", 0), ("user", 1), ("assistant", 1)]
    assert len(await _fts(services, "zebracorn")) == 1  # the model's reply only
    assert await _fts(services, "listing") == []
    page = await services.search.search("zebracorn listing")
    assert [r.matched_turns for r in page.results] == [[2]]
    assert [t["content"] for t in await manager.read_turns(conv)][1].startswith(OFFLINE_LABEL)
    conn = connect_sync(services.config.index_path)
    try:
        report = index_consistency(conn, services.config.conversations_dir)
    finally:
        conn.close()
    assert report["ok"], report["problems"]
    assert report["index_turns"] == 4 and report["fts_documents"] == 3


async def test_asking_again_offline_lists_the_fact_not_the_earlier_listing(
    services: Any,
) -> None:
    await _say(services, "The budget for the Lisbon trip is 4000 euros, flights included")
    await _say(services, "/new")
    await _say(services, "what was the Lisbon budget?")
    await _say(services, "remind me of the Lisbon budget")
    await _say(services, "/new")
    await _say(services, "Lisbon budget?")
    rows = await services.index_db.fetchall(
        "SELECT content FROM turns WHERE role = 'assistant' ORDER BY id"
    )
    replies = [str(r[0]) for r in rows]
    assert len(replies) == 4
    for reply in replies[1:]:
        listing = reply.split("From past conversations:", 1)[1]
        assert "4000 euros" in listing
        assert "past conversations" not in listing and OFFLINE_LABEL not in listing
    # the second question's listing is not the question just asked
    assert "remind me" not in replies[2].split("From past conversations:", 1)[1]


async def test_an_older_part_of_this_conversation_is_listed(services: Any) -> None:
    # Regression: when the best-matching turn of the current conversation was the message
    # itself, the whole conversation was skipped, and the older turn that holds the answer
    # (a long pinned conversation) never showed; unrelated conversations did instead.
    await _say(services, "For the Kyoto trip the ryokan near Gion costs 32000 yen a night")
    for n in range(12):
        await _say(services, f"unrelated chatter number {n} about the weather")
    await _say(services, "what was the ryokan price per night in Kyoto again?")
    rows = await services.index_db.fetchall(
        "SELECT content FROM turns WHERE role = 'assistant' ORDER BY id DESC LIMIT 1"
    )
    listing = str(rows[0][0]).split("From past conversations:", 1)[1]
    assert "32000 yen" in listing and "turn 1" in listing
    assert "price per night in Kyoto again" not in listing  # never the message itself


async def test_offline_notes_and_titles_skip_the_readouts(services: Any) -> None:
    manager = services.conversations
    conv = (await manager.create("web")).id
    facts = [
        "The boiler in the cellar needs replacing before October",
        "Müller Heating quoted 4800 euros for a condensing boiler",
        "The chimney sweep checks the liner on Friday",
        "We decided on the condensing boiler",
        "Remember to ask Müller Heating about removing the old tank",
    ]
    for number, fact in enumerate(facts, 1):
        await manager.append_turn(conv, "user", fact)
        listing = f"{OFFLINE_LABEL} Set ANTHROPIC_API_KEY to get real answers.\n"
        listing += "From past conversations:\n1. Trains (telegram): the night train to Madrid"
        await manager.append_turn(conv, "assistant", listing, turn_number=number, model="offline")
    outcome = await abbreviate(manager, Abbreviator(None), None, conv)
    assert outcome.status == "abbreviated"
    rec = await manager.require(conv)
    assert rec.abbreviation is not None and "Müller Heating" in rec.abbreviation
    for noise in ("ANTHROPIC_API_KEY", "offline mode", "Madrid", "Set"):
        assert noise not in rec.abbreviation
    lifecycle = Lifecycle(services.config, services, clock=ManualClock(datetime.now(UTC)))
    naming = await lifecycle._name(conv, initial=True)  # the turn-5 naming, run now
    assert naming is not None and naming.method == "keywords"
    assert "Set" not in naming.title.split() and "Boiler" in naming.title
    assert not {"set", "madrid", "trains"} & set(naming.topics)


def test_migration_5_takes_earlier_readouts_out_of_the_keyword_index(tmp_path: Path) -> None:
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        assert apply_migrations(conn, INDEX_MIGRATIONS[:4]) == 4
        conn.execute(
            "INSERT INTO conversations (id, channel, created, updated) "
            "VALUES ('c', 'web', 't', 't')"
        )
        texts = [
            ("user", "where is the zebracorn"),
            ("assistant", f"{OFFLINE_LABEL} From past conversations: zebracorn"),
            ("assistant", APOLOGY),
            ("assistant", "The zebracorn is in the shed."),
        ]
        for turn_id, (role, content) in enumerate(texts, 1):
            conn.execute(
                "INSERT INTO turns (id, conversation_id, turn_number, role, content, timestamp) "
                "VALUES (?, 'c', 1, ?, ?, 't')",
                (turn_id, role, content),
            )
            conn.execute(
                "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
                "VALUES (?, ?, 'c', 1, 't')",
                (turn_id, content),
            )
        conn.commit()
        assert apply_migrations(conn, INDEX_MIGRATIONS) == len(INDEX_MIGRATIONS)
        flags = conn.execute("SELECT id, recall FROM turns ORDER BY id").fetchall()
        assert flags == [(1, 1), (2, 0), (3, 0), (4, 1)]
        hits = conn.execute(
            "SELECT rowid FROM turns_fts WHERE turns_fts MATCH 'zebracorn OR saved' ORDER BY rowid"
        ).fetchall()
        assert hits == [(1,), (4,)]
        conn.execute("INSERT INTO turns_fts (turns_fts, rank) VALUES ('integrity-check', 1)")
        conn.commit()
    finally:
        conn.close()


async def test_a_shrunken_transcript_with_readouts_is_reindexed(tmp_path: Path) -> None:
    """Recovery deletes a re-indexed conversation's FTS rows: only the searchable ones
    were ever there (an external-content 'delete' of a row never indexed corrupts it)."""
    from bot.services import open_services
    from tests.conftest import make_config, shutdown_services

    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        manager = services.conversations
        rec = await manager.create("web")
        for i in range(3):
            await manager.append_turn(rec.id, "user", f"word{i} apricot")
            readout = f"{OFFLINE_LABEL} apricot listing {i}"
            await manager.append_turn(
                rec.id, "assistant", readout, turn_number=i + 1, model="offline"
            )
    finally:
        await shutdown_services(services)
    path = config.conversations_dir / f"{rec.id}.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:4]))  # 1.5 turns
    services = await open_services(config)
    try:
        rows = await services.index_db.fetchall(
            "SELECT turn_number, role, recall FROM turns WHERE conversation_id = ? ORDER BY id",
            (rec.id,),
        )
        assert rows == [(1, "user", 1), (1, "assistant", 0), (2, "user", 1)]
        page = await services.search.search("apricot")
        assert sorted(page.results[0].matched_turns) == [1, 2]
        assert await _fts(services, "listing") == []
        await services.index_db.run(
            lambda c: c.execute(
                "INSERT INTO turns_fts(turns_fts, rank) VALUES ('integrity-check', 1)"
            )
        )
    finally:
        await shutdown_services(services)
