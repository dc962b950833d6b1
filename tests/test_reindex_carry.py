"""``my-agent reindex`` keeps the vectors still valid (bot/reindex_carry.py): those the
old index made with the same model from the same text are copied, byte for byte, and
only the others are left to embed.

Regression (session 42): the reindex dropped every vector with the old index; at 105,000
turns the daemon then embedded them all again (~30 minutes under load, search by meaning
incomplete meanwhile), though neither the model nor most texts had changed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot import cli, tasks
from bot.config.model import AppConfig, EmbeddingConfig
from bot.daemon_vectors import _open_vectors
from bot.services import open_services
from tests.conftest import make_config, raw_config, shutdown_services
from tests.sqlite_driver import sqlite3
from tests.test_reindex_vectors import EMBEDDING, Store, _owed, store
from tests.test_search_latency import HashEmbedder

__all__ = ["store"]  # (the fixture, from the reindex's own tests)

NOTES = "Kayak trip: the lake, Saturday at nine."

Vectors = dict[tuple[str, int, str], tuple[bytes, bytes, bytes]]


def _reindex(path: Path, *more: str) -> dict[str, Any]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--config", str(path), "reindex", "--json", *more]) == 0
    return dict(json.loads(out.getvalue()))


def _vectors(config: AppConfig) -> tuple[Vectors, dict[str, bytes]]:
    """Each turn window's (float32, float16, sign bits) by (conversation, turn, role),
    and each conversation's notes vector (float16): what survives a rebuild, not ids."""
    from bot.db import connect_sync

    conn = connect_sync(config.index_path)  # (sqlite-vec loaded: turns_vec)
    try:
        rows = conn.execute(
            "SELECT t.conversation_id, t.turn_number, t.role, e.embedding, v.vector, v.bits "
            "FROM turn_vectors v JOIN turns t ON t.id = v.turn_id "
            "JOIN turns_vec e ON e.rowid = v.turn_id"
        ).fetchall()
        notes = dict(conn.execute("SELECT conversation_id, vector FROM abbreviation_vectors"))
    finally:
        conn.close()
    windows = {
        (str(c), int(n), str(r)): (bytes(f), bytes(h), bytes(b)) for c, n, r, f, h, b in rows
    }
    return windows, {str(c): bytes(v) for c, v in notes.items()}


def _embedded(path: Path, config: AppConfig) -> tuple[Vectors, dict[str, bytes]]:
    """The store with every vector embedded (``reindex --vectors``), notes on one
    conversation first."""

    async def notes() -> None:
        services = await open_services(config)
        try:
            first = (await services.conversations.list())[-1]
            await services.conversations.set_abbreviation(first.id, NOTES)
        finally:
            await shutdown_services(services)

    asyncio.run(notes())
    report = _reindex(path, "--vectors")
    assert report["vectorsOwed"] == {"turns": 0, "abbreviations": 0}
    return _vectors(config)


def test_a_reindex_keeps_the_vectors_bit_for_bit(store: Store) -> None:
    path, config, embedder = store
    windows, notes = _embedded(path, config)
    assert len(windows) == 6 and len(notes) == 1
    embedder.calls.clear()
    report = _reindex(path)
    assert report["vectorsKept"] == {"turns": 6, "abbreviations": 1, "terms": 0}
    assert report["vectorsOwed"] == {"turns": 0, "abbreviations": 0}
    assert embedder.calls == []  # copied, not embedded
    assert _vectors(config) == (windows, notes)


def test_the_daemon_finds_nothing_to_embed_after_it(store: Store) -> None:
    path, config, _ = store
    _embedded(path, config)
    _reindex(path)

    async def start() -> None:
        services = await open_services(config, embedder=HashEmbedder())
        try:
            assert await services.search.start()
            assert not (await services.search.search("kayak")).vectors_incomplete
            await _open_vectors(services)  # the daemon's background start
            running = [t for t in tasks.running_tasks() if t.get_name() == "reindex-vectors"]
            for rebuild in running:
                done = await asyncio.wait_for(rebuild, 30)
                assert done["turns"] == 0 and done["abbreviations"] == 0
        finally:
            await shutdown_services(services)

    asyncio.run(start())


def test_vectors_stored_before_their_text_hash_are_kept_too(store: Store) -> None:
    """Migration 16 left ``text_hash`` NULL: the old index's own turns tell the text."""
    path, config, _ = store
    windows, notes = _embedded(path, config)
    conn = sqlite3.connect(str(config.index_path))
    try:
        conn.execute("UPDATE turn_vectors SET text_hash = NULL")
        conn.commit()
    finally:
        conn.close()
    report = _reindex(path)
    assert report["vectorsKept"]["turns"] == 6
    assert _vectors(config) == (windows, notes)


def _transcript(config: AppConfig, conv_id: str) -> Path:
    (found,) = config.conversations_dir.glob(f"{conv_id}*.jsonl")
    return found


@pytest.mark.parametrize("legacy", [False, True], ids=["hashed", "before-migration-16"])
def test_a_window_whose_text_changed_is_embedded_again(store: Store, legacy: bool) -> None:
    path, config, embedder = store
    windows, _ = _embedded(path, config)
    if legacy:
        conn = sqlite3.connect(str(config.index_path))
        conn.execute("UPDATE turn_vectors SET text_hash = NULL")
        conn.commit()
        conn.close()
    conv_ids = sorted({key[0] for key in windows})
    edited, appended = conv_ids[0], conv_ids[1]

    async def append() -> None:  # a message that changes its neighbour's window
        services = await open_services(config)
        try:
            await services.conversations.append_turn(appended, "user", "and the paddles?")
        finally:
            await shutdown_services(services)

    asyncio.run(append())
    # a transcript edited by hand: its first message says something else
    transcript = _transcript(config, edited)
    lines = transcript.read_text(encoding="utf-8").splitlines()
    for at, line in enumerate(lines):
        event = json.loads(line)
        if event.get("role") == "user":
            event["content"] = "the canoe trip on the river"
            lines[at] = json.dumps(event, ensure_ascii=False)
            break
    transcript.write_text("\n".join(lines) + "\n", encoding="utf-8")

    report = _reindex(path)
    # edited: both windows (each holds the first message); appended: the reply's window
    # (radius 1: it now holds the new message too), and the new message's own
    assert report["vectorsKept"]["turns"] == 3
    assert report["vectorsOwed"] == {"turns": 4, "abbreviations": 0}
    after, _ = _vectors(config)
    kept = {key for key in windows if key[0] not in (edited, appended)} | {(appended, 1, "user")}
    assert set(after) == kept
    assert all(after[key] == windows[key] for key in kept)
    # what was not kept is embedded again, as before the session
    embedder.calls.clear()
    report = _reindex(path, "--vectors")
    assert report["vectors"]["turns"] == 4
    assert _owed(config) == (0, 0)


def test_another_model_carries_nothing(store: Store) -> None:
    path, config, embedder = store
    _embedded(path, config)
    embedder.config = EmbeddingConfig(model_name="another/model", dimensions=embedder.dimensions)
    report = _reindex(path)
    assert report["vectorsKept"] == {"turns": 0, "abbreviations": 0, "terms": 0}
    assert report["vectorsOwed"] == {"turns": 6, "abbreviations": 1}
    assert _vectors(config) == ({}, {})


def _damage(index: Path, table: str) -> None:
    """Zeros over ``table``'s root page (a page torn by a failing disk)."""
    conn = sqlite3.connect(str(index))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        page = int(root.fetchone()[0])
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    with index.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\x00" * size)


@pytest.mark.parametrize("table", ["turn_vectors", "abbreviation_vectors"])
def test_an_old_index_that_cannot_be_read_carries_nothing(
    store: Store, table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Damage in the turn vectors (read first) or the notes' (read once the windows are
    copied: those are taken out again): the reindex ends as before, all to embed."""
    path, config, _ = store
    _embedded(path, config)
    _damage(config.index_path, table)
    report = _reindex(path)
    assert "the vectors of the old index could not be read (" in report["warnings"][-1]
    assert "cannot be read: database disk image is malformed" in capsys.readouterr().err
    assert report["turns"] == 6
    assert report["vectorsKept"] == {"turns": 0, "abbreviations": 0, "terms": 0}
    assert report["vectorsOwed"] == {"turns": 6, "abbreviations": 1}
    assert _vectors(config) == ({}, {})
    # embedded again, as after any reindex before session 42
    _reindex(path, "--vectors")
    assert _owed(config) == (0, 0)


def test_the_report_says_what_was_kept(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, config, _ = store
    _embedded(path, config)
    capsys.readouterr()
    assert cli.main(["--config", str(path), "reindex"]) == 0
    out = capsys.readouterr().out
    assert "  vectors: 6 turn windows and 1 note kept from the old index" in out, out
    assert "to embed" not in out


def test_keyword_only_stores_keep_nothing(store: Store, tmp_path: Path) -> None:
    path, config, _ = store
    _embedded(path, config)
    raw = raw_config(tmp_path, **{**EMBEDDING, "embedding": {"enabled": False}})
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    report = _reindex(path)
    assert report["vectorsKept"] is None and report["vectorsOwed"] is None


def test_a_window_holding_a_forward_is_kept_too(store: Store) -> None:
    """The reindex reads a turn's window as the vectors do, the owner's forward after
    their words (migration 19): read without it, every such window was embedded again."""
    path, config, embedder = store

    async def forward() -> None:
        services = await open_services(config)
        try:
            rec = await services.conversations.create("email")
            forwarded = {"text": "From: Ana\n\nThe kayak rental ends at six", "from": "Ana"}
            await services.conversations.append_turn(
                rec.id, "user", "What do I answer her?", metadata={"forwarded": forwarded}
            )
            await services.conversations.append_turn(rec.id, "assistant", "Say yes.")
        finally:
            await shutdown_services(services)

    asyncio.run(forward())
    windows, notes = _embedded(path, config)
    assert len(windows) == 8
    embedder.calls.clear()
    report = _reindex(path)
    assert report["vectorsKept"]["turns"] == 8
    assert embedder.calls == []
    assert _vectors(config) == (windows, notes)


@pytest.mark.parametrize("legacy", [False, True], ids=["hashed", "before-migration-16"])
def test_a_reindex_across_another_turn_window_carries_no_window(
    store: Store, tmp_path: Path, legacy: bool
) -> None:
    """Regression (session 42): a window stored before its text hash was matched as if
    made with the configured ``embedding.turn_window``: a conversation's last window,
    embedded with one neighbour, was carried as the one with two it now reads, and the
    daemon never noticed. The old index records its size: another one carries no window
    (the notes are kept), and the rebuilt index records the configured one."""
    path, config, _ = store

    async def third_turns() -> None:  # (three turns: windows of 1 and 2 differ)
        services = await open_services(config)
        try:
            for rec in await services.conversations.list():
                await services.conversations.append_turn(rec.id, "user", "and the paddles?")
        finally:
            await shutdown_services(services)

    asyncio.run(third_turns())
    windows, notes = _embedded(path, config)
    assert len(windows) == 9
    if legacy:
        conn = sqlite3.connect(str(config.index_path))
        conn.execute("UPDATE turn_vectors SET text_hash = NULL")
        conn.commit()
        conn.close()
    wider = {**EMBEDDING, "embedding": {**EMBEDDING["embedding"], "turn_window": 2}}
    path.write_text(yaml.safe_dump(raw_config(tmp_path, **wider)), encoding="utf-8")
    report = _reindex(path)
    assert report["vectorsKept"] == {"turns": 0, "abbreviations": 1, "terms": 0}
    assert report["vectorsOwed"] == {"turns": 9, "abbreviations": 0}
    assert _vectors(config) == ({}, notes)
    conn = sqlite3.connect(str(config.index_path))
    try:
        meta = conn.execute(
            "SELECT value FROM index_meta WHERE key = 'embedding_turn_window'"
        ).fetchone()
    finally:
        conn.close()
    assert meta == ("2",)
    # embedded at the new size, and kept by the next reindex
    assert _reindex(path, "--vectors")["vectors"]["turns"] == 9
    assert _reindex(path)["vectorsKept"]["turns"] == 9


SOFT: dict[str, Any] = {**EMBEDDING, "search": {"soft_coverage": True}}


def _terms_mark(config: AppConfig) -> tuple[str, ...] | None:
    conn = sqlite3.connect(str(config.index_path))
    try:
        row = conn.execute("SELECT value FROM index_meta WHERE key = 'term_vectors'").fetchone()
    finally:
        conn.close()
    return None if row is None else tuple(row)


def _soft_store(store: Store, tmp_path: Path) -> AppConfig:
    """The store with ``search.soft_coverage`` on, every vector and word embedded."""
    path, _, embedder = store
    path.write_text(yaml.safe_dump(raw_config(tmp_path, **SOFT)), encoding="utf-8")
    config = make_config(tmp_path, **SOFT)
    _embedded(path, config)
    assert _terms_mark(config) == (embedder.model_id,)
    return config


def _daemon_start(config: AppConfig, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, list[int]]:
    """The daemon's vector start on the store: (whether search ranked with soft
    coverage at once, before the start's rebuild; the words its rebuild embedded, once
    for each scan of every turn's words)."""
    import bot.vector_rebuild

    scans: list[int] = []
    scan = bot.vector_rebuild.index_all_terms

    async def counted(*args: Any) -> tuple[int, bool]:
        added, complete = await scan(*args)
        scans.append(added)
        return added, complete

    monkeypatch.setattr(bot.vector_rebuild, "index_all_terms", counted)

    async def start() -> bool:
        services = await open_services(config, embedder=HashEmbedder())
        try:
            assert await services.search.start()
            soft = (await services.search.scored("the kayak trip")).terms is not None
            await _open_vectors(services)
            for rebuild in [t for t in tasks.running_tasks() if t.get_name() == "reindex-vectors"]:
                await asyncio.wait_for(rebuild, 30)
            vectors = services.search.vectors
            assert vectors is not None and vectors.terms_ready and not vectors.stale
            return soft
        finally:
            await shutdown_services(services)

    return asyncio.run(start()), scans


def test_a_reindex_keeps_the_word_vectors_complete(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (session 42): the word vectors were copied but not the old index's
    ``index_meta.term_vectors``: the daemon's start scanned every turn's words again
    (minutes on a large store) and ranked without soft coverage until it was done."""
    path, _, embedder = store
    config = _soft_store(store, tmp_path)
    embedder.calls.clear()
    report = _reindex(path)
    assert report["vectorsKept"]["terms"] > 0
    assert embedder.calls == []  # (the words checked, none embedded)
    assert _terms_mark(config) == (embedder.model_id,)
    soft, scans = _daemon_start(config, monkeypatch)
    assert soft and scans == []  # soft coverage at once, nothing to scan


def test_a_rebuilt_store_with_new_words_stays_incomplete(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word the old index has no vector for (a transcript edited by hand): the mark is
    not kept, and the daemon's start completes the table as before."""
    path, _, embedder = store
    config = _soft_store(store, tmp_path)
    conv_id = sorted(_vectors(config)[0])[0][0]
    transcript = _transcript(config, conv_id)
    lines = transcript.read_text(encoding="utf-8").splitlines()
    for at, line in enumerate(lines):
        event = json.loads(line)
        if event.get("role") == "assistant":
            event["content"] = "the canoe went downriver"
            lines[at] = json.dumps(event, ensure_ascii=False)
    transcript.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = _reindex(path)
    assert report["vectorsKept"]["terms"] > 0
    assert _terms_mark(config) is None
    soft, scans = _daemon_start(config, monkeypatch)
    # one scan of every turn's words (the edited turn's own window, embedded first,
    # brought "canoe" and "downriver": the scan finds none left to add)
    assert not soft and len(scans) == 1
    assert _terms_mark(config) == (embedder.model_id,)


def test_ctrl_c_while_the_vectors_are_copied_says_the_rebuilt_index_is_kept(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 42's QA): a Ctrl-C during the copy exited 130 saying nothing.
    import signal

    import bot.reindex_carry
    from bot import exitcodes

    path, config, _ = store
    _embedded(path, config)
    real = bot.reindex_carry._copy
    calls: list[int] = []

    async def interrupted_once(*args: Any) -> int:
        calls.append(1)
        if len(calls) == 2:  # the notes' copy, after the windows'
            signal.raise_signal(signal.SIGINT)
            await asyncio.sleep(1)
        return await real(*args)

    monkeypatch.setattr(bot.reindex_carry, "_copy", interrupted_once)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        capsys.readouterr()
        status = cli.main(["--config", str(path), "reindex"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == exitcodes.EX_INTERRUPTED
    err = capsys.readouterr().err
    assert "the rebuilt index is kept" in err, err
    assert "back as it was before the reindex" not in err
    conn = sqlite3.connect(str(config.index_path))
    try:
        assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 6
        assert conn.execute("SELECT count(*) FROM turn_vectors").fetchone()[0] == 6  # copied
    finally:
        conn.close()
