"""``my-agent bench embed``: embedding throughput inside the service vs bare fastembed.

The same texts are embedded (1) by bare fastembed ``TextEmbedding.embed`` on the calling
thread (``raw_texts_per_s``) and (2) through :class:`~bot.embedding.EmbeddingService`
while the event loop runs a 5 ms ticker (``texts_per_s``); ``max_loop_lag_ms`` is the
worst delay of that ticker, i.e. how long the loop was blocked while embedding.

The model is found like the daemon finds it: ``--config`` / the default config file, the
``MY_AGENT_EMBEDDING_MODEL_PATH`` environment variable, else fastembed's cache.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path
from typing import Any

from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.embedding_sources import resolve_model_path

WORDS = (
    "the deploy failed on staging because the migration lock was held while Sarah reviewed "
    "the quarterly budget and the boiler needed a plumber before the Lisbon trip in March "
    "we booked a hotel near the station and talked about tomatoes pottery running shoes"
).split()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--texts", type=int, default=1000, help="texts to embed")
    parser.add_argument("--words", type=int, default=16, help="words per text")
    parser.add_argument("--config", type=Path, default=None, help="config file")


def model_config(path: Path | None = None) -> tuple[AppConfig, str]:
    """The config as the daemon would load it, and where the model comes from."""
    from bot.config import load_config

    config = load_config(path)
    where = resolve_model_path(config.embedding) or "fastembed cache/hub"
    return config, where


def make_texts(count: int, words: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]


async def _ticker(stop: asyncio.Event, lags: list[float], period: float = 0.005) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        expected = loop.time() + period
        await asyncio.sleep(period)
        lags.append(max(0.0, loop.time() - expected))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config, source = model_config(getattr(args, "config", None))
    texts = make_texts(args.texts, args.words)
    service = EmbeddingService(config.embedding)
    if not await service.load():
        return {
            "error": f"embedding model unavailable: {service.unavailable_reason}",
            "model": source,
        }
    # Bare fastembed with the same settings (the service's own model instance, called
    # directly on this thread: no executor, no batching of ours).
    model = service._model
    list(model.embed(texts[:64], batch_size=config.embedding.batch_size))  # warm-up
    t0 = time.perf_counter()
    raw = list(model.embed(texts, batch_size=config.embedding.batch_size))
    raw_seconds = time.perf_counter() - t0

    stop = asyncio.Event()
    lags: list[float] = []
    ticker = asyncio.create_task(_ticker(stop, lags))
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    vectors = await service.embed(texts)
    seconds = time.perf_counter() - t0
    stop.set()
    await ticker
    service.close()
    assert len(raw) == len(vectors) == len(texts)
    texts_per_s = len(texts) / seconds
    raw_per_s = len(texts) / raw_seconds
    return {
        "texts": len(texts),
        "words_per_text": args.words,
        "texts_per_s": round(texts_per_s, 1),
        "raw_texts_per_s": round(raw_per_s, 1),
        "ratio": round(texts_per_s / raw_per_s, 3),
        "max_loop_lag_ms": round(max(lags, default=0.0) * 1000, 2),
        "batch_size": config.embedding.batch_size,
        "threads": config.embedding.threads,
        "model": source,
        "goals": {"ratio": ">= 0.8", "max_loop_lag_ms": "<= 50"},
    }
