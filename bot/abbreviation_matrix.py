"""Every conversation's abbreviation vector in memory, and the nearest ones to a query.

One vector per conversation: at 10,000 conversations scoring them all is a 2 ms product,
so the nearest are exact. At 100,000 the same product read 150 MB and took ~24 ms of a
search, and adding one note copied the whole matrix (``np.vstack``) each time a
conversation was abbreviated. So the rows live in a buffer with spare capacity (appended
in place, a removed row filled by the last one), and above :data:`EXACT_UP_TO` notes the
nearest are found like the turns' (:mod:`bot.vector_knn`): a shortlist by the sign bits'
Hamming distance, then the exact cosine of the shortlisted rows.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from bot.ranking import matvec
from bot.vector_codec import BitMatrix, query_sign_bits, shortlist_size, sign_bits

# Notes scored exactly, all of them; above, the sign-bit stage picks shortlist_size(k) first
# (at 10,000 notes the exact product takes ~2 ms, the two stages ~1 ms: not worth a
# ranking that could differ).
EXACT_UP_TO = 20_000


class AbbreviationMatrix:
    """Conversation id -> its abbreviation vector (float32, as stored in float16)."""

    def __init__(self, ids: list[str], rows: np.ndarray, dims: int) -> None:
        n = len(ids)
        self._ids = list(ids)
        self._pos = {c: i for i, c in enumerate(self._ids)}
        self._rows = np.zeros((max(1024, n), dims), dtype=np.float32)
        self._rows[:n] = rows
        words = (dims + 63) // 64
        self._bits = (
            BitMatrix(np.arange(n, dtype=np.int64), sign_bits(rows))
            if n
            else BitMatrix.empty(words)
        )

    def __len__(self) -> int:
        return len(self._ids)

    def set(self, conversation_id: str, vector: np.ndarray | None) -> None:
        """Replace, add or (with None) drop one conversation's vector."""
        at = self._pos.get(conversation_id)
        if vector is None:
            if at is not None:
                self._drop(at)
            return
        row = np.asarray(vector, dtype=np.float16).astype(np.float32)  # as stored
        if at is None:
            at = len(self._ids)
            if at == len(self._rows):  # grow by doubling
                self._rows = np.concatenate([self._rows, np.zeros_like(self._rows)])
            self._ids.append(conversation_id)
            self._pos[conversation_id] = at
        self._rows[at] = row
        self._bits.upsert(np.array([at], dtype=np.int64), sign_bits(row[None, :]))

    def _drop(self, at: int) -> None:
        last = len(self._ids) - 1
        gone = self._ids[at]
        if at != last:  # the last row fills the hole
            moved = self._ids[last]
            self._ids[at] = moved
            self._pos[moved] = at
            self._rows[at] = self._rows[last]
            self._bits.upsert(np.array([at], dtype=np.int64), sign_bits(self._rows[at : at + 1]))
        self._ids.pop()
        del self._pos[gone]
        self._rows[last] = 0.0
        self._bits.remove({last})  # rare (a conversation deleted): rebuilds the bits

    def nearest(
        self, query: np.ndarray, k: int, among: Collection[str] | None = None
    ) -> dict[str, float]:
        """Up to ``k`` nearest: conversation id -> cosine similarity (exact); with
        ``among``, of those conversations only, best first."""
        n = len(self._ids)
        if among is not None:
            # each once (a list may name one twice: k distinct ones are wanted)
            found = dict.fromkeys(at for at in map(self._pos.get, among) if at is not None)
            rows = np.fromiter(found, dtype=np.int64, count=len(found))
            if len(rows) > EXACT_UP_TO:
                rows = self._bits.shortlist_among(query_sign_bits(query), shortlist_size(k), rows)
            scores = matvec(self._rows[rows], query) if len(rows) else np.zeros(0)
            best = np.argsort(-scores, kind="stable")[:k]
            return {self._ids[rows[i]]: float(scores[i]) for i in best.tolist()}
        if not n:
            return {}
        if n > EXACT_UP_TO:
            rows = np.sort(self._bits.shortlist(query_sign_bits(query), shortlist_size(k)))
            scores = matvec(self._rows[rows], query)
        else:
            rows = np.arange(n)
            scores = matvec(self._rows[:n], query)
        count = min(k, len(scores))
        top = (
            np.argpartition(-scores, count - 1)[:count]
            if count < len(scores)
            else range(len(scores))
        )
        return {self._ids[rows[i]]: float(scores[i]) for i in top}


__all__ = ["EXACT_UP_TO", "AbbreviationMatrix"]
