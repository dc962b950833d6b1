"""``my-agent search`` when its configuration loads another embedding model than the one
the store's vectors were made with (the owner edited ``embedding.model_name`` /
``model_path`` and the daemon still runs the old one, or a shell with another
``MY_AGENT_EMBEDDING_MODEL_PATH``): the vectors are the daemon's to rebuild, never a
reading command's to drop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot import cli
from bot.search.results import REBUILDING, VECTORS_MISSING
from bot.services import open_services
from bot.term_vectors import META_KEY as TERMS_KEY
from bot.vector_store import META_KEY
from tests.conftest import make_config, owner_identities, raw_config, settle, shutdown_services
from tests.recall_helpers import model_path
from tests.sqlite_driver import sqlite3
from tests.support import ScriptedBrain, inbound

OTHER_MODEL = "BAAI/bge-small-en-v1.5@384"


def _vector_counts(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db)
    try:
        turns = conn.execute("SELECT count(*) FROM turn_vectors").fetchone()[0]
        notes = conn.execute("SELECT count(*) FROM abbreviation_vectors").fetchone()[0]
        return int(turns), int(notes)
    finally:
        conn.close()


def _embedded_store(root: Path, embed: bool = True) -> tuple[Path, Path]:
    """A store with one conversation embedded by the local MiniLM (``embed``, else by
    a daemon without embeddings); returns (a config file with the model, the index)."""
    overrides = {
        "owner": {"identities": owner_identities()},
        "embedding": {"enabled": True, "model_path": str(model_path())},
    }
    config = make_config(root, **overrides)
    config.embedding.enabled = embed

    async def fill() -> None:
        services = await open_services(config, brain=ScriptedBrain())
        try:
            assert await services.search.start() == embed
            await services.router.deliver(
                inbound("Plan the trip to Porto in May", channel="web", sender="owner", chat="web")
            )
            await settle(services)
            for rec in await services.conversations.list():
                if services.search.vectors is not None:
                    await services.search.vectors.index_turns(rec.id)
        finally:
            await shutdown_services(services)

    asyncio.run(fill())
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(raw_config(root, **overrides)), encoding="utf-8")
    return path, config.index_path


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "MY_AGENT_DATA_DIR", "MY_AGENT_CONFIG"):
        monkeypatch.delenv(var, raising=False)


def _search(config: Path, capsys: pytest.CaptureFixture[str], *more: str) -> Any:
    """``my-agent search Porto`` (and ``more``): its exit status checked, its output."""
    capsys.readouterr()
    assert cli.main(["--config", str(config), "search", "Porto", *more]) == 0
    return capsys.readouterr()


def _write(index: Path, sql: str, *args: str) -> None:
    conn = sqlite3.connect(index)
    with conn:
        conn.execute(sql, args)
    conn.close()


def test_a_search_with_another_model_keeps_the_stored_vectors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: the search opened the vector index as the daemon does, found another
    # model's vectors, dropped every one of them "to rebuild them in the background",
    # which a one-shot command never does: the running daemon's vectors were gone (and
    # those it wrote after were labelled as the new model's, another vector space).
    config_path, index = _embedded_store(tmp_path)
    # as if another model had made them
    _write(index, "UPDATE index_meta SET value = ? WHERE key = ?", OTHER_MODEL, META_KEY)
    before = _vector_counts(index)
    assert before[0] > 0
    captured = _search(config_path, capsys)
    assert _vector_counts(index) == before
    conn = sqlite3.connect(index)
    stored = conn.execute("SELECT value FROM index_meta WHERE key = ?", (META_KEY,)).fetchone()
    conn.close()
    assert stored == (OTHER_MODEL,)
    # found by its words, and said so, with why and what rebuilds them
    assert "Porto" in captured.out
    assert "(keyword search only" in captured.out
    assert OTHER_MODEL in captured.err and "restart" in captured.err


def test_a_search_while_the_daemon_rebuilds_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A daemon restarted with a new model drops every vector and rebuilds them, the term
    # vectors last (index_meta.term_vectors names the old model until then): a search
    # from the shell meanwhile finds the conversations not re-embedded by words only.
    config_path, index = _embedded_store(tmp_path)
    _write(index, "UPDATE index_meta SET value = ? WHERE key = ?", OTHER_MODEL, TERMS_KEY)
    # as the rebuild leaves them: part of the turn vectors made again, no notes yet
    last = "SELECT max(turn_id) FROM turn_vectors"
    _write(index, f"DELETE FROM turn_vectors WHERE turn_id = ({last})")
    out = _search(config_path, capsys).out
    # this process rebuilds nothing: the vectors are missing, not "being rebuilt" here
    assert f"({VECTORS_MISSING}: some conversations are found by their words only)" in out
    assert REBUILDING not in out
    page = json.loads(_search(config_path, capsys, "--json").out)
    assert page["vectors_incomplete"] is True and "vectors_rebuilding" not in page


def test_a_stopped_daemons_complete_vectors_are_searched_by_meaning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: with every turn and note embedded but the word vectors of soft
    # coverage not complete (an index from before their table, a daemon stopped before
    # its rebuild reached them), `my-agent search` said "search by meaning is being
    # rebuilt for a new model: some conversations are found by their words only",
    # with no daemon running and every vector there (VectorIndex.stale counted them).
    config_path, index = _embedded_store(tmp_path)
    _write(index, "DELETE FROM index_meta WHERE key = ?", TERMS_KEY)
    captured = _search(config_path, capsys)
    assert "Porto" in captured.out
    assert "search by meaning" not in captured.out and "keyword search only" not in captured.out
    page = json.loads(_search(config_path, capsys, "--json").out)
    assert page["method"] == "hybrid" and "vectors_incomplete" not in page


def test_a_search_before_any_vector_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: a search with a model on a store no daemon had embedded yet recorded
    # the model as the vectors' (index_meta), and a daemon started on it then took its
    # turns for embedded: without the term vectors (search.soft_coverage off) none were.
    config_path, index = _embedded_store(tmp_path, embed=False)
    captured = _search(config_path, capsys)
    assert "Porto" in captured.out and "(keyword search only" in captured.out
    assert "no vectors are stored yet" in captured.err
    conn = sqlite3.connect(index)
    meta = conn.execute("SELECT key FROM index_meta WHERE key LIKE 'embedding%'").fetchall()
    conn.close()
    assert meta == []


def _files(index: Path) -> dict[str, tuple[bytes, int]]:
    """The index's files (``conversations.db`` and its ``-wal`` / ``-shm``): their bytes
    and modification times."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(index.parent.glob(f"{index.name}*"))
        if not p.name.endswith("-shm")  # (the readers' shared index, not the data)
    }


@pytest.mark.parametrize("terms", [True, False], ids=["word-vectors", "no-word-vectors"])
def test_a_search_of_a_stopped_daemons_store_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], terms: bool
) -> None:
    # Regression: `my-agent search` opened the vectors as the daemon does (prepare): it
    # created the vector tables and rewrote index_meta (the model, its probe) at every
    # search, a write to the owner's index from a reading command, which may run beside
    # the daemon, on a copy or a read-only mount. It reads what is there.
    config_path, index = _embedded_store(tmp_path)
    if not terms:  # (word vectors incomplete: ranked without the soft features)
        _write(index, "DELETE FROM index_meta WHERE key = ?", TERMS_KEY)
    before = _files(index)
    # no word of the conversation's ("Plan the trip to Porto in May"): found by meaning
    out = json.loads(_search(config_path, capsys, "--json").out)
    assert out["method"] == "hybrid" and "vectors_incomplete" not in out
    capsys.readouterr()
    assert cli.main(["--config", str(config_path), "search", "holiday in Portugal"]) == 0
    captured = capsys.readouterr()
    assert "(no conversation uses these words: the closest by meaning)" in captured.out
    assert "Porto" in captured.out and "search by meaning" not in captured.out
    assert _files(index) == before


@pytest.mark.parametrize("command", [["conversations", "list"], ["search", "Porto"]])
def test_reading_commands_do_not_wait_for_a_writing_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    # Regression: opening the services created the vector tables in a write transaction
    # even when they existed: beside a daemon in the middle of a write, a reading command
    # waited for its lock (10 s), then failed "database is locked" (exit 70).
    import os

    from bot import sqlite_conn
    from bot.journal_files import lock_journal

    config_path, index = _embedded_store(tmp_path)
    monkeypatch.setattr(sqlite_conn, "BUSY_TIMEOUT_MS", 300)
    daemon = lock_journal(index.parent)  # a daemon runs: the command does no recovery
    writer = sqlite3.connect(index, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # ... and is writing
    try:
        assert cli.main(["--config", str(config_path), *command]) == 0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        os.close(daemon)
