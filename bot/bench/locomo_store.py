"""The stores of ``my-agent bench locomo`` (:mod:`bot.bench.long_memory`): a fresh data
directory per LoCoMo conversation (or all of them pooled), loaded through the product's
conversation manager, index, vectors and search, and kept between runs (``--stores``)
while what they embed is unchanged (:func:`fingerprint`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path

from bot.bench.locomo_data import Sample
from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.extractive import extractive_abbreviation
from bot.ftsmerge import open_index_database
from bot.hooks import EventBus
from bot.search import SearchService
from bot.vectors import window_text

log = logging.getLogger("my_agent.bench.locomo")


class Store:
    """A fresh data directory with the product's store, index, vectors and search."""

    def __init__(self, root: Path, embedder: EmbeddingService, config: AppConfig) -> None:
        self.root = root
        self.embedder = embedder
        self.config = config.model_copy(update={"data_dir": root})
        self.config.transcripts.fsync = "never"  # a throwaway store: speed over durability
        self.turn_key: dict[tuple[str, int], str] = {}  # (conversation, turn id) -> dia id
        self.session_of: dict[str, str] = {}  # conversation id -> "sample/session"

    async def open(self) -> None:
        from bot.conversations import ConversationManager
        from bot.index import ConversationIndex
        from bot.transcript import TranscriptStore

        self.db = await open_index_database(self.config.index_path)
        store = TranscriptStore(self.config.conversations_dir, fsync=False)
        self.manager = ConversationManager(
            self.config, store, ConversationIndex(self.db), EventBus()
        )
        self.search = SearchService(self.config, self.db, self.embedder)
        await self.search.start()
        vectors = self.search.vectors
        if vectors is not None and vectors.ready and vectors.stale:
            # a kept store from before the term vectors (or another model): complete it
            # the way the daemon does, instead of ranking without them
            log.info("completing the vectors of %s", self.root)
            await vectors.reindex_all()

    async def add(self, sample: Sample) -> None:
        a, b = sample.speakers
        for number, stamp, turns in sample.sessions:
            rec = await self.manager.create("web", participants=[a, b])
            self.session_of[rec.id] = f"{sample.sample_id}/{number}"
            for index, (_dia, speaker, text) in enumerate(turns, start=1):
                role = "user" if speaker == a else "assistant"
                await self.manager.append_turn(
                    rec.id, role, text, turn_number=index, sender=speaker, timestamp=stamp
                )
            abbreviation = extractive_abbreviation(
                [("user" if s == a else "assistant", t, s) for _, s, t in turns]
            )
            await self.manager.set_abbreviation(rec.id, abbreviation)
            if self.search.vectors is not None:
                await self.search.vectors.index_turns(rec.id)
                await self.search.vectors.index_abbreviation(rec.id, abbreviation)
            rows = await self.db.fetchall(
                "SELECT id FROM turns WHERE conversation_id = ? ORDER BY turn_number, id",
                (rec.id,),
            )
            for (turn_id,), (dia, _, _) in zip(rows, turns, strict=True):
                self.turn_key[(rec.id, int(turn_id))] = f"{sample.sample_id}/{dia}"

    @property
    def _manifest(self) -> Path:
        return self.root / "bench-store.json"

    def save(self, fingerprint: str) -> None:
        """Record what this store holds, for :meth:`reuse` by a later run."""
        self._manifest.write_text(
            json.dumps(
                {
                    "fingerprint": fingerprint,
                    "turn_key": [[c, t, k] for (c, t), k in self.turn_key.items()],
                    "session_of": self.session_of,
                }
            )
        )

    async def reuse(self, fingerprint: str) -> bool:
        """Open a store an earlier run built from the same inputs; False if there is none."""
        try:
            manifest = json.loads(self._manifest.read_text())
        except (OSError, ValueError):
            return False
        if manifest.get("fingerprint") != fingerprint:
            return False
        self.turn_key = {(str(c), int(t)): str(k) for c, t, k in manifest["turn_key"]}
        self.session_of = {str(c): str(s) for c, s in manifest["session_of"].items()}
        await self.open()
        return True

    async def close(self) -> None:
        await self.db.close()


def fingerprint(samples: list[Sample], embedder: EmbeddingService, config: AppConfig) -> str:
    """Hash of everything a built store depends on: the model, the exact texts embedded
    (turn windows, extractive abbreviations) and the turns' senders and dates."""
    digest = hashlib.sha256(f"{embedder.model_id}\x00{config.embedding.turn_window}".encode())
    radius = config.embedding.turn_window
    for sample in samples:
        a, _ = sample.speakers
        for number, stamp, turns in sample.sessions:
            texts = [t for _, _, t in turns]
            digest.update(f"\x01{sample.sample_id}/{number}/{stamp}".encode())
            for i, (dia, speaker, _) in enumerate(turns):
                digest.update(f"\x02{dia}\x00{speaker}\x00".encode())
                digest.update(window_text(texts, i, radius).encode())
            abbreviation = extractive_abbreviation(
                [("user" if s == a else "assistant", t, s) for _, s, t in turns]
            )
            digest.update(b"\x03" + abbreviation.encode())
    return digest.hexdigest()


async def build_store(
    root: Path,
    samples: list[Sample],
    embedder: EmbeddingService,
    config: AppConfig,
    keep: bool,
) -> tuple[Store, float | None]:
    """A store holding ``samples``: reused from ``root`` when ``keep`` and an earlier run
    built it from the same inputs, else built (and recorded when ``keep``). Returns the
    store and the seconds spent loading (None when reused)."""
    store = Store(root, embedder, config)
    mark = fingerprint(samples, embedder, config) if keep else ""
    if keep and await store.reuse(mark):
        return store, None
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    await store.open()
    started = time.perf_counter()
    for sample in samples:
        await store.add(sample)
    seconds = time.perf_counter() - started
    if keep:
        store.save(mark)
    return store, seconds
