"""Vectors of abbreviations and turn windows, kept in step with the index, and their KNN.

What is embedded:

- one vector per conversation abbreviation (``abbreviations_vec``, seed 000);
- one vector per turn *window*: the turn with up to ``embedding.turn_window`` neighbours on
  each side (``turns_vec``, rowid = ``turns.id``), capped at :data:`WINDOW_CHARS`
  characters with the centre turn always first so truncation never drops it.

A window is final once the conversation holds the turns after it; until then it is
re-embedded when those turns arrive (``turn_vectors.window_last`` records what it saw).
``index_meta['embedding_model']`` names the vector space; another model or dimension
count marks every vector stale and they are rebuilt in the background.

KNN over every turn (SPEC.md "Vector search cost"): an exact ``vec0`` scan of 200,000
float vectors takes 100+ ms, so interactive search uses a two-stage scan instead. The sign
bits of each vector (48 bytes for 384 dimensions) live in memory as a numpy matrix; a
Hamming scan of the whole matrix (XOR + popcount) shortlists ``8 k`` candidates whose
float16 copies are read from ``turn_vectors`` (a plain table: vec0 point reads cost ~0.4 ms
each) and ranked by exact cosine. Abbreviations (one per conversation) are few enough to
scan exactly from an in-memory float16 matrix. ``turns_vec`` / ``abbreviations_vec`` keep
the float32 vectors for sqlite-vec queries (and ``my-agent bench search``'s baseline).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.ranking import matvec
from bot.schema import create_vector_tables
from bot.search.soft import content_words
from bot.term_vectors import META_KEY as TERMS_KEY
from bot.term_vectors import TermCache, missing
from bot.term_vectors import store as store_terms
from bot.vector_codec import (
    BitMatrix,
    read_turn_vectors,
    rescore,
    sign_bits,
    to_blob,
    to_half,
)

log = logging.getLogger("my_agent.vectors")


WINDOW_CHARS = 1200  # ~256 tokens, the model's truncation point
META_KEY = "embedding_model"


def window_text(turns: Sequence[str], index: int, radius: int) -> str:
    """The centre turn, then its neighbours nearest first, within :data:`WINDOW_CHARS`."""
    parts = [turns[index]]
    for dist in range(1, radius + 1):
        for j in (index - dist, index + dist):
            if 0 <= j < len(turns):
                parts.append(turns[j])
    text = ""
    for part in parts:
        candidate = f"{text}\n{part}" if text else part
        if len(candidate) > WINDOW_CHARS and text:
            break
        text = candidate
    return text[:WINDOW_CHARS]


def _text_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class VectorIndex:
    """Turn-window and abbreviation vectors in ``conversations.db`` plus their KNN."""

    def __init__(self, config: AppConfig, db: Database, embedder: EmbeddingService) -> None:
        self.config = config
        self.db = db
        self.embedder = embedder
        self.radius = config.embedding.turn_window
        self._matrix: BitMatrix | None = None
        self._abbr_ids: list[str] = []
        self._abbr_pos: dict[str, int] = {}
        self._abbr = np.zeros((0, embedder.dimensions), dtype=np.float32)
        self._lock = asyncio.Lock()  # one writer: background indexing is serial
        self._ready = False
        self.stale = False
        # word vectors for the ranker's soft coverage (bot.term_vectors); usable once
        # they cover every turn (``terms_ready``), completed by reindex_all otherwise.
        # Built only while ``search.soft_coverage`` is on: nobody reads them otherwise.
        self.build_terms = config.search.soft_coverage
        self.terms = TermCache(embedder.dimensions)
        self.terms_ready = False

    @property
    def enabled(self) -> bool:
        """True when vectors can be written and searched (sqlite-vec + a model)."""
        return self.db.vec_available and self.embedder.available

    @property
    def ready(self) -> bool:
        return self._ready and self.enabled

    async def open(self) -> bool:
        """Load the model, create the vec tables, detect a model change, load the bits.

        Returns True when vectors are usable. A changed model id or dimension count drops
        every stored vector (``stale``): call :meth:`reindex_all` to rebuild them.
        """
        if not self.db.vec_available:
            log.warning("sqlite-vec unavailable: vectors disabled, search is keyword-only")
            return False
        if not await self.embedder.load():
            return False
        model_id = self.embedder.model_id
        dims = self.embedder.dimensions
        build_terms = self.build_terms

        def _setup(conn: SyncConn) -> tuple[bool, bool]:
            row = conn.execute("SELECT value FROM index_meta WHERE key = ?", (META_KEY,)).fetchone()
            stale = row is not None and row[0] != model_id
            if stale:
                conn.execute("DROP TABLE IF EXISTS turns_vec")
                conn.execute("DROP TABLE IF EXISTS abbreviations_vec")
                conn.execute("DELETE FROM turn_vectors")
                conn.execute("DELETE FROM abbreviation_vectors")
                conn.execute("DELETE FROM term_vectors")
            create_vector_tables(conn, dims)
            conn.execute(
                "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)", (META_KEY, model_id)
            )
            has_turns = bool(conn.execute("SELECT 1 FROM turns LIMIT 1").fetchone())
            if not build_terms:
                # turns stored from now on get no word vectors: the table stops being
                # complete, and a later start with soft coverage on completes it
                conn.execute("DELETE FROM index_meta WHERE key = ?", (TERMS_KEY,))
                return stale or (row is None and has_turns), False
            terms = conn.execute(
                "SELECT value FROM index_meta WHERE key = ?", (TERMS_KEY,)
            ).fetchone()
            terms_ready = not stale and terms is not None and terms[0] == model_id
            if not has_turns and not terms_ready:
                # an empty index: every word arrives with its turn (index_turns)
                conn.execute(
                    "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
                    (TERMS_KEY, model_id),
                )
                terms_ready = True
            rebuild = stale or (row is None and has_turns) or not terms_ready
            return rebuild, terms_ready

        self.stale, self.terms_ready = await self.db.run(_setup)
        self.terms.clear()
        if self.stale:
            log.warning(
                "vectors are stale or incomplete (model %s, term vectors %s): "
                "rebuilding in the background",
                model_id,
                "complete" if self.terms_ready else "missing",
            )
        await self._load_matrix()
        self._ready = True
        return True

    async def _load_matrix(self) -> None:
        words = (self.embedder.dimensions + 63) // 64

        def _read(conn: SyncConn) -> BitMatrix:
            rows = conn.execute("SELECT turn_id, bits FROM turn_vectors").fetchall()
            if not rows:
                return BitMatrix.empty(words)
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            bits = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.uint64)
            return BitMatrix(ids, bits.reshape(len(rows), words).copy())

        self._matrix = await self.db.run(_read, write=False)
        dims = self.embedder.dimensions

        def _read_abbreviations(conn: SyncConn) -> tuple[list[str], np.ndarray]:
            rows = conn.execute(
                "SELECT conversation_id, vector FROM abbreviation_vectors"
            ).fetchall()
            ids = [str(r[0]) for r in rows]
            matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float16)
            # float32 in memory: numpy's float16 matmul is ~10x slower
            return ids, matrix.reshape(len(rows), dims).astype(np.float32)

        ids, matrix = await self.db.run(_read_abbreviations, write=False)
        self._abbr_ids = ids
        self._abbr_pos = {c: i for i, c in enumerate(ids)}
        self._abbr = matrix
        log.info("loaded %d turn vectors, %d abbreviation vectors", len(self._matrix.ids), len(ids))

    # -- indexing ----------------------------------------------------------------------
    async def index_turns(self, conversation_id: str) -> int:
        """Embed the windows of ``conversation_id`` that are new or saw fewer turns.

        Returns the number of vectors written; 0 when vectors are disabled.
        """
        if not self.ready:
            return 0
        async with self._lock:
            return await self._index_turns(conversation_id)

    async def _index_turns(self, conversation_id: str) -> int:
        radius = self.radius

        def _read(conn: SyncConn) -> tuple[list[Any], dict[int, int]]:
            # A user turn and its reply share a turn number: order by id within it.
            turns = conn.execute(
                "SELECT id, content FROM turns WHERE conversation_id = ? AND recall = 1 "
                "ORDER BY turn_number, id",
                (conversation_id,),
            ).fetchall()
            done = dict(
                conn.execute(
                    "SELECT turn_id, window_last FROM turn_vectors WHERE conversation_id = ?",
                    (conversation_id,),
                ).fetchall()
            )
            return turns, done

        turns, done = await self.db.run(_read, write=False)
        if not turns:
            return 0
        texts = [str(t[1]) for t in turns]
        todo: list[tuple[int, int, str]] = []  # (turn id, id of the window's last turn, text)
        for i, (turn_id, _) in enumerate(turns):
            # window_last records the last turn the window saw: a new neighbour changes it
            window_last = int(turns[min(i + radius, len(turns) - 1)][0])
            if done.get(int(turn_id)) == window_last:
                continue
            todo.append((int(turn_id), window_last, window_text(texts, i, radius)))
        if not todo:
            return 0
        try:
            vectors = await self.embedder.embed([t[2] for t in todo])
        except EmbeddingUnavailable:
            return 0
        # the words of the turns whose windows changed (new turns, and a few re-read),
        # stored before the windows: a crash in between leaves the windows to redo
        if self.build_terms:
            changed = {t[0] for t in todo}
            words: set[str] = set()
            for turn_id, content in turns:
                if int(turn_id) in changed:
                    words |= content_words(str(content))
            await self._index_terms(words)
        await self._store_turn_vectors(conversation_id, todo, vectors)
        log.debug("embedded %d windows of %s", len(todo), conversation_id)
        return len(todo)

    async def _index_terms(self, words: set[str]) -> int:
        """Embed and store the ``words`` that have no vector yet (batched on the
        embedding worker); returns how many were added."""
        if not words:
            return 0
        new = await self.db.run(lambda c: missing(c, words), write=False)
        added = 0
        step = 512  # words per write: a full rebuild does not hold the writer for long
        for start in range(0, len(new), step):
            chunk = new[start : start + step]
            try:
                vectors = await self.embedder.embed(chunk)
            except EmbeddingUnavailable:
                return added
            await self.db.run(functools.partial(store_terms, words=chunk, vectors=vectors))
            added += len(chunk)
        return added

    async def _term_count(self) -> int:
        row = await self.db.fetchone("SELECT count(*) FROM term_vectors")
        return int(row[0]) if row else 0

    async def _index_all_terms(self) -> int:
        """Every turn's words (after a rebuild, a model change, or an index from before
        the term table); marks the term vectors complete."""
        words: set[str] = set()
        last = -(1 << 63)
        while True:
            rows = await self.db.fetchall(
                "SELECT id, content FROM turns WHERE id > ? AND recall = 1 ORDER BY id LIMIT 5000",
                (last,),
            )
            if not rows:
                break
            for _, content in rows:
                words |= content_words(str(content))
            last = int(rows[-1][0])
            await asyncio.sleep(0)
        added = await self._index_terms(words)
        if self.embedder.available:
            await self.db.execute(
                "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
                (TERMS_KEY, self.embedder.model_id),
            )
            self.terms_ready = True
        return added

    async def _store_turn_vectors(
        self, conversation_id: str, todo: list[tuple[int, int, str]], vectors: np.ndarray
    ) -> None:
        bits = sign_bits(vectors)
        ids = np.asarray([t[0] for t in todo], dtype=np.int64)

        def _write(conn: SyncConn) -> None:
            # vec0 has no upsert: delete then insert.
            conn.executemany("DELETE FROM turns_vec WHERE rowid = ?", [(int(i),) for i in ids])
            conn.executemany(
                "INSERT INTO turns_vec (rowid, embedding) VALUES (?, ?)",
                [(int(i), to_blob(v)) for i, v in zip(ids, vectors, strict=True)],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO turn_vectors (turn_id, conversation_id, window_last, "
                "bits, vector) VALUES (?, ?, ?, ?, ?)",
                [
                    (t[0], conversation_id, t[1], b.tobytes(), to_half(v))
                    for t, b, v in zip(todo, bits, vectors, strict=True)
                ],
            )

        await self.db.run(_write)
        if self._matrix is not None:
            self._matrix.upsert(ids, bits)

    async def index_abbreviation(self, conversation_id: str, text: str | None) -> bool:
        """Embed a conversation's abbreviation (skipped when unchanged); True if written."""
        if not self.ready:
            return False
        text = (text or "").strip()
        async with self._lock:
            digest = _text_hash(text)
            row = await self.db.fetchone(
                "SELECT text_hash FROM abbreviation_vectors WHERE conversation_id = ?",
                (conversation_id,),
            )
            if row is not None and row[0] == digest:
                return False
            if not text:
                await self._delete_abbreviation(conversation_id)
                return False
            try:
                vector = (await self.embedder.embed([text]))[0]
            except EmbeddingUnavailable:
                return False

            def _write(conn: SyncConn) -> None:
                conn.execute(
                    "DELETE FROM abbreviations_vec WHERE conversation_id = ?", (conversation_id,)
                )
                conn.execute(
                    "INSERT INTO abbreviations_vec (conversation_id, embedding) VALUES (?, ?)",
                    (conversation_id, to_blob(vector)),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO abbreviation_vectors (conversation_id, text_hash, "
                    "vector) VALUES (?, ?, ?)",
                    (conversation_id, digest, to_half(vector)),
                )

            await self.db.run(_write)
            self._set_abbreviation(conversation_id, vector)
            return True

    def _set_abbreviation(self, conversation_id: str, vector: np.ndarray | None) -> None:
        at = self._abbr_pos.get(conversation_id)
        if vector is None:
            if at is not None:
                self._abbr = np.delete(self._abbr, at, axis=0)
                self._abbr_ids.pop(at)
                self._abbr_pos = {c: i for i, c in enumerate(self._abbr_ids)}
            return
        row = np.asarray(vector, dtype=np.float16).astype(np.float32)  # as stored
        if at is None:
            self._abbr_pos[conversation_id] = len(self._abbr_ids)
            self._abbr_ids.append(conversation_id)
            self._abbr = np.vstack([self._abbr, row[None, :]])
        else:
            self._abbr[at] = row

    async def _delete_abbreviation(self, conversation_id: str) -> None:
        def _write(conn: SyncConn) -> None:
            conn.execute(
                "DELETE FROM abbreviations_vec WHERE conversation_id = ?", (conversation_id,)
            )
            conn.execute(
                "DELETE FROM abbreviation_vectors WHERE conversation_id = ?", (conversation_id,)
            )

        await self.db.run(_write)
        self._set_abbreviation(conversation_id, None)

    async def reindex_all(self) -> dict[str, int]:
        """Embed every missing or outdated vector (after ``reindex`` or a model change)."""
        if not self.ready:
            return {"turns": 0, "abbreviations": 0, "terms": 0}
        rows = await self.db.fetchall("SELECT id, abbreviation FROM conversations ORDER BY updated")
        turns = abbreviations = 0
        words_before = await self._term_count() if self.build_terms else 0
        for conv_id, abbreviation in rows:
            turns += await self.index_turns(str(conv_id))
            if abbreviation and await self.index_abbreviation(str(conv_id), str(abbreviation)):
                abbreviations += 1
            await asyncio.sleep(0)  # let interactive work in between conversations
        terms = 0
        if self.build_terms:
            if not self.terms_ready:  # a full scan of every turn's words: when incomplete
                async with self._lock:
                    await self._index_all_terms()
            terms = await self._term_count() - words_before
        await self._prune()
        await self._load_matrix()
        self.stale = False
        log.info(
            "reindexed vectors: %d turn windows, %d abbreviations, %d words",
            turns,
            abbreviations,
            terms,
        )
        return {"turns": turns, "abbreviations": abbreviations, "terms": terms}

    async def _prune(self) -> None:
        """Drop vectors whose turn no longer exists (a rebuilt or trimmed index) or is a
        readout (``turns.recall = 0``, embedded before index version 5)."""

        def _write(conn: SyncConn) -> list[int]:
            gone = [
                int(r[0])
                for r in conn.execute(
                    "SELECT rowid FROM turns_vec WHERE rowid NOT IN "
                    "(SELECT id FROM turns WHERE recall = 1)"
                )
            ]
            conn.executemany("DELETE FROM turns_vec WHERE rowid = ?", [(g,) for g in gone])
            conn.execute(
                "DELETE FROM turn_vectors WHERE turn_id NOT IN "
                "(SELECT id FROM turns WHERE recall = 1)"
            )
            conn.execute(
                "DELETE FROM abbreviations_vec WHERE conversation_id NOT IN "
                "(SELECT id FROM conversations)"
            )
            return gone

        gone = await self.db.run(_write)
        if gone and self._matrix is not None:
            self._matrix.remove(set(gone))

    # -- search ------------------------------------------------------------------------
    async def turn_vectors(self, turn_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored vectors of ``turn_ids`` (missing ids are left out)."""
        if not self.ready or not turn_ids:
            return {}
        ids = [int(t) for t in turn_ids]
        dims = self.embedder.dimensions
        return await self.db.run(lambda c: read_turn_vectors(c, ids, dims), write=False)

    async def knn_turns(
        self, query: np.ndarray, k: int, *, conversation_id: str | None = None
    ) -> dict[int, float]:
        """Up to ``k`` nearest turn windows: turn id -> cosine similarity.

        The bit shortlist holds ``max(8k, 256)`` ids, rescored exactly; within one
        conversation every vector is scored exactly.
        """
        if not self.ready or self._matrix is None:
            return {}
        shortlist = self.turn_shortlist(query, k, conversation_id=conversation_id)
        return await self.db.run(
            lambda c: self.rescore_turns(c, shortlist, query, k, conversation_id), write=False
        )

    def turn_shortlist(
        self, query: np.ndarray, k: int, *, conversation_id: str | None = None
    ) -> list[int]:
        """The in-memory sign-bit stage of :meth:`knn_turns`: ``max(8k, 256)`` turn ids
        (none within one conversation, where :meth:`rescore_turns` scores every vector)."""
        if not self.ready or self._matrix is None or conversation_id is not None:
            return []
        query_bits = sign_bits(query.reshape(1, -1))[0]
        return self._matrix.shortlist(query_bits, max(8 * k, 256)).tolist()

    def rescore_turns(
        self,
        conn: SyncConn,
        shortlist: Sequence[int],
        query: np.ndarray,
        k: int,
        conversation_id: str | None = None,
    ) -> dict[int, float]:
        """The exact stage of :meth:`knn_turns`, on a connection's thread (so a caller
        can run it in the same hop as other reads)."""
        if conversation_id is not None:
            rows = conn.execute(
                "SELECT turn_id FROM turn_vectors WHERE conversation_id = ?", (conversation_id,)
            ).fetchall()
            shortlist = [int(r[0]) for r in rows]
        return rescore(conn, shortlist, query, k, self.embedder.dimensions)

    async def knn_abbreviations(self, query: np.ndarray, k: int) -> dict[str, float]:
        """Up to ``k`` nearest abbreviations: conversation id -> cosine similarity (exact)."""
        if not self.ready or not self._abbr_ids:
            return {}
        scores = matvec(self._abbr, query)
        count = min(k, len(scores))
        top = (
            np.argpartition(-scores, count - 1)[:count]
            if count < len(scores)
            else range(len(scores))
        )
        return {self._abbr_ids[i]: float(scores[i]) for i in top}
