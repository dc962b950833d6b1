"""The conversation manager: create, resume, switch, rename, model, list, events, and
the index catching up after a failed write."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.conversations import ConversationNotFound
from bot.services import open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    settle,
    shutdown_services,
)
from tests.support import inbound


class Events:
    def __init__(self, bus: Any) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        for name in (
            "turn_appended",
            "conversation_created",
            "conversation_updated",
            "conversation_renamed",
            "conversation_switched",
            "event_appended",
        ):
            bus.subscribe(name, self._handler(name))

    def _handler(self, name: str) -> Any:
        async def handle(**payload: Any) -> None:
            self.seen.append((name, payload))

        return handle

    def names(self) -> list[str]:
        return [n for n, _ in self.seen]


async def test_create_writes_meta_and_registers(services: Any) -> None:
    events = Events(services.bus)
    rec = await services.conversations.create(
        "telegram",
        identity_key="telegram:1",
        pinned=True,
        model="haiku",
        participants=["Robin"],
        channel_meta={"chatId": "1"},
    )
    assert rec.id.startswith("conv-") and len(rec.id) == 31
    meta = services.store.read_lines(rec.id)[0]
    assert meta["type"] == "meta" and meta["id"] == rec.id and meta["channel"] == "telegram"
    assert meta["participants"] == ["Robin"] and meta["model"] == "haiku"
    assert meta["pinned"] is True and meta["identityKey"] == "telegram:1"
    stored = await services.index.get(rec.id)
    assert stored is not None and stored.model == "haiku" and stored.pinned
    assert events.names() == ["conversation_created"]
    assert events.seen[0][1]["conversation"].id == rec.id


async def test_turn_numbering_is_shared_by_message_and_reply(services: Any) -> None:
    manager = services.conversations
    rec = await manager.create("web")
    _, u1 = await manager.append_turn(rec.id, "user", "one")
    _, a1 = await manager.append_turn(rec.id, "assistant", "reply one")
    _, u2 = await manager.append_turn(rec.id, "user", "two")
    _, u3 = await manager.append_turn(rec.id, "user", "three, before the reply to two")
    _, a2 = await manager.append_turn(rec.id, "assistant", "reply two", turn_number=2)
    assert [u1["turnNumber"], a1["turnNumber"], u2["turnNumber"]] == [1, 1, 2]
    assert [u3["turnNumber"], a2["turnNumber"]] == [3, 2]
    assert (await manager.get(rec.id)).turn_count == 3
    turns = await manager.read_turns(rec.id, 2, 2)
    assert [(t["role"], t["content"]) for t in turns] == [
        ("user", "two"),
        ("assistant", "reply two"),
    ]
    assert len(await manager.read_turns(rec.id)) == 5
    assert [t["content"] for t in await manager.read_turns(rec.id, 3)] == [u3["content"]]


async def test_concurrent_appends_get_distinct_numbers_in_file_order(services: Any) -> None:
    rec = await services.conversations.create("web")
    await asyncio.gather(
        *(services.conversations.append_turn(rec.id, "user", f"msg {i}") for i in range(40))
    )
    turns = [line for line in services.store.read_lines(rec.id) if line["type"] == "turn"]
    assert [t["turnNumber"] for t in turns] == list(range(1, 41))
    assert (await services.index.get(rec.id)).turn_count == 40
    row = await services.index_db.fetchone(
        "SELECT count(DISTINCT turn_number) FROM turns WHERE conversation_id = ?", (rec.id,)
    )
    assert row[0] == 40


async def test_resume_most_recent_by_updated(services: Any) -> None:
    manager = services.conversations
    a = await manager.create("web")
    b = await manager.create("web")
    await manager.create("telegram", identity_key="telegram:9", pinned=True)
    await manager.append_turn(b.id, "user", "b first")
    await asyncio.sleep(0.002)
    await manager.append_turn(a.id, "user", "a later")
    assert (await manager.most_recent("web")).id == a.id
    await asyncio.sleep(0.002)
    await manager.append_turn(b.id, "user", "b again")
    assert (await manager.most_recent("web")).id == b.id
    assert [r.id for r in await manager.list(channel="web")] == [b.id, a.id]
    assert len(await manager.list(pinned=True)) == 1
    assert [r.id for r in await manager.list(channel="web", limit=1, offset=1)] == [a.id]


async def test_resume_the_latest_after_the_clock_was_set_back(
    services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock set back a day after a turn in A, then /new: B (dated a day before A's
    last turn) is the most recent, and stays so as it is talked to; a turn in A again
    makes A the latest."""
    import bot.transcript_lines as lines
    from bot.events import utcnow

    manager = services.conversations
    a = await manager.create("web")
    await manager.append_turn(a.id, "user", "before the jump")
    monkeypatch.setattr(lines, "utcnow", lambda: utcnow() - timedelta(days=1))
    b = await manager.create("web")
    assert (await manager.most_recent("web")).id == b.id
    await manager.append_turn(b.id, "user", "after the jump")
    assert (await manager.most_recent("web")).id == b.id
    await manager.append_turn(a.id, "user", "back to a")
    assert (await manager.most_recent("web")).id == a.id


async def test_rename_model_and_naming(services: Any) -> None:
    manager = services.conversations
    events = Events(services.bus)
    rec = await manager.create("web")
    renamed = await manager.rename(rec.id, "  Holiday   planning\n" + "x" * 100)
    assert renamed.title.startswith("Holiday planning x") and len(renamed.title) == 80
    assert renamed.manually_named
    with pytest.raises(ValueError):
        await manager.rename(rec.id, "   ")
    # regression: the cut at 80 characters kept a space it fell after; a title that is
    # cut says so with "…" (bot.labels.clip_title), within the 80
    cut = await manager.rename(rec.id, "a" * 79 + " tail")
    assert cut.title == "a" * 79 + "…"
    # regression: the cut at 80 code points fell inside a skin-toned emoji (its tone
    # alone at the next title's start, its hand kept): the whole character goes
    thumb = "\U0001f44d\U0001f3fd"
    toned = await manager.rename(rec.id, "b" * 78 + thumb + "c")
    assert toned.title == "b" * 78 + "…"
    renamed = await manager.rename(rec.id, "  Holiday   planning\n" + "x" * 100)
    await manager.set_title_topics(rec.id, "auto-name", ["travel"], 5)
    got = await manager.get(rec.id)
    assert got.title == renamed.title and got.topics == ["travel"]
    await manager.set_model(rec.id, "opus")
    assert (await manager.get(rec.id)).model == "opus"
    assert "conversation_renamed" in events.names()
    assert events.names().count("conversation_updated") >= 3

    auto = await manager.create("web")
    await manager.set_title_topics(auto.id, "garden-notes", ["garden"], 5)
    assert (await manager.get(auto.id)).title == "garden-notes"
    assert not (await manager.get(auto.id)).manually_named


async def test_automatic_naming_racing_a_manual_rename_keeps_the_manual_title(
    services: Any,
) -> None:
    # Regression: set_title_topics read "manually named?" before waiting for the
    # conversation's write lock; a /rename being written at that moment finished first,
    # then the automatic title was written over it.
    manager = services.conversations
    rec = await manager.create("web")
    rename = asyncio.create_task(manager.rename(rec.id, "Dentist Appointments"))
    await asyncio.sleep(0)  # the rename holds the lock, its line being written
    await manager.set_title_topics(rec.id, "Teeth Stuff", ["dental"], 5)
    await rename
    got = await manager.get(rec.id)
    assert got.title == "Dentist Appointments" and got.manually_named
    assert got.topics == ["dental"]
    stored = await services.index.get(rec.id)
    assert stored is not None and stored.title == "Dentist Appointments"


async def test_state_survives_restart(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    services = await open_services(config)
    try:
        rec = await services.conversations.create("web")
        await services.conversations.append_turn(rec.id, "user", "hi")
        await services.conversations.rename(rec.id, "Kept")
        await services.conversations.set_model(rec.id, "haiku")
        before = await services.index.get(rec.id)
    finally:
        await shutdown_services(services)
    services = await open_services(config)
    try:
        assert await services.conversations.get(rec.id) == before
    finally:
        await shutdown_services(services)


async def test_new_for_channel_emits_switch(services: Any) -> None:
    manager = services.conversations
    events = Events(services.bus)
    old = await manager.create(
        "telegram", identity_key="telegram:5", pinned=True, model="opus",
        channel_meta={"chatId": "5"},
    )  # fmt: skip
    fresh = await manager.new_for_channel(old)
    assert fresh.pinned and fresh.model == "opus" and fresh.identity_key == "telegram:5"
    assert fresh.channel_meta == {"chatId": "5"}
    assert (await manager.get(old.id)).pinned is False
    switched = [p for n, p in events.seen if n == "conversation_switched"]
    assert switched == [{"previous_id": old.id, "current_id": fresh.id, "channel": "telegram"}]
    # The unpin is in the transcript, so a rebuilt index agrees.
    assert any(line.get("pinned") is False for line in services.store.read_lines(old.id))


async def test_unknown_conversation(services: Any) -> None:
    with pytest.raises(ConversationNotFound):
        await services.conversations.append_turn("conv-01HQXK5J7G8M3N4P5R6S7T8V9W", "user", "x")


async def test_index_failure_never_loses_the_turn(services: Any) -> None:
    """The transcript is the truth: when the index write fails the turn is still durable
    and the index catches up on the next write."""
    manager = services.conversations
    rec = await manager.create("web")
    real_run = services.index_db.run
    failures = {"left": 1}

    async def flaky_run(fn: Any, *, write: bool = True) -> Any:
        if write and failures["left"]:
            failures["left"] -= 1
            raise OSError("disk hiccup")
        return await real_run(fn, write=write)

    services.index_db.run = flaky_run
    try:
        fresh, _ = await manager.append_turn(rec.id, "user", "durable quokka")
        assert fresh.turn_count == 1  # the in-memory view is right anyway
        assert services.store.read_lines(rec.id)[-1]["content"] == "durable quokka"
        assert (await services.search.search("quokka")).results == []
        await manager.append_turn(rec.id, "assistant", "noted, wombat")
    finally:
        services.index_db.run = real_run
    for word in ("quokka", "wombat"):
        page = await services.search.search(word)
        assert [r.conversation_id for r in page.results] == [rec.id], word
    stored = await services.index.get(rec.id)
    assert stored is not None and stored.turn_count == 1
    assert stored.indexed_bytes == services.store.path(rec.id).stat().st_size


async def test_a_conversation_the_index_refused_leaves_no_transcript_behind(
    services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first contact on a full disk: the transcript was written, the index refused it,
    and the message's retry created another. After a restart the first came back as an
    empty extra conversation (its meta line only)."""
    manager = services.conversations
    before = sorted(p.name for p in manager.store.directory.glob("*.jsonl"))
    real_run = manager.index.db.run

    async def full(fn: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manager.index.db, "run", full)
    with pytest.raises(OSError):
        await manager.create("telegram", identity_key="telegram:77", pinned=True)
    assert sorted(p.name for p in manager.store.directory.glob("*.jsonl")) == before
    monkeypatch.setattr(manager.index.db, "run", real_run)
    rec = await manager.create("telegram", identity_key="telegram:77", pinned=True)
    assert manager.store.path(rec.id).exists()
    assert len(list(manager.store.directory.glob("*.jsonl"))) == len(before) + 1


async def test_pins_are_bounded_and_a_pin_dropped_is_read_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 41): identity key -> pinned conversation was kept for every
    # e-mail thread and group ever seen, for the life of the daemon, while the records
    # it named were dropped from the bounded record cache.
    monkeypatch.setattr("bot.conversations.RECORDS", 3, raising=False)  # (2,048)
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
    )
    services = await open_services(config)
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        manager = services.conversations

        async def say(group: int, text: str) -> None:
            chat = f"-10{group}"
            msg = inbound(text, sender="4004", sender_name="Mia", chat=chat, group_id=chat,
                          group_title=f"group {group}")  # fmt: skip
            await services.router.deliver(msg)
            await settle(services)

        for group in range(6):
            await say(group, f"hello group {group}")
        assert len(manager._pins) <= 3 and "telegram:group:-100" not in manager._pins
        first = await manager.pinned_for("telegram:group:-100")  # from the index
        assert first is not None and manager._pins.get("telegram:group:-100") == first.id
        await say(0, "back in group 0")  # lands in its conversation, not a new one
        assert len(await manager.list()) == 6
        users = [t["content"] for t in await manager.read_turns(first.id) if t["role"] == "user"]
        assert users == ["hello group 0", "back in group 0"]
    finally:
        await shutdown_services(services)


async def test_notes_for_the_next_reply_are_kept_for_the_latest_conversations_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 41): a note (a split offer) no reply ever carried stayed for
    # the life of the daemon, one per conversation that never continued.
    monkeypatch.setattr("bot.conversations.RECORDS", 2, raising=False)  # (2,048)
    services = await open_services(make_config(tmp_path))
    try:
        manager = services.conversations
        for conv in ("conv-a", "conv-b", "conv-c"):
            manager.add_note(conv, f"split {conv}?")
        assert len(manager._notes) == 2 and manager.take_notes("conv-a") == []
        manager.add_note("conv-c", "another")
        assert manager.take_notes("conv-c") == ["split conv-c?", "another"]
        manager.restore_notes("conv-c", ["split conv-c?"])  # a reply that failed
        manager.add_note("conv-c", "later")
        assert manager.take_notes("conv-c") == ["split conv-c?", "later"]
        assert manager.take_notes("conv-c") == []
    finally:
        await shutdown_services(services)
