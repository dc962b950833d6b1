"""The daemon's background start: the vectors (the model loaded off the loop, then the
rebuild of what is missing) and the lifecycle. A part of the composition root
(:mod:`bot.daemon`).

The order at start, after a model change or turns added while keyword-only: the notes a
previous run left owed are written first (cheap, and what makes those conversations
findable), then every missing vector is embedded again, in the background
(:meth:`bot.vector_rebuild.VectorRebuild.reindex_all`: a reply's own embedding and a
search's go first). Both used to start at once and share the one embedding worker, the
notes waiting behind a rebuild of every turn (~9 windows a second on a loaded machine).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bot.services import Services
from bot.tasks import spawn

log = logging.getLogger("my_agent.daemon")


async def attach_background(services: Services) -> None:
    """Vectors (opened in the background: loading a model may take a while, and search is
    keyword-only until it is ready) and the lifecycle (idle timers, abbreviation, naming)."""
    spawn(_open_vectors(services), name="open-vectors")
    from bot.lifecycle import Lifecycle

    services.lifecycle = Lifecycle(services.config, services)
    await services.lifecycle.start()


async def _open_vectors(services: Services) -> None:
    vectors = services.search.vectors
    if await services.search.start() and vectors is not None:
        services.vectors = vectors
        _index_turns_in_background(services)
        log.info("vector search ready")
        # Embed what is missing or stale (turns appended before the model loaded, a
        # changed model): only outdated vectors are computed, after the owed notes.
        lifecycle = services.lifecycle
        first = lifecycle.owed_notes_written() if lifecycle is not None else None
        spawn(vectors.reindex_all(after=first), name="reindex-vectors")
    else:
        level, why = _keyword_only_because(services)
        log.log(level, "vector search unavailable (%s): search is keyword-only", why)


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
        return logging.INFO, "the embedding model did not load (the warning above says why)"
    return logging.WARNING, "no embedding model or no sqlite-vec"


def _index_turns_in_background(services: Services) -> None:
    pending: set[str] = set()

    async def _index(conversation_id: str) -> None:
        await asyncio.sleep(0.2)  # coalesce a burst of turns into one embedding pass
        pending.discard(conversation_id)
        await services.vectors.index_turns(conversation_id)

    async def on_turn(conversation_id: str, **_: Any) -> None:
        if conversation_id not in pending:
            pending.add(conversation_id)
            spawn(_index(conversation_id), name=f"embed-{conversation_id}")

    services.bus.subscribe("turn_appended", on_turn)
