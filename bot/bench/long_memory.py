"""``my-agent bench locomo PATH``: recall over long conversations (LoCoMo protocol).

(The module is named for what it measures; the benchmark keeps its protocol's name.)

Implements ``../shared/bench/README.md``: every LoCoMo session becomes one conversation
written through the real :class:`~bot.conversations.ConversationManager` (transcript +
index), turns ``"<speaker>: <text>"`` (``[shares <caption>]`` appended) with the session's
date as timestamp, the two speakers as participants and senders. Turn windows are embedded
through :class:`~bot.vectors.VectorIndex`, each session gets its offline extractive
abbreviation (``bot.extractive``) stored and embedded like the lifecycle does. Then every
question of categories 1-4 with valid evidence goes verbatim through
:meth:`SearchService.rank` (the engine behind ``search_conversations``).

Reported in the same run: the product (hybrid), ``baseline_bm25`` (bare FTS5 MATCH over
the same ``turns_fts``, all question words OR-ed, ``ORDER BY bm25``) and
``baseline_dense`` (bare sqlite-vec KNN over the same ``turns_vec``). One store per LoCoMo
conversation (the protocol), plus ``pooled`` (all conversations in one store).
The data set is read from PATH and never copied (:mod:`bot.bench.locomo_data`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bot.bench.embed import model_config
from bot.bench.locomo_data import Sample, load_samples, session_timestamp
from bot.bench.locomo_metrics import CATEGORIES, Metrics, average, sessions_in_order
from bot.config.model import AppConfig
from bot.embedding import EmbeddingService
from bot.extractive import extractive_abbreviation
from bot.ftsmerge import open_index_database
from bot.hooks import EventBus
from bot.search import SearchService
from bot.vectors import window_text

log = logging.getLogger("my_agent.bench.locomo")

# Reading the data set is bot.bench.locomo_data; importers of this module use these names.
__all__ = ["CATEGORIES", "Sample", "Store", "add_arguments", "build_store", "evaluate",
           "fingerprint", "load_samples", "run", "session_timestamp"]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", type=Path, help="locomo JSON (e.g. ../shared/bench/locomo_dev.json)"
    )
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--no-pooled", action="store_true", help="skip the pooled run")
    parser.add_argument("--config", type=Path, default=None, help="config file (model path)")
    parser.add_argument(
        "--stores",
        type=Path,
        default=None,
        help="keep the built stores in this directory and reuse them on the next run while "
        "what they embed is unchanged (ranking-only changes then skip the 4-5 min load; "
        "delete it after changing how turns are indexed)",
    )


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


Ranker = Callable[[str], Awaitable[tuple[list[str], list[str]]]]


async def evaluate(store: Store, samples: list[Sample]) -> dict[str, Any]:
    """The product and both baselines over ``samples`` (all loaded in ``store``)."""
    from bot.search import fts_query  # noqa: F401  (the product's quoting, for reference)

    product, bm25, dense = Metrics(), Metrics(), Metrics()
    method = "keyword"
    vec = store.search.vectors
    started = time.perf_counter()
    queries = 0
    for sample in samples:
        for question, category, evidence in sample.questions:
            queries += 1
            ev = {f"{sample.sample_id}/{d}" for d in evidence}
            ev_sessions = {e.rsplit(":", 1)[0] for e in ev}
            ranking = await store.search.rank(question)
            method = ranking.method
            turns = [
                store.turn_key[(h.conversation_id, h.turn_id)]
                for h in ranking.turns
                if (h.conversation_id, h.turn_id) in store.turn_key
            ]
            sessions = []
            for conv, _ in ranking.conversations:
                sessions.append(_session_key(store, conv))
            product.add(category, turns, sessions, ev, ev_sessions)
            bm_turns = await _bare_fts(store, question)
            bm25.add(category, bm_turns, sessions_in_order(bm_turns), ev, ev_sessions)
            if vec is not None and vec.ready and store.embedder.available:
                dn_turns = await _bare_knn(store, question)
                dense.add(category, dn_turns, sessions_in_order(dn_turns), ev, ev_sessions)
    elapsed = time.perf_counter() - started
    result = product.summary()
    result["method"] = method
    result["baseline_bm25"] = bm25.summary()
    result["baseline_dense"] = dense.summary() if dense.values else None
    result["query_seconds"] = round(elapsed, 2)
    result["queries"] = queries
    return result


def _session_key(store: Store, conv: str) -> str:
    # dia ids are "D<session>:<i>": the session key matches the "<sample>/D<session>" prefix
    sample, number = store.session_of.get(conv, "?/0").split("/")
    return f"{sample}/D{number}"


async def _bare_fts(store: Store, question: str) -> list[str]:
    """Baseline: every question word quoted and OR-ed, bare ``ORDER BY bm25``."""
    words = list(dict.fromkeys(w.lower() for w in re.findall(r"\w+", question)))
    if not words:
        return []
    match = " OR ".join('"' + w + '"' for w in words)
    rows = await store.db.fetchall(
        "SELECT rowid, conversation_id FROM turns_fts WHERE turns_fts MATCH ? "
        "ORDER BY bm25(turns_fts) LIMIT 50",
        (match,),
    )
    return [store.turn_key[(str(c), int(r))] for r, c in rows if (str(c), int(r)) in store.turn_key]


async def _bare_knn(store: Store, question: str) -> list[str]:
    """Baseline: the question's embedding, bare sqlite-vec KNN over ``turns_vec``."""
    from bot.vector_codec import to_blob

    qvec = (await store.embedder.embed([question]))[0]
    rows = await store.db.fetchall(
        "SELECT v.rowid, t.conversation_id FROM turns_vec v JOIN turns t ON t.id = v.rowid "
        "WHERE v.embedding MATCH ? AND k = 50 ORDER BY v.distance",
        (to_blob(qvec),),
    )
    return [store.turn_key[(str(c), int(r))] for r, c in rows if (str(c), int(r)) in store.turn_key]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    path = Path(args.path).expanduser().resolve()
    samples = load_samples(path)
    if getattr(args, "limit", 0):
        samples = samples[: args.limit]
    config, source = model_config(getattr(args, "config", None))
    embedder = EmbeddingService(config.embedding)
    loaded = await embedder.load()
    per_conversation = []
    load_seconds = 0.0
    reused = 0
    keep = getattr(args, "stores", None)
    with tempfile.TemporaryDirectory(prefix="my-agent-locomo-") as tmp:
        base = Path(keep).expanduser().resolve() if keep else Path(tmp)
        for i, sample in enumerate(samples):
            store, seconds = await build_store(
                base / f"s{i}", [sample], embedder, config, keep is not None
            )
            load_seconds += seconds or 0.0
            reused += seconds is None
            per_conversation.append(await evaluate(store, [sample]))
            await store.close()
        result = average(per_conversation)
        if not getattr(args, "no_pooled", False):
            store, _ = await build_store(
                base / "pooled", samples, embedder, config, keep is not None
            )
            result["pooled"] = await evaluate(store, samples)
            await store.close()
    embedder.close()
    result["abbreviations"] = "extractive"
    result["embedding_model"] = source if loaded else None
    result["conversations"] = len(samples)
    result["sessions"] = sum(len(s.sessions) for s in samples)
    result["turns"] = sum(len(t) for s in samples for _, _, t in s.sessions)
    result["load_seconds"] = round(load_seconds, 1)
    if keep is not None:
        result["reused_stores"] = reused
    result["search_config"] = config.search.model_dump()
    return result
