"""Term vectors: one MiniLM vector per distinct content word of the store.

The learned ranker's soft-coverage features (:mod:`bot.search.soft`, docs/search.md
"Fifth pass") compare the query's words with the candidate turns' words by meaning
("instruments" ~ "violin", "pets" ~ "dog"), not only letter for letter. Every content
word (3+ letters, no stop word, no number; :func:`content_words`) is embedded once, alone,
and kept as float16 in ``term_vectors`` (``bot/schema_recall.py``). Words are added in the
background as turns arrive (:meth:`bot.vectors.VectorIndex.index_turns`, batched on the
embedding worker) and all at once by ``reindex_all``, only while ``search.soft_coverage``
is on (nothing reads them otherwise); a model change deletes them with the turn vectors.
``index_meta['term_vectors']`` names the model once the table covers every turn: until
then (an index from before the table, a rebuild under way) the ranker uses its model
without these features (:data:`bot.search.learned.NO_TERMS`).

Search reads the vectors of the words it needs (the best candidates' and the query's) in
one statement per 500 missing words, through an in-memory cache of :data:`CACHE_WORDS`
(:class:`TermCache`), as a snapshot matrix (:class:`Terms`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from bot.db import SyncConn
from bot.search.soft import content_words
from bot.vector_codec import half_matrix, to_half

META_KEY = "term_vectors"
CACHE_WORDS = 20_000  # 1.5 KB a word as float32: ~31 MB at most
CACHE_TURNS = 20_000  # turns whose content words are kept (~0.5-1 KB each)


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


@dataclass(frozen=True)
class Terms:
    """The vectors one ranking reads: ``matrix[index[word]]`` (a snapshot, float32)."""

    index: dict[str, int]
    matrix: np.ndarray

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def vector(self, word: str) -> np.ndarray:
        return np.asarray(self.matrix[self.index[word]])

    @classmethod
    def of(cls, vectors: dict[str, np.ndarray], dims: int) -> Terms:
        words = list(vectors)
        matrix = np.zeros((len(words), dims), np.float32)
        for i, w in enumerate(words):
            matrix[i] = vectors[w]
        return cls({w: i for i, w in enumerate(words)}, matrix)


class TermCache:
    """Word vectors read from ``term_vectors`` on demand, kept in one float32 matrix, so
    a ranking's words are gathered with one ``take`` (stacking ~2,000 separate arrays
    took 1.7 ms). When :data:`CACHE_WORDS` words are held the cache starts over: cheaper
    per hit than an LRU's bookkeeping (~750 hits a query), and rare (a store's working
    vocabulary is a few thousand words)."""

    def __init__(self, dims: int, size: int = CACHE_WORDS) -> None:
        self.dims = dims
        self.size = size
        self._row: dict[str, int] = {}
        self._matrix = np.zeros((min(size, 1024), dims), np.float32)
        # turn id -> (hash of its content, its content words): tokenising ~180 turns a
        # query costs ~2 ms; the same turns come back for related questions
        self._turns: dict[int, tuple[int, frozenset[str]]] = {}

    def __len__(self) -> int:
        return len(self._row)

    def clear(self) -> None:
        self._row.clear()
        self._turns.clear()

    def turn_words(self, turn_id: int, text: str) -> frozenset[str]:
        """:func:`~bot.search.soft.content_words` of a turn, remembered by id (checked
        against the text's hash: a rebuilt index may give an id to another turn)."""
        held = self._turns.get(turn_id)
        key = hash(text)
        if held is not None and held[0] == key:
            return held[1]
        if len(self._turns) >= CACHE_TURNS:
            self._turns.clear()
        words = content_words(text)
        self._turns[turn_id] = (key, words)
        return words

    def bind(self, conn: SyncConn) -> Bound:
        """This cache reading through ``conn`` (for :func:`bot.search.soft.attach`)."""
        return Bound(self, conn)

    def lookup(self, conn: SyncConn, words: Iterable[str]) -> Terms:
        """The stored vectors of ``words`` (on the connection's thread)."""
        get = self._row.get
        names = list(words if isinstance(words, set | frozenset) else set(words))
        rows = list(map(get, names))  # C loops: ~2,000 words a query
        if None not in rows:  # the usual case: every word in memory
            return Terms(
                dict(zip(names, range(len(names)), strict=True)),
                self._matrix.take(np.asarray(rows, dtype=np.int64), axis=0),
            )
        need = [w for w, at in zip(names, rows, strict=True) if at is None]
        held = [at for at in rows if at is not None]
        names = [w for w, at in zip(names, rows, strict=True) if at is not None]
        # the hits are copied before any row is reused for a missing word
        parts = [self._matrix.take(np.asarray(held, dtype=np.int64), axis=0)]
        need.sort()
        for start in range(0, len(need), 500):
            chunk = need[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found = conn.execute(
                f"SELECT term, vector FROM term_vectors WHERE term IN ({marks})", chunk
            ).fetchall()
            if not found:
                continue
            matrix = half_matrix(b"".join(r[1] for r in found), len(found), self.dims)
            parts.append(matrix)
            for (term, _), vector in zip(found, matrix, strict=True):
                names.append(str(term))
                at = self._place(str(term))  # may grow the matrix: placed first
                self._matrix[at] = vector
        matrix = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return Terms(dict(zip(names, range(len(names)), strict=True)), matrix)

    def _place(self, word: str) -> int:
        """A row for ``word``: the next free one (the cache starts over when full)."""
        if len(self._row) >= self.size:
            self._row.clear()
        at = len(self._row)
        if at >= len(self._matrix):
            grown = np.zeros((min(self.size, 2 * len(self._matrix)), self.dims), np.float32)
            grown[: len(self._matrix)] = self._matrix
            self._matrix = grown
        self._row[word] = at
        return at


@dataclass(frozen=True)
class Bound:
    """A :class:`TermCache` with the reader connection it reads through."""

    cache: TermCache
    conn: SyncConn

    def turn_words(self, turn_id: int, text: str) -> frozenset[str]:
        return self.cache.turn_words(turn_id, text)

    def vectors(self, words: set[str]) -> Terms:
        return self.cache.lookup(self.conn, words)
