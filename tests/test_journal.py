"""The transcript journal (bot.journal): group-committed appends that survive the loss of
the page cache (a machine crash), replayed before anything reads a transcript.

A machine crash is simulated by copying the directory while the store is open (what the
disk holds: the journal is fsynced, the transcripts are not yet) and cutting or garbling
the transcripts' unsynced tails in the copy.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path

import pytest

import bot.journal as journal_module
import bot.journal_files as files_module
import bot.journal_generations as generations_module
from bot.journal_files import (
    HEADER_SIZE,
    decode_header,
    encode_header,
    encode_record,
    read_journal,
)
from bot.journal_generations import MAX_SPARES
from bot.services import close_services, open_services
from bot.transcript import TranscriptStore
from bot.transcript_lines import encode, meta_line, turn_line
from tests.conftest import make_config
from tests.support import inbound, wait_until


async def _store_with_turns(directory: Path, count: int, **kwargs: float) -> TranscriptStore:
    store = TranscriptStore(directory, **kwargs)
    store.open()
    await store.create(meta_line("conv-a", "web", ["owner"]))
    for i in range(1, count + 1):
        await store.append("conv-a", [turn_line("user", f"message {i}", i)])
    return store


def _live_records(directory: Path) -> list[tuple[str, int, bytes]]:
    """The records of the live generations (what a replay would apply), oldest first."""
    read = sorted(read_journal(p) for p in (directory / "journal").glob("*.jnl"))
    return [record for _, live, records in read if live for record in records]


def _crash_copy(source: Path, target: Path) -> None:
    """What the disk would hold after a crash: everything, journal included."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("lock"))


async def _crashed(tmp_path: Path, count: int) -> tuple[Path, bytes]:
    """A store with ``count`` turns, copied as a crash would leave it; returns the copy's
    transcript and the bytes it must hold again after the replay."""
    live = tmp_path / "live"
    store = await _store_with_turns(live, count, checkpoint_seconds=60)
    expected = (live / "conv-a.jsonl").read_bytes()
    _crash_copy(live, tmp_path / "crashed")
    store.close()
    return tmp_path / "crashed" / "conv-a.jsonl", expected


def test_records_round_trip_and_a_torn_tail_ends_the_file(tmp_path: Path) -> None:
    path = tmp_path / "000001.jnl"
    records = [("conv-a.jsonl", 10, b'{"x":1}\n'), ("p1.jsonl", 0, "é\n".encode())]
    blob = encode_header(7, live=True) + b"".join(encode_record(7, *r) for r in records)
    path.write_bytes(blob + encode_record(7, "conv-b.jsonl", 5, b"torn")[:-2])
    assert read_journal(path) == (7, True, records)
    garbled = bytearray(blob)
    garbled[-3] ^= 0xFF  # a flipped byte in the last record: its CRC fails
    path.write_bytes(bytes(garbled))
    assert read_journal(path) == (7, True, records[:1])


def test_stale_records_of_a_reused_file_and_spares_are_never_read(tmp_path: Path) -> None:
    path = tmp_path / "000001.jnl"
    stale = [("conv-a.jsonl", 100 + i, b"old\n") for i in range(4)]
    old_life = encode_header(3, live=True) + b"".join(encode_record(3, *r) for r in stale)
    new = encode_header(9, live=True) + encode_record(9, "conv-a.jsonl", 500, b"new\n")
    # the new life overwrote the start; whole stale records follow right after its tail
    tail_at = len(new) - HEADER_SIZE
    path.write_bytes(
        new + old_life[HEADER_SIZE + tail_at :] + b"".join(encode_record(3, *r) for r in stale)
    )
    assert read_journal(path) == (9, True, [("conv-a.jsonl", 500, b"new\n")])
    path.write_bytes(encode_header(9, live=False) + path.read_bytes()[HEADER_SIZE:])
    assert read_journal(path) == (9, False, [])
    assert decode_header(b"\0" * HEADER_SIZE) == (0, False)  # created, never written


async def test_lost_transcript_writes_come_back_from_the_journal(tmp_path: Path) -> None:
    crashed, expected = await _crashed(tmp_path, 20)
    meta_size = len(encode([meta_line("conv-a", "web", ["owner"])]))
    with open(crashed, "r+b") as fh:  # the page cache never reached the disk
        fh.truncate(meta_size + 30)  # ... except a torn piece of the first line
    again = TranscriptStore(tmp_path / "crashed")
    assert again.open() == 20
    assert crashed.read_bytes() == expected
    assert [line["content"] for line in again.read_lines("conv-a")[1:]] == [
        f"message {i}" for i in range(1, 21)
    ]
    # replayed: the crashed generation is a spare now, the new one is still empty
    assert _live_records(tmp_path / "crashed") == []
    again.close()


async def test_the_replay_log_line_names_its_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: the conversations' and the parties' journals both logged "journal
    # replayed: 1 files, ..." at every start: two identical lines, neither saying which.
    crashed, _ = await _crashed(tmp_path, 3)
    again = TranscriptStore(crashed.parent)
    with caplog.at_level("INFO", logger="my_agent.journal"):
        again.open()
    again.close()
    [line] = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()]
    assert line.startswith(f"journal replayed ({crashed.parent / 'journal'}): ")


async def test_garbage_in_place_of_a_lost_tail_is_replaced(tmp_path: Path) -> None:
    crashed, expected = await _crashed(tmp_path, 5)
    data = bytearray(crashed.read_bytes())
    data[-40:] = b"\0" * 40  # zero-filled blocks where the last write was
    crashed.write_bytes(bytes(data))
    again = TranscriptStore(tmp_path / "crashed")
    assert again.open() >= 1
    assert crashed.read_bytes() == expected
    again.close()


async def test_replay_after_a_clean_copy_changes_nothing(tmp_path: Path) -> None:
    """A killed process loses no page cache: the replay finds every record in place."""
    killed, before = await _crashed(tmp_path, 10)
    again = TranscriptStore(killed.parent)
    assert again.open() == 0
    assert killed.read_bytes() == before
    again.close()


async def test_deleted_files_stay_deleted_and_new_party_files_come_back(tmp_path: Path) -> None:
    live = tmp_path / "live"
    store = await _store_with_turns(live, 3, checkpoint_seconds=60)
    await store.append_file(live / "p1.jsonl", b'{"type":"message","n":1}\n')
    _crash_copy(live, tmp_path / "crashed")
    store.close()
    (tmp_path / "crashed" / "conv-a.jsonl").unlink()  # deleted on purpose
    (tmp_path / "crashed" / "p1.jsonl").unlink()  # created by its first append, entry lost
    again = TranscriptStore(tmp_path / "crashed")
    again.open()
    assert not (tmp_path / "crashed" / "conv-a.jsonl").exists()
    assert (tmp_path / "crashed" / "p1.jsonl").read_bytes() == b'{"type":"message","n":1}\n'
    again.close()


def _headers(directory: Path) -> list[tuple[int, bool]]:
    return sorted(
        decode_header(p.read_bytes()[:HEADER_SIZE]) for p in (directory / "journal").glob("*.jnl")
    )


async def test_checkpoints_recycle_journal_files_and_close_leaves_none_live(
    tmp_path: Path,
) -> None:
    store = await _store_with_turns(tmp_path, 2, checkpoint_seconds=0.05)
    for i in range(3, 12):
        await asyncio.sleep(0.06)
        await store.append("conv-a", [turn_line("user", f"message {i}", i)])
    for _ in range(100):  # the checkpoint thread turns each old generation into a spare
        if sum(live for _, live in _headers(tmp_path)) == 1:
            break
        await asyncio.sleep(0.02)
    headers = _headers(tmp_path)
    assert sum(live for _, live in headers) == 1
    assert headers[-1][1] and headers[-1][0] >= 8  # the newest generation is the live one
    # nine generations went through at most three files: spares are written over
    assert len(headers) <= MAX_SPARES + 1
    store.close()
    assert not any(live for _, live in _headers(tmp_path))
    assert len(store.read_lines("conv-a")) == 12
    again = TranscriptStore(tmp_path)  # a restart numbers on above every old generation
    again.open()
    assert max(g for g, live in _headers(tmp_path) if live) > headers[-1][0]
    again.close()


async def _rotate_now(store: TranscriptStore) -> None:
    """One rotation, driven by the test, and the old generation's checkpoint finished:
    no dependence on how fast the appends or the checkpoint thread run."""
    journal = store._journal
    assert journal is not None
    generation = journal._generation
    # Regression: the helper used to set checkpoint_seconds to 0 and append; a journal
    # thread slower than the test then rotated twice (once before that append, once after).
    journal.checkpoint_soon()
    for _ in range(1000):
        checkpoint = journal._checkpoint
        if journal._generation > generation and checkpoint is not None and checkpoint.done():
            break
        await asyncio.sleep(0.01)
    assert journal._generation == generation + 1


async def test_a_reused_file_is_overwritten_in_place(tmp_path: Path) -> None:
    """The second life of a journal file writes over the blocks it has: no growth, so the
    batch's fdatasync has no metadata to commit."""
    # Rotations only where the test asks for them (a slow machine once rotated in the
    # middle of a generation's appends and the sizes differed: regression).
    store = await _store_with_turns(tmp_path, 1, checkpoint_seconds=60)
    sizes = []
    for generation in range(6):
        for i in range(20):
            await store.append("conv-a", [turn_line("user", f"g{generation} {i:03d}", i)])
        sizes.append(
            sorted((p.name, p.stat().st_size) for p in (tmp_path / "journal").glob("*.jnl"))
        )
        await _rotate_now(store)
    store.close()
    # the same files, and they stopped growing once each had been used
    assert sizes[-1] == sizes[3]
    assert len(sizes[-1]) <= MAX_SPARES + 1


async def test_a_recycled_journal_replays_only_its_own_generation(tmp_path: Path) -> None:
    live = tmp_path / "live"
    store = await _store_with_turns(live, 1, checkpoint_seconds=0.05)
    for generation in range(5):  # every file has an earlier life by now
        for i in range(10):
            await store.append("conv-a", [turn_line("user", f"g{generation} {i}", i)])
        await asyncio.sleep(0.06)
    assert store._journal is not None
    store._journal.checkpoint_seconds = 60
    for _ in range(100):  # the last checkpoint is done: one live generation
        if sum(live for _, live in _headers(live)) == 1:
            break
        await asyncio.sleep(0.02)
    for i in range(10):
        await store.append("conv-a", [turn_line("user", f"last {i}", i)])
    expected = (live / "conv-a.jsonl").read_bytes()
    _crash_copy(live, tmp_path / "crashed")
    store.close()
    records = _live_records(tmp_path / "crashed")
    assert records and all(name == "conv-a.jsonl" for name, _, _ in records)
    crashed = tmp_path / "crashed" / "conv-a.jsonl"
    with open(crashed, "r+b") as fh:  # what the live generation covers was lost
        fh.truncate(min(offset for _, offset, _ in records))
    again = TranscriptStore(tmp_path / "crashed")
    assert again.open() == len(records)
    assert crashed.read_bytes() == expected
    again.close()


async def test_a_first_version_journal_is_replayed(tmp_path: Path) -> None:
    import struct
    import zlib

    def legacy_record(name: str, offset: int, data: bytes) -> bytes:
        body = struct.pack("<QH", offset, len(name)) + name.encode() + data
        return struct.pack("<II", len(data), zlib.crc32(body)) + body

    store = await _store_with_turns(tmp_path / "live", 3, checkpoint_seconds=60)
    store.close()
    transcript = tmp_path / "live" / "conv-a.jsonl"
    expected = transcript.read_bytes()
    cut = len(expected) - 40
    (tmp_path / "live" / "journal" / "000000000004.wal").write_bytes(
        legacy_record("conv-a.jsonl", cut, expected[cut:])
    )
    transcript.write_bytes(expected[:cut])
    again = TranscriptStore(tmp_path / "live")
    assert again.open() == 1
    assert transcript.read_bytes() == expected
    assert not list((tmp_path / "live" / "journal").glob("*.wal"))
    again.close()


async def test_a_second_process_does_not_replay_a_journal_in_use(tmp_path: Path) -> None:
    store = await _store_with_turns(tmp_path, 2, checkpoint_seconds=60)
    other = TranscriptStore(tmp_path)
    assert other.open() == 0  # the lock is held: no replay, direct fsyncs
    assert _live_records(tmp_path)  # the live journal is untouched
    await other.append("conv-a", [turn_line("user", "from the other process", 3)])
    await store.append("conv-a", [turn_line("user", "message 4", 4)])
    other.close()
    store.close()
    assert [line["turnNumber"] for line in store.read_lines("conv-a")[1:]] == [1, 2, 3, 4]


async def test_concurrent_appends_share_batches_and_keep_per_file_order(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path, checkpoint_seconds=60)
    store.open()
    ids = [f"conv-{k}" for k in range(8)]
    for conv in ids:
        await store.create(meta_line(conv, "web", ["owner"]))

    async def writer(conv: str) -> list[int]:
        return [await store.append(conv, [turn_line("user", f"{conv} {i}", i)]) for i in range(25)]

    sizes = await asyncio.gather(*(writer(c) for c in ids))
    records = _live_records(tmp_path)
    store.close()
    assert len(records) == 8 * 25
    for conv, conv_sizes in zip(ids, sizes, strict=True):
        assert conv_sizes == sorted(conv_sizes)
        assert conv_sizes[-1] == (tmp_path / f"{conv}.jsonl").stat().st_size
        assert [line["content"] for line in store.read_lines(conv)[1:]] == [
            f"{conv} {i}" for i in range(25)
        ]


def _on_disk(monkeypatch: pytest.MonkeyPatch, name: str, value: object) -> None:
    """Replace the journal's disk primitive ``name`` (``datasync``, ``write_all``) for
    its writer thread and its generations alike: the disk fails for both."""
    monkeypatch.setattr(journal_module, name, value)
    monkeypatch.setattr(generations_module, name, value)


async def test_a_failed_journal_fsync_fails_the_batch_and_later_appends_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the crash copy goes inside this test's own directory: it went to the worker's
    # shared one (tmp_path.parent), where a second run of the test found it (FileExistsError)
    live = tmp_path / "live"
    store = await _store_with_turns(live, 1, checkpoint_seconds=60)
    real_datasync = journal_module.datasync
    calls = {"n": 0}

    def failing_once(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "simulated I/O error")
        real_datasync(fd)

    _on_disk(monkeypatch, "datasync", failing_once)
    with pytest.raises(OSError, match="simulated"):
        await store.append("conv-a", [turn_line("user", "lost?", 2)])
    await store.append("conv-a", [turn_line("user", "message 2", 2)])
    _on_disk(monkeypatch, "datasync", real_datasync)
    _crash_copy(live, tmp_path / "crashed")
    store.close()
    # the failed batch was never acknowledged; the later one is in a readable journal file
    again = TranscriptStore(tmp_path / "crashed")
    again.open()
    assert again.read_lines("conv-a")[-1]["content"] == "message 2"
    again.close()


async def test_a_refused_batch_is_never_replayed_over_later_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a refused batch's records stayed readable in its journal file (their
    write had landed, only the sync failed). When that generation's checkpoint failed
    too (the disk still failing), the file stayed live, and the next start, even after a
    clean stop, replayed the refused record at its offset: the transcript was cut there,
    and every message acknowledged after it (the retry stored at that very offset, and
    the rest) was lost."""
    store = await _store_with_turns(tmp_path, 1, checkpoint_seconds=60)
    real = journal_module.datasync
    broken = {"on": True}

    def failing_once(fd: int) -> None:
        if broken["on"]:
            broken["on"] = False
            raise OSError(5, "simulated I/O error")
        real(fd)

    tried = threading.Event()

    def checkpoint_fails(path: Path, generation: int) -> None:
        tried.set()
        raise OSError(5, "simulated I/O error")

    journal = store._journal
    assert journal is not None
    _on_disk(monkeypatch, "datasync", failing_once)
    monkeypatch.setattr(journal, "_make_spare", checkpoint_fails)  # the refused generation's
    with pytest.raises(OSError, match="simulated"):
        await store.append("conv-a", [turn_line("user", "refused", 2)])
    assert await asyncio.to_thread(tried.wait, 10)  # that generation stays live
    monkeypatch.undo()
    await store.append("conv-a", [turn_line("user", "message 2", 2)])  # the retry
    await store.append("conv-a", [turn_line("user", "message 3", 3)])
    store.close()  # a clean stop: the later generations are checkpointed
    again = TranscriptStore(tmp_path)
    again.open()
    contents = [line["content"] for line in again.read_lines("conv-a") if line["type"] == "turn"]
    again.close()
    assert contents == ["message 1", "message 2", "message 3"]


@pytest.mark.parametrize("fails", ["write_all", "datasync"])
async def test_a_failed_journal_batch_leaves_nothing_in_the_transcripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """Regression: the transcripts were written before the journal record; when the
    journal's write or sync then failed, the refused appends' lines stayed in their
    transcripts, so the retry of a refused message (the router's, the channel's
    redelivery) stored it a second time."""
    store = await _store_with_turns(tmp_path, 1, checkpoint_seconds=60)
    real = getattr(journal_module, fails)
    broken = {"on": True}

    def failing(*args: object) -> None:
        if broken["on"]:
            raise OSError(28, "No space left on device")
        real(*args)

    _on_disk(monkeypatch, fails, failing)
    other = encode([meta_line("conv-b", "web", ["owner"])])
    refused = await asyncio.gather(
        store.append("conv-a", [turn_line("user", "message 2", 2)]),
        store.append("conv-a", [turn_line("user", "message 3", 3)]),
        store.append_file(tmp_path / "conv-b.jsonl", other),
        return_exceptions=True,
    )
    assert all(isinstance(r, OSError) for r in refused)
    assert (tmp_path / "conv-b.jsonl").read_bytes() == b""
    broken["on"] = False
    await store.append("conv-a", [turn_line("user", "message 2", 2)])  # the retries
    await store.append("conv-a", [turn_line("user", "message 3", 3)])
    contents = [line["content"] for line in store.read_lines("conv-a") if line["type"] == "turn"]
    assert contents == ["message 1", "message 2", "message 3"]
    store.close()


async def test_daemon_rebuilds_from_the_journal_after_a_machine_crash(tmp_path: Path) -> None:
    """End to end: messages acknowledged by the router, transcripts cut back to their
    meta lines and the index deleted: the next start has every message, searchable."""

    live = make_config(tmp_path / "live")
    services = await open_services(live)
    try:
        for i in range(12):
            await services.router.deliver(
                inbound(
                    f"note {i} about the zeppelin",
                    channel="web",
                    message_id=f"m{i}",
                    addressed=False,
                )
            )
        _crash_copy(live.data_dir, tmp_path / "crashed")
    finally:
        await close_services(services)
    conversations = tmp_path / "crashed" / "conversations"
    for path in conversations.glob("conv-*.jsonl"):
        first = path.read_bytes().split(b"\n", 1)[0] + b"\n"
        path.write_bytes(first)  # only the meta line was durable in the file itself
    for path in conversations.glob("conversations.db*"):
        path.unlink()
    crashed = make_config(tmp_path / "crashed-config", data_dir=str(tmp_path / "crashed"))
    services = await open_services(crashed)
    try:
        page = await services.search.search("zeppelin", limit=5)
        assert page.results
        rows = await services.index_db.fetchall("SELECT content FROM turns ORDER BY id")
        assert [r[0] for r in rows if "zeppelin" in r[0]] == [
            f"note {i} about the zeppelin" for i in range(12)
        ]
    finally:
        await close_services(services)


@pytest.mark.parametrize("syncfs", ["works", "fails", "absent"])
def test_checkpoint_sync_uses_syncfs_or_falls_back_to_fsync_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncfs: str
) -> None:
    files = {tmp_path / f"conv-{i}.jsonl" for i in range(3)}
    for path in files:
        path.write_bytes(b"{}\n")
    calls: dict[str, int] = {"syncfs": 0, "fsync": 0}

    def fake_syncfs(fd: int) -> int:
        calls["syncfs"] += 1
        return 0 if syncfs == "works" else -1

    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    monkeypatch.setattr(files_module, "_syncfs", None if syncfs == "absent" else fake_syncfs)
    monkeypatch.setattr(files_module.os, "fsync", counting_fsync)
    files_module.sync_files(tmp_path, files | {tmp_path / "conv-deleted.jsonl"})
    assert (
        calls
        == {
            "works": {"syncfs": 1, "fsync": 0},
            "fails": {"syncfs": 1, "fsync": 3},
            "absent": {"syncfs": 0, "fsync": 3},
        }[syncfs]
    )


def test_syncfs_is_found_on_linux() -> None:
    import sys

    if sys.platform.startswith("linux"):
        assert files_module._syncfs is not None


@pytest.mark.parametrize("fsync", ["always", "never"])
async def test_a_second_daemon_on_the_same_data_directory_is_refused(
    tmp_path: Path, fsync: str
) -> None:
    # Regression (fsync never): there is no journal then, and its lock was not taken
    # either, so a second daemon ran on the same store and both answered every message.
    from bot.journal import journal_in_use
    from bot.services import DataDirInUse

    config = make_config(tmp_path, transcripts={"fsync": fsync})
    first = await open_services(config, exclusive=True)
    try:
        assert journal_in_use(config.conversations_dir)
        with pytest.raises(DataDirInUse, match="another my-agent daemon"):
            await open_services(config, exclusive=True)
        reader = await open_services(config)  # a CLI command next to the daemon
        await close_services(reader)
        await first.router.deliver(
            inbound("still fine", channel="web", message_id="w1", addressed=False)
        )
    finally:
        await close_services(first)
    assert not journal_in_use(config.conversations_dir)


async def test_rotation_after_the_checkpoint_pool_shut_down_checkpoints_inline(
    tmp_path: Path,
) -> None:
    """At interpreter exit without close() (a crash of the program) the pool refuses new
    work; the journal thread must not die of it (regression: it raised RuntimeError)."""
    store = await _store_with_turns(tmp_path, 1, checkpoint_seconds=0.05)
    assert store._journal is not None
    store._journal._checkpoints.shutdown(wait=True)
    await asyncio.sleep(0.06)
    await asyncio.wait_for(store.append("conv-a", [turn_line("user", "after the pool", 2)]), 5)
    await asyncio.sleep(0.06)
    await asyncio.wait_for(store.append("conv-a", [turn_line("user", "still going", 3)]), 5)
    # the old ones checkpointed: by the journal thread, after the append has returned (a
    # rotation may be under way, between a generation made spare and the next one live)
    await wait_until(lambda: sum(live for _, live in _headers(tmp_path)) == 1, 10, "one live")
    store.close()
    assert [line["content"] for line in store.read_lines("conv-a")[1:]] == [
        "message 1",
        "after the pool",
        "still going",
    ]


def test_a_generation_whose_header_write_was_lost_is_never_reused(tmp_path: Path) -> None:
    """A crash in the middle of a generation's first batch can leave its records on disk
    under the file's old spare header: that generation is in no header, and reusing its
    number would let those unacknowledged records pass for new ones."""
    journal = tmp_path / "journal"
    journal.mkdir()
    torn = encode_record(7, "conv-a.jsonl", 0, b'{"never":"acknowledged"}\n')
    (journal / "000001.jnl").write_bytes(encode_header(3, live=False) + torn * 4)
    store = TranscriptStore(tmp_path)
    assert store.open() == 0  # nothing live: nothing replayed
    assert not (tmp_path / "conv-a.jsonl").exists()
    (generation, live), *_ = [h for h in _headers(tmp_path) if h[1]]
    assert live and generation > 7
    store.close()


async def test_checkpoint_soon_rotates_once_and_only_after_writes(tmp_path: Path) -> None:
    store = await _store_with_turns(tmp_path, 1, checkpoint_seconds=60)
    journal = store._journal
    assert journal is not None
    await _rotate_now(store)  # exactly one new generation (asserted inside)
    generation = journal._generation
    journal.checkpoint_soon()  # nothing written since: nothing to checkpoint
    await asyncio.sleep(0.1)
    assert journal._generation == generation
    await store.append("conv-a", [turn_line("user", "later", 2)])
    for _ in range(200):  # the request stands until there is something to checkpoint
        if journal._generation > generation:
            break
        await asyncio.sleep(0.01)
    assert journal._generation == generation + 1
    store.close()
    assert [line["content"] for line in store.read_lines("conv-a")[1:]] == ["message 1", "later"]


async def test_a_failed_checkpoint_is_tried_again_with_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a generation whose checkpoint failed (the disk failing for a moment)
    stayed live until the next start, which replayed it over whatever happened to its
    files meanwhile."""
    store = await _store_with_turns(tmp_path, 1, checkpoint_seconds=60)
    journal = store._journal
    assert journal is not None
    real = journal._make_spare
    failed: list[int] = []

    def fails_once(path: Path, generation: int) -> None:
        if not failed:
            failed.append(generation)
            raise OSError(5, "simulated I/O error")
        real(path, generation)

    monkeypatch.setattr(journal, "_make_spare", fails_once)
    journal.checkpoint_soon()
    await store.append("conv-a", [turn_line("user", "message 2", 2)])
    for _ in range(200):  # the failed checkpoint has run
        if failed and journal._checkpoint is not None and journal._checkpoint.done():
            break
        await asyncio.sleep(0.01)
    assert failed
    journal.checkpoint_soon()
    await store.append("conv-a", [turn_line("user", "message 3", 3)])

    def lives() -> list[int]:
        files = (tmp_path / "journal").glob("*.jnl")
        return [generation for generation, live, _ in map(read_journal, files) if live]

    for _ in range(200):  # the next generation's checkpoint has run
        if failed[0] not in lives():
            break
        await asyncio.sleep(0.01)
    assert failed[0] not in lives(), lives()  # checkpointed with the next generation
    store.close()
