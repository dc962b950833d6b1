"""EmbeddingService: real model off the event loop; a missing model degrades, never crashes."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from bot.config.model import AppConfig, EmbeddingConfig
from bot.embedding import ENV_MODEL_PATH, EmbeddingService, EmbeddingUnavailable, resolve_model_path
from bot.search import SearchService
from tests.recall_helpers import add_conversation, model_path, open_index


async def test_embeds_with_local_model_off_the_loop() -> None:
    service = EmbeddingService(EmbeddingConfig(model_path=str(model_path()), batch_size=4))
    try:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        task = asyncio.create_task(ticker())
        vectors = await service.embed([f"sentence number {i} about gardens" for i in range(10)])
        task.cancel()
        assert vectors.shape == (10, 384) and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
        assert ticks > 0  # the loop kept running while the worker embedded
        assert service.available and service.model_id.endswith("@384")
        same = await service.embed_one("sentence number 3 about gardens")
        assert float(same @ vectors[3]) > 0.999
    finally:
        service.close()


async def test_batches_hold_texts_of_similar_length_and_vectors_keep_the_callers_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a batch is padded to its longest text: short texts batched beside long ones cost as
    # much as long ones (a reindex of real turn windows spent ~25% more CPU)
    service = EmbeddingService(EmbeddingConfig(model_path=str(model_path()), batch_size=3))
    texts = [
        "budget " * 60,
        "hi",
        "the garden shed roof needs new felt before winter " * 4,
        "ok thanks",
        "we booked the hotel near the station",
        "the plumber comes on thursday about the boiler " * 8,
        "yes",
    ]
    batches: list[list[str]] = []
    embed_sync = service.embed_sync

    def recording(chunk: list[str]) -> np.ndarray:
        batches.append(list(chunk))
        return embed_sync(chunk)

    monkeypatch.setattr(service, "embed_sync", recording)
    try:
        vectors = await service.embed(texts)
        lengths = [[len(t) for t in batch] for batch in batches]
        assert lengths == [sorted(len(t) for t in texts)[i : i + 3] for i in (0, 3, 6)]
        for i, text in enumerate(texts):
            alone = embed_sync([text])[0]
            assert float(alone @ vectors[i]) > 0.9999, text
    finally:
        service.close()


def test_model_path_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    assert resolve_model_path(EmbeddingConfig()) is None
    assert resolve_model_path(EmbeddingConfig(model_path="/models/x")) == "/models/x"
    monkeypatch.setenv(ENV_MODEL_PATH, "/env/model")
    assert resolve_model_path(EmbeddingConfig(model_path="/models/x")) == "/env/model"


async def test_missing_model_is_unavailable_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    service = EmbeddingService(EmbeddingConfig(model_path=str(tmp_path / "nowhere")))
    with caplog.at_level(logging.WARNING, logger="my_agent.embedding"):
        assert await service.load() is False
    assert not service.available
    assert "keyword-only" in caplog.text
    with pytest.raises(EmbeddingUnavailable):
        await service.embed(["x"])
    # search degrades to keyword-only and says so
    db = await open_index(tmp_path / "conversations.db")
    try:
        await add_conversation(db, "conv-a", [("user", "the boiler needs a plumber")])
        page = await SearchService(AppConfig(), db, service).search("plumber")
        assert page.method == "keyword"
        assert [r.conversation_id for r in page.results] == ["conv-a"]
    finally:
        await db.close()
        service.close()


async def test_a_model_name_fastembed_does_not_know_names_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Regression: the warning was fastembed's "Model local/minilm is not supported in
    # TextEmbedding", which named no setting to change.
    service = EmbeddingService(
        EmbeddingConfig(model_name="local/minilm", model_path=str(model_path()))
    )
    try:
        with caplog.at_level(logging.WARNING, logger="my_agent.embedding"):
            assert await service.load() is False
        reason = service.unavailable_reason or ""
        assert reason.startswith("embedding.model_name 'local/minilm' is not a model fastembed")
        assert "embedding.model_name" in caplog.text and "keyword-only" in caplog.text
    finally:
        service.close()


async def test_disabled_in_config() -> None:
    service = EmbeddingService(EmbeddingConfig(enabled=False))
    assert not service.available
    assert await service.load() is False
    service.close()


def _record_factory(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """What EmbeddingService asks fastembed for, without fastembed (no network)."""
    calls: list[dict[str, object]] = []

    def factory(_cls: object, kwargs: dict[str, object]) -> object:
        calls.append(dict(kwargs))
        raise ValueError("Could not load model from any source.")

    monkeypatch.setattr("bot.embedding._without_spinning", factory)
    return calls


async def test_downloads_are_kept_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's model cache survives restarts (fastembed's default is in /tmp,
    private to the systemd unit and emptied at each start)."""
    from bot.services import open_services
    from tests.conftest import make_config, shutdown_services

    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    calls = _record_factory(monkeypatch)
    monkeypatch.setattr("bot.embedding.hub_unreachable", lambda: None)  # as if online
    config = make_config(tmp_path, embedding={"enabled": True})
    assert config.model_cache_dir == config.data_dir / "models"
    services = await open_services(config)
    try:
        assert not await services.embedder.load()
    finally:
        await shutdown_services(services)
    assert calls == [
        {"model_name": config.embedding.model_name, "cache_dir": str(config.data_dir / "models")}
    ]
    other = make_config(tmp_path, embedding={"cache_dir": str(tmp_path / "shared-models")})
    assert other.model_cache_dir == tmp_path / "shared-models"


async def test_without_download_a_cache_miss_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-shot command never waits for fastembed's download retries (~40 s offline):
    the real fastembed, asked for local files only, finds no model in the cache (here,
    another model's leftovers) and gives up."""
    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    cache = tmp_path / "models"
    (cache / "models--someone--another-model").mkdir(parents=True)
    service = EmbeddingService(EmbeddingConfig(), cache_dir=cache, download=False)
    try:
        assert await service.load() is False
        reason = service.unavailable_reason or ""
        assert str(cache) in reason and "does not download" in reason
        # Regression: three levels of parentheses, "(not loadable from the model cache
        # (dir: ValueError: ...); this command does not download it (the daemon does)...)"
        assert reason.startswith(
            f"not in the model cache {cache}, and this command does not "
            "download it: the daemon does, or set embedding.model_path ("
        )
        said, _, detail = reason.partition(" (")
        assert "(" not in said and detail.endswith(")"), reason
    finally:
        service.close()
    calls = _record_factory(monkeypatch)
    service = EmbeddingService(EmbeddingConfig(), cache_dir=cache, download=False)
    assert await service.load() is False
    service.close()
    assert calls[0]["local_files_only"] is True
    # Regression: an empty (or missing) cache imported fastembed (onnxruntime, ~0.5 s
    # of CPU) only to find nothing there; it is known at once now
    for empty in (tmp_path / "empty", tmp_path / "missing"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        service = EmbeddingService(EmbeddingConfig(), cache_dir=empty, download=False)
        assert await service.load() is False
        service.close()
        assert len(calls) == 1 and "holds no model" in (service.unavailable_reason or "")


async def test_an_offline_daemon_with_nothing_cached_does_not_import_fastembed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the daemon (``download=True``) with an empty model cache imported
    fastembed (onnxruntime, PIL, the hub client: 1-2 s of CPU per start, every test
    daemon paid it) before asking whether the hub answers at all."""
    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    monkeypatch.setitem(sys.modules, "fastembed", None)  # any import of it now fails
    monkeypatch.setattr("bot.embedding.hub_unreachable", lambda: "HF_HUB_OFFLINE is set")
    service = EmbeddingService(EmbeddingConfig(), cache_dir=tmp_path / "models", download=True)
    assert await service.load() is False
    service.close()
    reason = service.unavailable_reason or ""
    assert "not in the model cache" in reason and "HF_HUB_OFFLINE is set" in reason, reason
    assert "ImportError" not in reason


_OFFLINE_DAEMON_LOAD = """
import logging, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
from bot.config.model import EmbeddingConfig
from bot.embedding import EmbeddingService
service = EmbeddingService(EmbeddingConfig(), cache_dir=Path(sys.argv[1]), download=True)
started = time.monotonic()
try:
    service._load()
except Exception:
    pass
print(f"{time.monotonic() - started:.1f}")
"""


def _load_offline(cache: Path) -> tuple[list[str], float, int]:
    """The daemon's model load in a child process whose model hub is a closed
    127.0.0.1 port (no network needed, always a refusal): its log lines, how long it
    took, and the port."""
    import os
    import socket
    import subprocess
    import sys

    # The port stays bound (never listening) while the child runs: a port closed
    # before it, as until session 41, could be taken meanwhile by another test's or
    # program's server, whose 404 the child logged (a failure of this test in a full run).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", ENV_MODEL_PATH))}
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{port}"
        done = subprocess.run(
            [sys.executable, "-c", _OFFLINE_DAEMON_LOAD, str(cache)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[1],
        )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines, float(done.stdout), port


def test_an_unreachable_hub_is_one_warning_and_no_long_wait(tmp_path: Path) -> None:
    """Regression: the daemon on a machine that cannot reach the model hub (README's
    first command, no config) printed fastembed's six red ERROR lines over about 40 s
    (three tries, sleeping 3 + 9 + 27 s) before its own warning."""
    lines, seconds, port = _load_offline(tmp_path / "models")
    assert len(lines) == 1, lines
    assert lines[0].startswith("WARNING embedding model"), lines[0]
    assert f"127.0.0.1:{port}" in lines[0] and "keyword-only" in lines[0]
    assert "embedding.model_path" in lines[0] and ENV_MODEL_PATH in lines[0]
    assert seconds < 10.0, seconds


@pytest.mark.parametrize("broken", ["missing", "truncated"])
def test_a_partly_filled_cache_offline_fails_fast(tmp_path: Path, broken: str) -> None:
    """Regression: a model cache holding part of the model (a download cut short, a
    file deleted) skipped the hub check that an empty one gets: offline, fastembed's
    download retries took 40 s, and the warning ("Could not load model ... from any
    source") named neither the cache nor a local copy's setting."""
    cache = tmp_path / "models"
    repo = cache / "models--Qdrant--all-MiniLM-L6-v2-onnx"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((model_path() / name).read_bytes())
    if broken == "truncated":  # (this one failed fast already, without the hint)
        (snapshot / "model.onnx").write_bytes((model_path() / "model.onnx").read_bytes()[:4096])
    lines, seconds, port = _load_offline(cache)
    assert seconds < 10.0, seconds  # (missing: 40 s)
    assert len(lines) == 1, lines
    assert lines[0].startswith("WARNING embedding model"), lines[0]
    assert f"no usable copy in the model cache {cache} (" in lines[0], lines[0]
    assert f"127.0.0.1:{port}" in lines[0] and "keyword-only" in lines[0]
    assert "embedding.model_path" in lines[0] and ENV_MODEL_PATH in lines[0]


async def test_a_whole_cached_model_loads_without_asking_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's load from a cache that holds the whole model asks no hub (the
    local files are tried first)."""
    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    cache = tmp_path / "models"
    repo = cache / "models--Qdrant--all-MiniLM-L6-v2-onnx"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for source in model_path().iterdir():
        (snapshot / source.name).symlink_to(source)

    def no_hub() -> str:
        raise AssertionError("the hub was asked")

    monkeypatch.setattr("bot.embedding.hub_unreachable", no_hub)
    service = EmbeddingService(EmbeddingConfig(), cache_dir=cache, download=True)
    try:
        assert await service.load(), service.unavailable_reason
        assert (await service.embed_one("gardens")).shape == (384,)
    finally:
        service.close()


async def test_a_failed_load_is_worth_retrying_once_the_model_may_be_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression (session 39): a failed load was final, a model copied in after the
    daemon started never loaded. The service now says when a try may work (the folder
    or cache changed; the daemon's download) and lets the next load try again; a try
    failing for the same reason is not warned of twice (the sweep retries downloads)."""
    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    folder = tmp_path / "model"
    service = EmbeddingService(EmbeddingConfig(model_path=str(folder)))
    try:
        assert service.retry_reason() is None  # never tried
        assert await service.load() is False
        assert service.retry_reason() is None  # nothing changed: no try would work
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        assert service.retry_reason() == "changed"
        service.forget_failure()
        assert service.available
        assert await service.load() is False  # (a folder without the model)
        assert service.retry_reason() is None
    finally:
        service.close()

    monkeypatch.setattr("bot.embedding.hub_unreachable", lambda: "HF_HUB_OFFLINE is set")
    daemon = EmbeddingService(EmbeddingConfig(), cache_dir=tmp_path / "models", download=True)
    caplog.clear()
    try:
        with caplog.at_level(logging.DEBUG, logger="my_agent.embedding"):
            for _ in range(3):
                assert await daemon.load() is False
                assert daemon.retry_reason() == "download"  # the hub may answer later
                daemon.forget_failure()
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "HF_HUB_OFFLINE" in warned[0].getMessage()
    finally:
        daemon.close()
