"""``my-agent reindex`` and the vectors (bot/cli_reindex.py, bot/reindex_vectors.py): the
store is given back once the rows are rebuilt, the vectors left to the daemon's start or
embedded after with ``--vectors``, which a Ctrl-C stops keeping the rebuilt rows.

Regression (session 41): the reindex embedded every vector while it held the store
exclusively (on a large store 30 minutes after rows rebuilt in 1-2: the daemon gave up
after 120 s), printed nothing until the end, and a Ctrl-C during the embedding put the
old index back, the rebuilt rows thrown away."""

from __future__ import annotations

import asyncio
import io
import json
import signal
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import yaml

from bot import cli, exitcodes, store_lock, tasks
from bot.config.model import AppConfig
from bot.daemon_vectors import _open_vectors
from bot.index_files import aside_path
from bot.services import open_services
from bot.vector_store import vectors_owed
from tests.conftest import make_config, raw_config, shutdown_services
from tests.sqlite_driver import sqlite3
from tests.test_search_latency import DIMS, HashEmbedder

# (no word vectors: one embedding per conversation, its windows)
EMBEDDING: dict[str, Any] = {
    "embedding": {"enabled": True, "dimensions": DIMS},
    "search": {"soft_coverage": False},
}
TOPICS = ("kayak trip on the lake", "boiler valve repair", "sourdough starter feeding")


class WatchingEmbedder(HashEmbedder):
    """Hash vectors; each call records whether a daemon could take the store then (the
    maintenance lock shared) and whether the old index was still set aside; ``on_call``
    runs on the worker thread before the ``n``-th call (1-based)."""

    def __init__(self, config: AppConfig) -> None:
        super().__init__()
        self.app = config
        self.calls: list[tuple[bool, bool]] = []
        self.on_call: tuple[int, Any] | None = None

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        fd = store_lock.try_lock(self.app.data_dir, exclusive=False)
        store_lock.release(fd)
        self.calls.append((fd is not None, aside_path(self.app.index_path).exists()))
        if self.on_call is not None and self.on_call[0] == len(self.calls):
            self.on_call[1]()
        return super().embed_sync(texts)


class Store(NamedTuple):
    path: Path  # the config file
    config: AppConfig
    embedder: WatchingEmbedder  # the commands'


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Three conversations of two turns each, a config with (hash) embeddings; the
    commands' embedding service is a :class:`WatchingEmbedder`."""
    import bot.embedding

    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw_config(tmp_path, **EMBEDDING)), encoding="utf-8")
    config = make_config(tmp_path, **EMBEDDING)

    async def fill() -> None:
        services = await open_services(config)
        try:
            for topic in TOPICS:
                rec = await services.conversations.create("web")
                await services.conversations.append_turn(rec.id, "user", f"the {topic}")
                await services.conversations.append_turn(rec.id, "assistant", f"noted: {topic}")
        finally:
            await shutdown_services(services)

    asyncio.run(fill())
    embedder = WatchingEmbedder(config)
    monkeypatch.setattr(bot.embedding, "EmbeddingService", lambda *a, **k: embedder)
    return Store(config_path, config, embedder)


def _owed(config: AppConfig) -> tuple[int, int]:
    conn = sqlite3.connect(str(config.index_path))
    try:
        return vectors_owed(conn)
    finally:
        conn.close()


def test_reindex_gives_the_store_back_and_leaves_the_vectors_to_the_daemon(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    path, config, embedder = store
    capsys.readouterr()
    assert cli.main(["--config", str(path), "reindex", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert embedder.calls == []  # nothing embedded under the store's lock
    assert report["turns"] == 6 and report["vectors"] is None
    assert report["vectorsOwed"] == {"turns": 6, "abbreviations": 0}
    assert not aside_path(config.index_path).exists()
    fd = store_lock.try_lock(config.data_dir, exclusive=True)
    assert fd is not None  # nothing held
    store_lock.release(fd)
    capsys.readouterr()
    assert cli.main(["--config", str(path), "reindex"]) == 0
    out = capsys.readouterr().out
    assert "  vectors: 6 turn windows to embed: the daemon embeds them" in out, out
    assert "`my-agent reindex --vectors` embeds them now" in out


def test_reindex_vectors_embeds_only_once_the_store_is_given_back(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    path, config, embedder = store
    capsys.readouterr()
    assert cli.main(["--config", str(path), "reindex", "--vectors"]) == 0
    captured = capsys.readouterr()
    calls = embedder.calls
    assert calls, "nothing embedded"
    # at every embedding a daemon could take the store, and the old index was gone
    assert all(free and not aside for free, aside in calls), calls
    assert "6 messages indexed" in captured.out
    assert "  vectors: 6 turn windows to embed: embedding them now" in captured.out
    assert "  vectors: 6 turn windows, 0 abbreviations," in captured.out, captured.out
    assert "embedding 6 turn windows" in captured.err, captured.err
    assert _owed(config) == (0, 0)
    capsys.readouterr()
    # --json: one object, what was embedded and what is left (the old index's vectors
    # kept since session 42: nothing to embed)
    assert cli.main(["--config", str(path), "reindex", "--vectors", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vectorsKept"]["turns"] == 6 and report["vectors"]["turns"] == 0
    assert report["vectorsOwed"] == {
        "turns": 0,
        "abbreviations": 0,
    }
    assert report["vectorsSeconds"] >= 0


def test_progress_lines_while_embedding(
    store: Store,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from bot import reindex_vectors

    path, _, embedder = store
    told = threading.Event()

    class Err(io.StringIO):
        def write(self, text: str) -> int:
            if text.startswith("embedding: "):
                told.set()
            return super().write(text)

    monkeypatch.setattr(reindex_vectors, "PROGRESS_SECONDS", 0.01)
    err = Err()
    monkeypatch.setattr(reindex_vectors.sys, "stderr", err)
    # the first embedding waits for a progress line (bounded: a failure, not a hang)
    embedder.on_call = (1, lambda: told.wait(30))
    assert cli.main(["--config", str(path), "reindex", "--vectors"]) == 0
    assert told.is_set()
    assert "embedding: 0 of 3 conversations, 0 turn windows so far" in err.getvalue()


def test_ctrl_c_while_embedding_keeps_the_rebuilt_rows(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    path, config, embedder = store
    # a real SIGINT, as asyncio.run handles it (its main task cancelled)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        embedder.on_call = (2, lambda: signal.raise_signal(signal.SIGINT))
        capsys.readouterr()
        status = cli.main(["--config", str(path), "reindex", "--vectors"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == exitcodes.EX_INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted: the rebuilt index is kept" in err, err
    assert "back as it was before the reindex" not in err
    assert not aside_path(config.index_path).exists()
    conn = sqlite3.connect(str(config.index_path))
    try:
        assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 6
    finally:
        conn.close()
    turns, _ = _owed(config)
    assert 0 < turns < 6  # what was embedded is kept, the rest owed
    fd = store_lock.try_lock(config.data_dir, exclusive=True)
    assert fd is not None
    store_lock.release(fd)


async def test_the_daemons_start_embeds_what_the_reindex_left(
    store: Store,
) -> None:
    path, config, _ = store
    assert await asyncio.to_thread(cli.main, ["--config", str(path), "reindex"]) == 0
    services = await open_services(config, embedder=HashEmbedder())
    try:
        assert await services.search.start()
        # meanwhile found by their words, the page saying search by meaning is incomplete
        page = await services.search.search("kayak")
        assert page.results and page.method == "hybrid" and page.vectors_incomplete
        await _open_vectors(services)  # the daemon's background start
        (rebuild,) = [t for t in tasks.running_tasks() if t.get_name() == "reindex-vectors"]
        done = await asyncio.wait_for(rebuild, 30)
        assert done["turns"] == 6
        assert not (await services.search.search("kayak")).vectors_incomplete
        assert await services.index_db.run(vectors_owed, write=False) == (0, 0)
    finally:
        await shutdown_services(services)
