"""The daemon's background start: the vectors (the model loaded off the loop, then the
rebuild of what is missing) and the lifecycle. A part of the composition root
(:mod:`bot.daemon`).

The order at start, after a model change or turns added while keyword-only: the notes a
previous run left owed are written first (cheap, and what makes those conversations
findable), then every missing vector is embedded again, in the background
(:meth:`bot.vector_rebuild.VectorRebuild.reindex_all`: a reply's own embedding and a
search's go first). Both used to start at once and share the one embedding worker, the
notes waiting behind a rebuild of every turn (~9 windows a second on a loaded machine).

A model that is not there at start (a folder copied in later, a download while the
network is not up yet) is loaded by the lifecycle's sweep once it may be
(:func:`load_late_model`), and the vectors then open as at a start with the model.
Before session 39 the first failure was final: search stayed keyword-only until a
restart, which nothing said was needed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any

from bot.services import Services
from bot.tasks import spawn

if TYPE_CHECKING:
    from bot.vectors import VectorIndex

log = logging.getLogger("my_agent.daemon")


async def attach_background(services: Services) -> None:
    """Vectors (opened in the background: loading a model may take a while, and search is
    keyword-only until it is ready) and the lifecycle (idle timers, abbreviation, naming)."""
    spawn(_open_vectors(services), name="open-vectors")
    from bot.lifecycle import Lifecycle

    services.lifecycle = Lifecycle(services.config, services)
    services.lifecycle.load_late_model = functools.partial(load_late_model, services)
    await services.lifecycle.start()


async def _open_vectors(services: Services) -> None:
    vectors = services.search.vectors
    if await services.search.start() and vectors is not None:
        _vectors_ready(services, vectors)
    else:
        level, why = _keyword_only_because(services)
        log.log(level, "vector search unavailable (%s): search is keyword-only", why)


def _vectors_ready(services: Services, vectors: VectorIndex) -> None:
    """Search by meaning from now on: new turns embedded as they come, and what is
    missing or stale rebuilt in the background."""
    services.vectors = vectors
    _index_turns_in_background(services)
    log.info("vector search ready")
    # Embed what is missing or stale (turns appended before the model loaded, a
    # changed model): only outdated vectors are computed, after the owed notes.
    lifecycle = services.lifecycle
    first = lifecycle.owed_notes_written() if lifecycle is not None else None
    spawn(vectors.reindex_all(after=first), name="reindex-vectors")


async def load_late_model(services: Services, download_due: bool) -> bool | None:
    """The lifecycle's sweep, while search is keyword-only for want of the model: load
    it when it may be there now (its folder or the model cache changed since the load
    failed; a download, when ``download_due``: the sweep backs those off) and open the
    vectors as a start with the model does. True once they are open, False when the try
    failed, None when there was nothing to try."""
    embedder, vectors = services.search.embedder, services.search.vectors
    if services.vectors is not None or embedder is None or vectors is None:
        return None
    reason = embedder.retry_reason()
    if reason is None or (reason == "download" and not download_due):
        return None
    log.log(
        logging.INFO if reason == "changed" else logging.DEBUG,
        "loading the embedding model again (%s)",
        "its folder or the model cache changed" if reason == "changed" else "a download",
    )
    embedder.forget_failure()
    if not await services.search.reopen():
        return False
    _vectors_ready(services, vectors)
    return True


def _keyword_only_because(services: Services) -> tuple[int, str]:
    """Why search is keyword-only, and how loud to say it. "no embedding model or no
    sqlite-vec" was a WARNING even with ``embedding.enabled: false`` (asked for), and
    named neither the cause nor the key that fixes it."""
    if not services.config.embedding.enabled:
        return logging.INFO, "embedding.enabled is false"
    if not services.index_db.vec_available:
        return logging.WARNING, "the sqlite-vec extension cannot be loaded"
    if getattr(services.search.embedder, "unavailable_reason", None):
        # the embedding's own warning, just before, says why it did not load and what
        # names a local copy: a second warning repeating it read as a second problem
        return logging.INFO, (
            "the embedding model did not load, the warning above says why; the daemon "
            "loads it once it is there, no restart needed"
        )
    return logging.WARNING, "no embedding model or no sqlite-vec"


def _index_turns_in_background(services: Services) -> None:
    pending: set[str] = set()

    vectors = services.vectors

    async def _index(conversation_id: str) -> None:
        try:
            await asyncio.sleep(0.2)  # coalesce a burst of turns into one embedding pass
            pending.discard(conversation_id)
            await vectors.index_turns(conversation_id)
        finally:
            vectors.dequeue(conversation_id)

    async def on_turn(conversation_id: str, **_: Any) -> None:
        if conversation_id not in pending:
            pending.add(conversation_id)
            # counted until embedded: a search meanwhile says search by meaning is
            # incomplete (before session 41 a message of a second ago was missed by
            # meaning, the page not saying so)
            vectors.enqueue(conversation_id)
            spawn(_index(conversation_id), name=f"embed-{conversation_id}")

    services.bus.subscribe("turn_appended", on_turn)
