"""Term vectors: one MiniLM vector per distinct content word of the store.

The learned ranker's soft-coverage features (:mod:`bot.search.soft`, docs/search.md
"Fifth pass") compare the query's words with the candidate turns' words by meaning
("instruments" ~ "violin", "pets" ~ "dog"), not only letter for letter. Every content
word (3+ letters, no stop word, no number; a run of Chinese, Japanese ... as its
character pairs; :func:`bot.search.soft.content_words`) is
embedded once, alone, and kept as float16 in ``term_vectors`` (``bot/schema_recall.py``).
Words are added in the background as turns arrive
(:meth:`bot.vectors.VectorIndex.index_turns` through :func:`index_terms`, batched on the
embedding worker) and all at once by ``reindex_all`` (:func:`index_all_terms`), only
while ``search.soft_coverage`` is on (nothing reads them otherwise); a model change
deletes them with the turn vectors.
``index_meta['term_vectors']`` names the model once the table covers every turn (a
reindex keeps the old index's when the words it copies cover the rebuilt turns:
:func:`all_covered`): until then (an index from before the table, a rebuild under way)
the ranker uses its model without these features (:data:`bot.search.learned.NO_TERMS`).

Search reads the vectors of the words it needs (the best candidates' and the query's) in
one statement per 500 missing words, through an in-memory cache of :data:`CACHE_WORDS`
(:class:`TermCache`), by word id (:mod:`bot.search.vocabulary`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

import numpy as np

from bot.db import Database, SyncConn
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.search.soft import content_words
from bot.search.vocabulary import Vocabulary
from bot.vector_codec import half_matrix, to_half

META_KEY = "term_vectors"
CACHE_WORDS = 20_000  # 1.5 KB a word as float32: ~31 MB at most


def missing(conn: SyncConn, words: Iterable[str]) -> list[str]:
    """Those of ``words`` without a stored vector, sorted."""
    wanted = sorted(set(words))
    have: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ",".join("?" * len(chunk))
        have.update(
            str(r[0])
            for r in conn.execute(f"SELECT term FROM term_vectors WHERE term IN ({marks})", chunk)
        )
    return [w for w in wanted if w not in have]


def store(conn: SyncConn, words: list[str], vectors: np.ndarray) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO term_vectors (term, vector) VALUES (?, ?)",
        [(w, to_half(v)) for w, v in zip(words, vectors, strict=True)],
    )


async def index_terms(db: Database, embedder: EmbeddingService, words: set[str]) -> int:
    """Embed and store the ``words`` that have no vector yet (batched on the embedding
    worker); returns how many were added."""
    if not words:
        return 0
    new = await db.run(lambda c: missing(c, words), write=False)
    added = 0
    step = 512  # words per write: a full rebuild does not hold the writer for long
    for start in range(0, len(new), step):
        chunk = new[start : start + step]
        try:
            vectors = await embedder.embed(chunk)
        except EmbeddingUnavailable:
            return added
        await db.run(functools.partial(store, words=chunk, vectors=vectors))
        added += len(chunk)
    return added


async def term_count(db: Database) -> int:
    """How many words have a stored vector."""
    row = await db.fetchone("SELECT count(*) FROM term_vectors")
    return int(row[0]) if row else 0


async def _words_by_chunk(db: Database) -> AsyncIterator[set[str]]:
    """The content words of the recallable turns, 5,000 turns at a time."""
    last = -(1 << 63)
    while True:
        rows = await db.fetchall(
            "SELECT id, content FROM turns WHERE id > ? AND recall = 1 ORDER BY id LIMIT 5000",
            (last,),
        )
        if not rows:
            return
        words: set[str] = set()
        for _, content in rows:
            words |= content_words(str(content))
        last = int(rows[-1][0])
        yield words


async def index_all_terms(db: Database, embedder: EmbeddingService) -> tuple[int, bool]:
    """Every turn's words (after a rebuild, a model change, or an index from before the
    term table); returns (words added, whether the table is now marked complete)."""
    words: set[str] = set()
    async for chunk in _words_by_chunk(db):
        words |= chunk
        await asyncio.sleep(0)
    added = await index_terms(db, embedder, words)
    if not embedder.available:
        return added, False
    await db.execute(
        "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)",
        (META_KEY, embedder.model_id),
    )
    return added, True


async def all_covered(db: Database) -> bool:
    """Whether every recallable turn's words have a stored vector (reads only; stops at
    the first 5,000 turns with a word missing): what lets a rebuilt index keep the old
    one's mark that the table is complete (:mod:`bot.reindex_carry`)."""
    async for words in _words_by_chunk(db):
        if await db.run(functools.partial(missing, words=words), write=False):
            return False
    return True


def read_vectors(conn: SyncConn, dims: int, words: list[str]) -> tuple[list[str], np.ndarray]:
    """The stored vectors of ``words``: (the words found, their (n, dims) float32 rows);
    one statement per 500 words."""
    found: list[str] = []
    blobs: list[bytes] = []
    need = sorted(words)
    for start in range(0, len(need), 500):
        chunk = need[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for term, vector in conn.execute(
            f"SELECT term, vector FROM term_vectors WHERE term IN ({marks})", chunk
        ):
            found.append(str(term))
            blobs.append(vector)
    return found, half_matrix(b"".join(blobs), len(found), dims)


Reader = Callable[[list[str]], tuple[list[str], np.ndarray]]


class TermCache:
    """Word vectors read from ``term_vectors`` on demand, kept in one float32 matrix with
    a row per word id (:class:`~bot.search.vocabulary.Vocabulary`), so a ranking's words
    are one ``take`` (a dict probe per word string cost ~1 ms for ~800 words). When
    ``size`` words are held the rows start over: cheaper per hit than an LRU's
    bookkeeping, and rare (a store's working vocabulary is a few thousand words). Words
    without a stored vector are asked for again by the next ranking that needs them (the
    term vectors of new turns are added in the background)."""

    def __init__(self, dims: int, size: int = CACHE_WORDS) -> None:
        self.dims = dims
        self.size = size
        self.vocabulary = Vocabulary()
        self._row = np.full(1024, -1, np.int32)  # word id -> row of _matrix (-1: not held)
        self._held = 0
        self._matrix = np.zeros((min(size, 1024), dims), np.float32)

    def __len__(self) -> int:
        return self._held

    def clear(self) -> None:
        self.vocabulary.clear()
        self._row[:] = -1
        self._held = 0

    def turns(self, turn_ids: list[int], texts: list[str]) -> list[np.ndarray]:
        """Each turn's content word ids (starts a ranking: when the vocabulary is full,
        everything starts over first, so the ids stay valid for the whole ranking)."""
        if self.vocabulary.full:
            self.clear()
        return self.vocabulary.turns(turn_ids, texts)

    def bind(self, conn: SyncConn) -> Bound:
        """This cache reading through ``conn`` (for :func:`bot.search.soft.attach`)."""
        return Bound(self, functools.partial(read_vectors, conn, self.dims))

    def vectors(self, read: Reader, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(for each of ``ids``, its row in the matrix or -1 when the word has no stored
        vector; the matrix: float32, one row per distinct word found), reading the words
        not in memory through ``read``."""
        distinct, inverse = self.vocabulary.unique(ids)
        if len(self._row) < len(self.vocabulary):
            grown = np.full(max(len(self.vocabulary), 2 * len(self._row)), -1, np.int32)
            grown[: len(self._row)] = self._row
            self._row = grown
        rows = self._row[distinct]
        held = rows >= 0
        col = np.full(len(distinct), -1, np.int64)
        col[held] = np.arange(int(held.sum()))
        # the hits are copied before any row is reused for a missing word
        matrix = self._matrix.take(rows[held], axis=0)
        if not held.all():
            wanted = distinct[~held]
            words = self.vocabulary.words
            where = {words[i]: i for i in wanted.tolist()}
            found, fresh = read(list(where))
            if found:
                found_ids = np.fromiter((where[w] for w in found), np.int64, len(found))
                col[np.searchsorted(distinct, found_ids)] = len(matrix) + np.arange(len(found))
                matrix = np.concatenate([matrix, fresh])
                for word_id, vector in zip(found_ids.tolist(), fresh, strict=True):
                    at = self._place(word_id)  # may grow the matrix: placed first
                    self._matrix[at] = vector
        return col[inverse], matrix

    def _place(self, word_id: int) -> int:
        """A row for ``word_id``: the next free one (the rows start over when full)."""
        if self._held >= self.size:
            self._row[:] = -1
            self._held = 0
        at = self._held
        if at >= len(self._matrix):
            grown = np.zeros((min(self.size, 2 * len(self._matrix)), self.dims), np.float32)
            grown[: len(self._matrix)] = self._matrix
            self._matrix = grown
        self._row[word_id] = at
        self._held += 1
        return at


@dataclass(frozen=True)
class Bound:
    """A :class:`TermCache` with the reader it reads missing words through (the reader
    connection: :meth:`TermCache.bind`); what :func:`bot.search.soft.attach` reads."""

    cache: TermCache
    read: Reader

    def turns(self, turn_ids: list[int], texts: list[str]) -> list[np.ndarray]:
        return self.cache.turns(turn_ids, texts)

    def ids(self, words: list[str]) -> np.ndarray:
        return self.cache.vocabulary.ids(words)

    def stems(self, ids: np.ndarray) -> np.ndarray:
        return self.cache.vocabulary.stem[ids]

    def vectors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.cache.vectors(self.read, ids)
