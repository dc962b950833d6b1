"""What the appends remember per file stays bounded, and a file forgotten is appended to
as correctly as one remembered (its last byte read again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import transcript_appends
from bot.transcript import TranscriptStore

LINE = b'{"type":"event"}\n'


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TranscriptStore]:
    store = TranscriptStore(tmp_path, fsync=False)
    store.open()
    yield store
    store.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files whose last byte an append read (it did not know where they ended)."""
    seen: list[Path] = []
    real = transcript_appends._last_byte

    def counting(path: Path, size: int) -> bytes:
        seen.append(path)
        return real(path, size)

    monkeypatch.setattr(transcript_appends, "_last_byte", counting)
    return seen


async def test_the_ends_remembered_are_the_latest_files_only(
    store: TranscriptStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 41): one entry per transcript and party file ever appended
    # to stayed for the life of the daemon, and a conversation id's path as well.
    monkeypatch.setattr(transcript_appends, "ENDS", 4)
    for n in range(10):
        await store.append_file(tmp_path / f"p{n}.jsonl", LINE)
        store.path(f"conv-{n:026d}")
    assert list(store._ends) == [tmp_path / f"p{n}.jsonl" for n in range(6, 10)]
    assert not hasattr(store, "_paths")


async def test_a_file_forgotten_is_appended_to_as_one_remembered(
    store: TranscriptStore, tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcript_appends, "ENDS", 2)
    kept, torn = tmp_path / "kept.jsonl", tmp_path / "torn.jsonl"
    await store.append_file(kept, LINE)
    await store.append_file(kept, LINE)
    assert reads == []  # remembered: its end is known, nothing read
    await store.append_file(torn, LINE)
    for n in range(2):  # both forgotten
        await store.append_file(tmp_path / f"other{n}.jsonl", LINE)
    assert kept not in store._ends and torn not in store._ends
    with torn.open("ab") as fh:
        fh.write(b'{"type":"ev')  # a crash mid-write (another process): torn
    await store.append_file(kept, LINE)
    await store.append_file(torn, LINE)
    assert reads == [kept, torn]  # read once each, at the first append since
    assert kept.read_bytes() == LINE * 3  # no empty line
    assert torn.read_bytes() == LINE + b'{"type":"ev\n' + LINE  # its own line after it
    await store.append_file(torn, LINE)  # remembered again
    assert reads == [kept, torn]
