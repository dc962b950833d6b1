"""Vectors of abbreviations and turn windows, kept in step with the index, and their KNN.

What is embedded:

- one vector per conversation abbreviation (``abbreviations_vec``, seed 000);
- one vector per turn *window*: the turn with up to ``embedding.turn_window`` neighbours on
  each side (``turns_vec``, rowid = ``turns.id``), capped at :data:`WINDOW_CHARS`
  characters with the centre turn always first so truncation never drops it. A mail the
  owner forwarded (``turns.forwarded``, bot/forwards.py) is part of its turn's text there,
  after the owner's words under its label (:func:`bot.forwards.window_part`).

A window is final once the conversation holds the turns after it; until then it is
re-embedded when those turns arrive (``turn_vectors.window_last`` records what it saw).
``index_meta['embedding_model']`` names the vector space; another model or dimension
count marks every vector stale and they are rebuilt in the background
(:mod:`bot.vector_store`). ``index_meta['embedding_turn_window']`` names the radius the
windows were made with; another one drops the turn windows alone, rebuilt alike. The
word vectors of soft coverage are written alongside (:mod:`bot.term_vectors`).

KNN over every turn (SPEC.md "Vector search cost"): an exact ``vec0`` scan of 200,000
float vectors takes 100+ ms, so interactive search uses a two-stage scan instead
(:mod:`bot.vector_knn`): the sign bits of each vector (48 bytes for 384 dimensions) live
in memory and a Hamming scan shortlists ``8 k`` candidates whose float16 copies are read
from ``turn_vectors`` (a plain table: vec0 point reads cost ~0.4 ms each) and ranked by
exact cosine. Abbreviations (one per conversation) are few enough to scan exactly from an
in-memory matrix. ``turns_vec`` / ``abbreviations_vec`` keep the float32 vectors for
sqlite-vec queries (and ``my-agent bench search``'s baseline).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence

import numpy as np

from bot.config.model import AppConfig
from bot.db import Database
from bot.embedding import EmbeddingService, EmbeddingUnavailable
from bot.forwards import window_part
from bot.search.soft import content_words
from bot.term_vectors import TermCache, index_terms
from bot.vector_codec import sign_bits
from bot.vector_knn import VectorMatrices
from bot.vector_rebuild import VectorRebuild
from bot.vector_search import VectorSearch
from bot.vector_store import (
    META_KEY,
    abbreviation_hash,
    delete_abbreviation,
    not_searchable_here,
    prepare_telling,
    read_windows,
    store_abbreviation,
    store_turn_vectors,
    terms_complete,
    text_digest,
    vectors_missing,
)

log = logging.getLogger("my_agent.vectors")


WINDOW_CHARS = 1200  # ~256 tokens, the model's truncation point


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


def turn_text(content: object, forwarded: str | None) -> str:
    """A turn as its windows hold it: ``content``, then the mail the owner forwarded
    (``turns.forwarded``) under its label (:func:`bot.forwards.window_part`). The daemon
    and ``my-agent reindex`` (bot/reindex_windows.py) both read turns so: a drift
    between them would keep no vector across a reindex, silently."""
    return window_part(str(content), forwarded, WINDOW_CHARS)


def window_last_of(ids: Sequence[int], index: int, radius: int) -> int:
    """The id of the last turn the window of the turn at ``index`` holds (what
    ``turn_vectors.window_last`` records: a later neighbour changes it)."""
    return int(ids[min(index + radius, len(ids) - 1)])


class VectorIndex(VectorRebuild, VectorSearch):
    """Turn-window and abbreviation vectors in ``conversations.db`` plus their KNN
    (the rebuild and its retry: :class:`~bot.vector_rebuild.VectorRebuild`; the KNN
    searches: :class:`~bot.vector_search.VectorSearch`)."""

    def __init__(self, config: AppConfig, db: Database, embedder: EmbeddingService) -> None:
        self.config = config
        self.db = db
        self.embedder = embedder
        self.radius = config.embedding.turn_window
        self._knn: VectorMatrices | None = None  # loaded by open()
        self._lock = asyncio.Lock()  # one writer: background indexing is serial
        self._ready = False
        # ``stale``: a rebuild is owed (missing vectors, a new model's, or the word
        # vectors of soft coverage); ``missing``: turn or note vectors are missing, which
        # search by meaning reads (each door says so: SearchPage.vectors_incomplete)
        self.stale = False
        self.missing = False
        # Why the last open() dropped the stored vectors ("the model changed from X"),
        # or None: /status names it as the cause of a rebuild only when it is one.
        self.dropped: str | None = None
        # Whether this process rebuilds the vectors of another model (the daemon, the
        # reindex): a reading command (``my-agent search``) sets False, so that opening
        # with another model than the store's does not drop what it will never rebuild.
        self.rebuilds = True
        # Conversations whose embedding failed (the model raised for one of their texts)
        # in a rebuild or an incremental pass: :meth:`retry_unfinished` redoes them, so a
        # running daemon finishes a partly failed rebuild without a restart.
        self._unfinished: set[str] = set()
        # Conversations whose new turns wait in the daemon's embedding queue (coalesced,
        # then behind the lock and the model: 1-3 s), with how many passes each: found by
        # their words at once, by meaning only after (:meth:`waiting`).
        self._queued: dict[str, int] = {}
        self._rebuild_lock = asyncio.Lock()  # one rebuild or retry at a time
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
        every stored vector (``stale``): call :meth:`reindex_all` to rebuild them. Not
        when :attr:`rebuilds` is False (a reading command): nothing is written, and
        without vectors of this model search is keyword-only.
        """
        if not self.db.vec_available:
            log.warning("sqlite-vec unavailable: vectors disabled, search is keyword-only")
            return False
        if not await self.embedder.load():
            return False
        model_id = self.embedder.model_id
        dims = self.embedder.dimensions
        probe = getattr(self.embedder, "probe", None)  # (test stubs have none)
        if self.rebuilds:
            self.stale, self.terms_ready, lost = await self.db.run(
                functools.partial(
                    prepare_telling,
                    model_id=model_id,
                    dims=dims,
                    build_terms=self.build_terms,
                    probe=probe,
                    radius=self.radius,
                )
            )
        else:
            # A reading command writes nothing: it may run beside the daemon (its write
            # lock), on a copy or a read-only mount. prepare() rewrote index_meta (model,
            # probe, word vectors' key) at every `my-agent search`; what is there is read.
            why = await self.db.run(lambda c: not_searchable_here(c, model_id, probe), write=False)
            if why is not None:
                log.warning("%s: searching by keyword only", why)
                return False
            self.terms_ready = await self.db.run(
                lambda c: terms_complete(c, model_id, self.build_terms), write=False
            )
            lost = None
            if self.build_terms and not self.terms_ready:
                # only the ranking's soft features are left out: every turn is still
                # found by meaning, so no door says anything of it
                log.debug("word vectors incomplete: ranking without soft coverage")
        # What search by meaning reads (turn and note vectors) is incomplete: missing ones
        # (turns added while keyword-only, a new model's drop) and each door says so. The
        # word vectors are not counted: the daemon's ``stale`` owes them to its rebuild,
        # a reading command rebuilds nothing.
        self.missing = await self.db.run(vectors_missing, write=False)
        self.stale = self.missing or (self.stale and self.rebuilds)
        self.dropped = lost
        if self.terms.dims != dims:
            # The model's own count, which the embedder takes over a config that says
            # otherwise (embedding.dimensions): the cache made before the load read the
            # stored word vectors with the config's, and every hybrid search raised.
            self.terms = TermCache(dims)
        else:
            self.terms.clear()
        if lost:
            # stored vectors were dropped (every one, or the turn windows alone): search
            # by meaning is incomplete until they are rebuilt
            log.warning(
                "stored vectors dropped (%s; now %s, turn window %d): rebuilding them in the"
                " background",
                lost,
                model_id,
                self.radius,
            )
        elif self.stale and self.rebuilds:
            # a first build (or turns indexed while keyword-only): normal, not a fault;
            # it was a WARNING "stale or incomplete" on every new owner's first start
            log.info(
                "building vectors in the background (model %s%s)",
                model_id,
                "" if self.terms_ready else ", with term vectors",
            )
        await self._load_matrix()
        self._ready = True
        return True

    async def _load_matrix(self) -> None:
        """Read the in-memory KNN matrices (once, at open: every write then keeps them in
        step, see :meth:`~bot.vector_rebuild.VectorRebuild._prune`)."""
        dims = self.embedder.dimensions
        knn = await self.db.run(lambda c: VectorMatrices.read(c, dims), write=False)
        self._knn = knn
        log.info(
            "loaded %d turn vectors, %d abbreviation vectors",
            len(knn.turns.ids),
            knn.abbreviation_count,
        )

    def enqueue(self, conversation_id: str) -> None:
        """A pass over ``conversation_id``'s new turns is queued (:meth:`dequeue` when it
        ends, embedded or not)."""
        self._queued[conversation_id] = self._queued.get(conversation_id, 0) + 1

    def dequeue(self, conversation_id: str) -> None:
        left = self._queued.get(conversation_id, 0) - 1
        if left > 0:
            self._queued[conversation_id] = left
        else:
            self._queued.pop(conversation_id, None)

    def waiting(self, besides: str | None = None) -> bool:
        """Whether turns of a conversation other than ``besides`` wait in the embedding
        queue: search by meaning does not find them yet. (The queue holds the
        conversations talked in these seconds, not the store: its cost does not grow
        with the store.)"""
        return any(conv != besides for conv in self._queued)

    # -- indexing ----------------------------------------------------------------------
    async def index_turns(self, conversation_id: str, limit: int | None = None) -> int:
        """Embed the windows of ``conversation_id`` that are new or saw fewer turns, the
        first ``limit`` of them when given (the rebuild's slices: see
        :mod:`bot.vector_rebuild`).

        Returns the number of vectors written; 0 when vectors are disabled.
        """
        if not self.ready:
            return 0
        async with self._lock:
            try:
                count = await self._index_turns(conversation_id, limit)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._unfinished.add(conversation_id)  # retried by retry_unfinished
                self.stale = self.missing = True
                raise
        self._unfinished.discard(conversation_id)
        return count

    async def _index_turns(self, conversation_id: str, limit: int | None = None) -> int:
        radius = self.radius
        turns, done = await self.db.run(lambda c: read_windows(c, conversation_id), write=False)
        if not turns:
            return 0
        # a mail the owner forwarded is in its turn's window, labelled after their words
        # (before session 42 search by meaning never saw it: keyword search alone did)
        texts = [turn_text(t[1], t[2]) for t in turns]
        ids = [int(t[0]) for t in turns]
        todo: list[tuple[int, int, str]] = []  # (turn id, id of the window's last turn, text)
        for i, turn_id in enumerate(ids):
            window_last = window_last_of(ids, i, radius)
            if done.get(turn_id) == window_last:
                continue
            todo.append((turn_id, window_last, window_text(texts, i, radius)))
            if limit is not None and len(todo) >= limit:
                break
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
            for turn_id, content, _ in turns:
                if int(turn_id) in changed:
                    words |= content_words(str(content))
            await index_terms(self.db, self.embedder, words)
        await self._store_turn_vectors(conversation_id, todo, vectors)
        log.debug("embedded %d windows of %s", len(todo), conversation_id)
        return len(todo)

    async def _store_turn_vectors(
        self, conversation_id: str, todo: list[tuple[int, int, str]], vectors: np.ndarray
    ) -> None:
        bits = sign_bits(vectors)
        ids = np.asarray([t[0] for t in todo], dtype=np.int64)
        await self.db.run(
            functools.partial(
                store_turn_vectors,
                conversation_id=conversation_id,
                todo=todo,
                vectors=vectors,
                bits=bits,
            )
        )
        if self._knn is not None:
            self._knn.turns.upsert(ids, bits)

    async def index_abbreviation(self, conversation_id: str, text: str | None) -> bool:
        """Embed a conversation's abbreviation (skipped when unchanged); True if written."""
        if not self.ready:
            return False
        text = (text or "").strip()
        async with self._lock:
            digest = text_digest(text)
            stored = await self.db.run(lambda c: abbreviation_hash(c, conversation_id), write=False)
            if stored == digest:
                return False
            if not text:
                await self._delete_abbreviation(conversation_id)
                return False
            try:
                vector = (await self.embedder.embed([text]))[0]
            except EmbeddingUnavailable:
                return False

            await self.db.run(lambda c: store_abbreviation(c, conversation_id, digest, vector))
            if self._knn is not None:
                self._knn.set_abbreviation(conversation_id, vector)
            return True

    async def _delete_abbreviation(self, conversation_id: str) -> None:
        await self.db.run(lambda c: delete_abbreviation(c, conversation_id))
        if self._knn is not None:
            self._knn.set_abbreviation(conversation_id, None)


# META_KEY stays importable from here (it names the vector space in index_meta).
__all__ = ["META_KEY", "WINDOW_CHARS", "VectorIndex", "turn_text", "window_last_of", "window_text"]
