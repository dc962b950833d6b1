"""Word ids for soft coverage: every word a ranking meets gets a small integer, and every
candidate turn its content words as one int32 array (docs/search.md "session 8").

Soft coverage (:mod:`bot.search.soft`) needs, per query, the content words of ~180 turns,
their union, each word's vector and each word's 5-letter stem. Done with Python sets of
strings that cost ~3 ms a query (tokenising, hashing ~4,000 words, a dict probe per word
for its vector) and left ~9,000 frozensets and tuples for the garbage collector to walk.
Here a turn's words are an int32 array (remembered per turn id, checked against the
text's hash: a rebuilt index may give an id to another turn), their union is a mark in a
boolean array, and the per-word facts (content word or not, stem) are arrays indexed by
id. Arrays are not tracked by the collector; only the vocabulary dict and list are, and
they hold no containers.

Ids are stable until :meth:`Vocabulary.clear`: the owner (:class:`bot.term_vectors.TermCache`)
starts over when :attr:`Vocabulary.full`, at the start of a ranking, so no id handed out
earlier in the same ranking is void.
"""

from __future__ import annotations

import itertools

import numpy as np

from bot.search.soft import STEM, is_content_word, turn_tokens

VOCAB_WORDS = 200_000  # distinct tokens (~15 MB with their strings) before starting over
CACHE_TURNS = 20_000  # turns whose word ids are kept (~100 bytes each)


class Vocabulary:
    """Word <-> id, per-id facts, and the word ids of recently seen turns."""

    def __init__(self, size: int = VOCAB_WORDS, turns: int = CACHE_TURNS) -> None:
        self.size = size
        self.max_turns = turns
        self.clear()

    def clear(self) -> None:
        self._id: dict[str, int] = {}
        self.words: list[str] = []  # id -> word
        self.content = np.zeros(1024, bool)  # id -> is a content word
        self.stem = np.zeros(1024, np.int32)  # id -> id of its 5-letter stem
        self._stem_id: dict[str, int] = {}
        self._turn_key: dict[int, int] = {}  # turn id -> hash of its text
        self._turn_ids: dict[int, np.ndarray] = {}  # turn id -> its content word ids

    def __len__(self) -> int:
        return len(self.words)

    @property
    def full(self) -> bool:
        return len(self.words) >= self.size

    def ids(self, words: list[str]) -> np.ndarray:
        """The ids of ``words`` (new words get one), int32."""
        get = self._id.get
        found = list(map(get, words))
        try:  # the usual case, every word known; a None fails the conversion (no scan)
            return np.fromiter(found, np.int32, len(found))
        except TypeError:
            pass
        for word in dict.fromkeys(w for w, i in zip(words, found, strict=True) if i is None):
            self._add(word)
        return np.fromiter(map(get, words), np.int32, len(words))

    def turns(self, turn_ids: list[int], texts: list[str]) -> list[np.ndarray]:
        """Each turn's content word ids (:func:`~bot.search.soft.content_words`,
        possibly repeated: the best match and the stem test do not mind). Starts a
        ranking."""
        if len(self._turn_ids) + len(turn_ids) > self.max_turns:
            self._turn_key.clear()
            self._turn_ids.clear()
        out: list[np.ndarray | None] = []
        todo: list[int] = []
        for j, (turn_id, text) in enumerate(zip(turn_ids, texts, strict=True)):
            if self._turn_key.get(turn_id) == hash(text):
                out.append(self._turn_ids[turn_id])
            else:
                out.append(None)
                todo.append(j)
        if todo:
            # one pass over all the new turns' tokens: a dict probe each in C, then
            # numpy picks the content words and splits them back per turn
            split = [turn_tokens(texts[j]) for j in todo]
            ids = self.ids(list(itertools.chain.from_iterable(split)))
            owner = np.repeat(np.arange(len(todo)), [len(s) for s in split])
            keep = self.content[ids]
            kept = ids[keep]
            ends = np.cumsum(np.bincount(owner[keep], minlength=len(todo))).tolist()
            # slices (views of one array) rather than np.split: a third of the time
            pieces = [kept[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
            for j, piece in zip(todo, pieces, strict=True):
                out[j] = piece
                self._turn_key[turn_ids[j]] = hash(texts[j])
                self._turn_ids[turn_ids[j]] = piece
        return [p for p in out if p is not None]

    def unique(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct ids ascending, each of ``ids``' position among them): what
        ``np.unique(return_inverse=True)`` gives, by marking instead of sorting."""
        mark = np.zeros(len(self.words), bool)
        mark[ids] = True
        distinct = np.flatnonzero(mark)
        slot = np.empty(len(self.words), np.int64)
        slot[distinct] = np.arange(len(distinct))
        return distinct, slot[ids]

    def _add(self, word: str) -> int:
        at = len(self.words)
        if at >= len(self.content):
            self.content = np.concatenate([self.content, np.zeros_like(self.content)])
            self.stem = np.concatenate([self.stem, np.zeros_like(self.stem)])
        self._id[word] = at
        self.words.append(word)
        self.content[at] = is_content_word(word)
        self.stem[at] = self._stem_id.setdefault(word[:STEM], len(self._stem_id))
        return at
