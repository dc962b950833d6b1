"""Term vectors: one MiniLM vector per distinct content word of the store.

The learned ranker's soft-coverage features (:mod:`bot.search.soft`, docs/search.md
"Fifth pass") compare the query's words with the candidate turns' words by meaning
("instruments" ~ "violin", "pets" ~ "dog"), not only letter for letter. Every content
word (3+ letters, no stop word, no number; :func:`content_words`) is embedded once, alone,
and kept as float16 in ``term_vectors`` (``bot/schema_recall.py``). Words are added in the
background as turns arrive (:meth:`bot.vectors.VectorIndex.index_turns`, batched on the
embedding worker) and all at once by ``reindex_all``; a model change deletes them with
the turn vectors. ``index_meta['term_vectors']`` names the model once the table covers
every turn: until then (an index from before the table, a rebuild under way) the ranker
uses its model without these features (:data:`bot.search.learned.NO_TERMS`).

Search reads the vectors of the words it needs (the best candidates' and the query's) in
one statement per 500 missing words, through an in-memory LRU of :data:`CACHE_WORDS`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import numpy as np

from bot.db import SyncConn
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


class TermCache:
    """Word -> float32 vector (as stored), read from ``term_vectors`` on demand, LRU."""

    def __init__(self, dims: int, size: int = CACHE_WORDS) -> None:
        self.dims = dims
        self.size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    def clear(self) -> None:
        self._vectors.clear()

    def lookup(self, conn: SyncConn, words: Iterable[str]) -> dict[str, np.ndarray]:
        """The vectors of ``words`` that are stored (on the connection's thread)."""
        out: dict[str, np.ndarray] = {}
        need: list[str] = []
        for word in set(words):
            vector = self._vectors.get(word)
            if vector is None:
                need.append(word)
            else:
                self._vectors.move_to_end(word)
                out[word] = vector
        need.sort()
        for start in range(0, len(need), 500):
            chunk = need[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT term, vector FROM term_vectors WHERE term IN ({marks})", chunk
            ).fetchall()
            if not rows:
                continue
            matrix = half_matrix(b"".join(r[1] for r in rows), len(rows), self.dims)
            for (term, _), vector in zip(rows, matrix, strict=True):
                out[str(term)] = vector
                self._vectors[str(term)] = vector
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)
        return out
