"""Local sentence embeddings (fastembed, all-MiniLM-L6-v2) off the event loop.

The model is found like this, first match wins: the ``MY_AGENT_EMBEDDING_MODEL_PATH``
environment variable, ``embedding.model_path`` in the config, then the model cache
(``embedding.cache_dir``, by default ``<data_dir>/models``: a download survives restarts)
or fastembed's model hub. When none works (offline machine, no local copy) the service
reports ``available = False`` once with a warning and search runs keyword-only: never a
crash. A one-shot command (``my-agent search``, ``reindex``) does not download
(``download=False``): on an offline machine fastembed's retries made it wait about 40 s
before answering keyword-only; it uses the cache or answers keyword-only at once, and
the daemon, which loads the model in the background, is the one that downloads.

Before downloading, the daemon asks the hub whether it answers at all
(:mod:`bot.embedding_sources`): one warning after a second or two, saying what failed and
which key points at a local copy, where fastembed's retries printed six ERROR lines over
about 40 s. A cache holding part of the model (a download cut short, a file deleted or
truncated) is tried alone first (local files only, at once), and the hub asked only when
that fails: it used to go straight to fastembed's retries, 40 s offline, and a warning
naming neither the cache nor the setting. fastembed's own log records are always
silenced.

ONNX inference holds the GIL only briefly, so a single worker thread keeps the loop
responsive; batches are cut small (``embedding.batch_size``) so one large request does not
monopolise the worker either.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bot.config.model import EmbeddingConfig
from bot.embedding_priority import BACKGROUND_BATCH, LiveFirst, embedding_in_background
from bot.embedding_sources import (
    ENV_MODEL_PATH,
    HINT,
    cache_empty,
    hub_unreachable,
    resolve_model_path,
    sources_state,
)

log = logging.getLogger("my_agent.embedding")


def _without_spinning(factory: Any, kwargs: dict[str, Any]) -> Any:
    """Build the fastembed model with onnxruntime's idle spinning turned off.

    By default onnxruntime's worker threads busy-wait after each run. In a daemon that
    embeds a query and then ranks it, those spinning threads took the CPU from the
    ranking (and from everything else on a 2-core machine). fastembed does not expose the
    session option, so the SessionOptions it creates are given it here.
    """
    import onnxruntime as ort

    original = ort.SessionOptions

    def _options() -> Any:
        options = original()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return options

    ort.SessionOptions = _options  # type: ignore[misc,assignment]
    try:
        return factory(**kwargs)
    finally:
        ort.SessionOptions = original  # type: ignore[misc]


def _quiet_fastembed() -> None:
    """Silence fastembed's loguru records (our own warning says what failed)."""
    try:
        from loguru import logger
    except ImportError:  # pragma: no cover - fastembed depends on it
        return
    logger.disable("fastembed")


def _build(factory: Any, kwargs: dict[str, Any]) -> tuple[Any, np.ndarray]:
    """The fastembed model and its vector for a fixed text (a model that loads but
    cannot embed fails here, not at the first search)."""
    model = _without_spinning(factory, kwargs)
    return model, np.asarray(next(iter(model.embed(["probe"]))), dtype=np.float32)


class _HubUnreachable(ConnectionError):
    """Nothing cached and the hub does not answer: its message is the whole reason."""


class EmbeddingUnavailable(RuntimeError):
    """No embedding model could be loaded; callers fall back to keyword search."""


class EmbeddingService:
    """Embeds texts on a dedicated worker thread; loads the model lazily, once."""

    def __init__(
        self, config: EmbeddingConfig, cache_dir: Path | None = None, download: bool = True
    ) -> None:
        self.config = config
        self.model_path = resolve_model_path(config)
        self.cache_dir = cache_dir  # None: fastembed's default
        self.download = download
        self.dimensions = config.dimensions
        self._model: Any = None
        # The loaded model's unit vector for a fixed text: it identifies the vector space
        # whatever the model is called (bot.vector_store.prepare compares it).
        self.probe: np.ndarray | None = None
        self._failed: str | None = None if config.enabled else "embeddings disabled in config"
        # What the model folder or cache held when the load failed, and the reason last
        # warned of: the daemon's sweep loads a model that appeared since (retry_reason)
        self._failed_sources: tuple[object, ...] | None = None
        self._warned: str | None = None
        self._load_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedding")
        self.priority = LiveFirst()  # the rebuild's batches give way (bot.embedding_priority)

    @property
    def model_id(self) -> str:
        """Identifies the vector space: stored vectors from another id are stale."""
        return f"{self.config.model_name}@{self.dimensions}"

    @property
    def available(self) -> bool:
        """False once loading failed (or embeddings are disabled); True until then."""
        return self._failed is None

    @property
    def unavailable_reason(self) -> str | None:
        return self._failed

    def retry_reason(self) -> str | None:
        """Why loading the model again may work now that it failed: ``"changed"`` (the
        model folder or the model cache changed since: a copy, a download by hand),
        ``"download"`` (the daemon downloads: the hub may answer now); None when there is
        nothing to try (loaded, disabled, or a local folder unchanged). Cheap: files are
        listed, not read (:func:`~bot.embedding_sources.sources_state`).

        Before session 39 a failed load was final: a model copied in after the daemon
        started (or a start before the network was up) left search keyword-only until a
        restart, while the log said "until it loads"."""
        if self._model is not None or self._failed_sources is None or not self.config.enabled:
            return None
        if sources_state(self.model_path, self.cache_dir) != self._failed_sources:
            return "changed"
        if self.download and not self.model_path:
            return "download"
        return None

    def forget_failure(self) -> None:
        """Let the next :meth:`load` try again after a failure (:meth:`retry_reason`)."""
        with self._load_lock:
            if self._model is None and self.config.enabled:
                self._failed = None

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is not None:
                return self._model
            if self._failed is not None:
                raise EmbeddingUnavailable(self._failed)
            try:
                if not self.model_path and not self.download and cache_empty(self.cache_dir):
                    # a one-shot command with nothing cached: no model can come of it, and
                    # importing fastembed (onnxruntime) to learn that was half of a
                    # keyword-only `my-agent search`'s CPU time
                    raise FileNotFoundError(f"{self.cache_dir} holds no model")
                if not self.model_path and self.download and cache_empty(self.cache_dir):
                    # asked before importing fastembed (onnxruntime, PIL, the hub client:
                    # 1-2 s of CPU), which an offline daemon without a model imported
                    # only to learn that nothing could be downloaded
                    self._raise_if_hub_unreachable(f"not in the model cache {self.cache_dir}")
                from fastembed import TextEmbedding

                _quiet_fastembed()  # its ERROR lines and retries: our warning says it
                kwargs: dict[str, Any] = {"model_name": self.config.model_name}
                if self.model_path:
                    if not Path(self.model_path).is_dir():
                        raise FileNotFoundError(
                            f"no model folder at {self.model_path} (embedding.model_path, "
                            f"or {ENV_MODEL_PATH})"
                        )
                    kwargs["specific_model_path"] = self.model_path
                else:
                    if self.cache_dir is not None:
                        kwargs["cache_dir"] = str(self.cache_dir)
                    if not self.download:
                        kwargs["local_files_only"] = True
                if self.config.threads:
                    kwargs["threads"] = self.config.threads
                loaded = None
                if not self.model_path and self.download:
                    loaded = self._before_download(TextEmbedding, kwargs)
                model, probe = loaded or _build(TextEmbedding, kwargs)
            except Exception as exc:
                self._failed = (
                    str(exc) if isinstance(exc, _HubUnreachable) else f"{type(exc).__name__}: {exc}"
                )
                if not self.model_path and not self.download:
                    where = self.cache_dir or "fastembed's cache"
                    # one level of parentheses: "(not loadable from the model cache
                    # (dir: ValueError: ...); this command ... (the daemon does), ...)"
                    # had three, around a sentence the owner had to read twice
                    self._failed = (
                        f"not in the model cache {where}, and this command does not "
                        "download it: the daemon does, or set embedding.model_path "
                        f"({self._failed})"
                    )
                elif not self.model_path:
                    self._failed = f"{self._failed}; {HINT}"
                if isinstance(exc, ValueError) and "is not supported" in str(exc):
                    # fastembed's words name the model, not the setting to change
                    self._failed = (
                        f"embedding.model_name {self.config.model_name!r} is not a model "
                        f"fastembed knows ({self._failed})"
                    )
                self._failed_sources = sources_state(self.model_path, self.cache_dir)
                # a retry that fails for the same reason is not news (the daemon's sweep
                # tries again while the hub does not answer)
                log.log(
                    logging.DEBUG if self._failed == self._warned else logging.WARNING,
                    "embedding model %s unavailable: %s; search is keyword-only until it loads",
                    self.config.model_name,
                    self._failed,
                )
                self._warned = self._failed
                raise EmbeddingUnavailable(self._failed) from exc
            if probe.shape[0] != self.dimensions:
                log.warning(
                    "model %s has %d dimensions, embedding.dimensions says %d: using the model's",
                    self.config.model_name,
                    probe.shape[0],
                    self.dimensions,
                )
                self.dimensions = int(probe.shape[0])
            log.info(
                "embedding model %s loaded (%s)",
                self.config.model_name,
                self.model_path or "fastembed cache",
            )
            self.probe = probe / max(float(np.linalg.norm(probe)), 1e-12)
            self._model = model
            return model

    def _before_download(self, factory: Any, kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """The daemon may download: the model from the cache when it is all there, else
        None once the hub answers (a download can work); raises when it does not.

        Only a cache with nothing in it used to ask the hub first: one holding part of
        the model (a download cut short, a file deleted) went to fastembed's download
        retries, 40 s offline, and a warning that named neither the cache nor what was
        missing.
        """
        if cache_empty(self.cache_dir):
            return None  # the hub answered already (_load asks it before fastembed loads)
        where = self.cache_dir or "fastembed's cache"
        try:
            return _build(factory, {**kwargs, "local_files_only": True})
        except Exception as exc:
            missing = f"no usable copy in the model cache {where} ({type(exc).__name__}: {exc})"
        self._raise_if_hub_unreachable(missing)
        return None

    @staticmethod
    def _raise_if_hub_unreachable(missing: str) -> None:
        """Raise :class:`_HubUnreachable` (``missing``, and why) when no download can work."""
        unreachable = hub_unreachable()
        if unreachable:
            raise _HubUnreachable(f"{missing}, and {unreachable}")

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """Blocking embed (worker threads and benchmarks only): (n, dims) float32, L2=1."""
        model = self._load()
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = list(model.embed(texts, batch_size=self.config.batch_size))
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    async def load(self) -> bool:
        """Load the model on the worker thread; True when available."""
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._load)
        except EmbeddingUnavailable:
            return False
        return True

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` off the loop, one batch per worker hop.

        Raises :class:`EmbeddingUnavailable` when no model can be loaded.
        """
        step = max(1, self.config.batch_size)
        # A batch is padded to its longest text, so texts of similar length are batched
        # together (a turn window of 40 characters beside one of 1,000 cost as much as a
        # second long one); the vectors are put back in the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        by_length = [texts[i] for i in order]
        if embedding_in_background():
            parts = await self._embed_batches(
                by_length, min(BACKGROUND_BATCH, step), self.priority.give_way
            )
        else:
            with self.priority.live_embedding():
                parts = await self._embed_batches(by_length, step)
        if not parts:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._load)
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
        vectors[order] = np.concatenate(parts, axis=0)
        return vectors

    async def _embed_batches(
        self,
        texts: list[str],
        step: int,
        before_each: Callable[[], Awaitable[None]] | None = None,
    ) -> list[np.ndarray]:
        """``texts`` in batches of ``step``, one worker hop each, ``before_each`` awaited
        ahead of every batch (the rebuild's: give way to live embeddings)."""
        loop = asyncio.get_running_loop()
        parts = []
        for start in range(0, len(texts), step):
            if before_each is not None:
                await before_each()
            chunk = texts[start : start + step]
            parts.append(await loop.run_in_executor(self._executor, self.embed_sync, chunk))
        return parts

    async def embed_one(self, text: str) -> np.ndarray:
        return (await self.embed([text]))[0]

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
