"""The core services, opened in order (store -> index -> brain) and shared with channels.

``open_services`` is what the daemon, the CLI, the benchmarks and the tests use to get a
working core in-process; channels receive the :class:`Services` (its parts and their
health: bot/service_parts.py) in their constructor. The data directory is checked, and on
a full disk read as it is, by bot/service_data_dir.py.
What is done once with them at start, answering the replies a restart owes, is in
bot/resume.py.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import TYPE_CHECKING, Any

from bot.arrivals import IncomingFlow
from bot.brain.base import Brain
from bot.config import AppConfig
from bot.external import ExternalStore
from bot.hooks import EventBus
from bot.identity import OwnerIdentities
from bot.index import ConversationIndex
from bot.index_rescue import is_corruption, mark_damaged, set_aside, set_aside_marked
from bot.journal_files import journal_lock_path, lock_holder
from bot.outbox import Outbox
from bot.recovery import recover
from bot.replies import ReplyEngine
from bot.schema import create_vector_tables, vector_tables_exist
from bot.search import SearchService
from bot.service_data_dir import DataDirError, check_data_dir, opened_read_only
from bot.service_databases import DatabaseOpenError, IndexCorrupt, close_all, open_databases
from bot.service_parts import Services
from bot.tasks import spawn
from bot.transcript import TranscriptStore

if TYPE_CHECKING:
    from bot.start_progress import StartProgress

log = logging.getLogger("my_agent.services")

# the databases' errors live with their opening, the data directory's with its check
# (bot/service_data_dir.py), the Services object in bot/service_parts.py; importers of
# this module use these names
__all__ = [
    "ChannelStartError",
    "DataDirError",
    "DataDirInUse",
    "DatabaseOpenError",
    "IndexCorrupt",
    "Services",
    "build_brain",
    "close_services",
    "open_services",
]


class DataDirInUse(Exception):
    """Another daemon runs on this data directory (exit 75: try again later)."""


class ChannelStartError(Exception):
    """A channel cannot start, e.g. its address is in use (exit 69)."""


def build_brain(config: AppConfig, services: Services) -> Brain:
    # No key here only for a command that reads the store (its config was loaded without
    # the secrets): it never asks the brain anything.
    if config.brain_provider() == "anthropic" and config.brain.api_key:
        from bot.brain.anthropic import AnthropicBrain

        return AnthropicBrain(config, services)
    from bot.brain.offline import OfflineBrain

    return OfflineBrain(services.search)


async def open_services(
    config: AppConfig,
    *,
    brain: Brain | None = None,
    embedder: Any = None,
    recover_now: bool = True,
    exclusive: bool = False,
    download_models: bool = True,
    load_refs: bool = True,
    stop: asyncio.Event | None = None,
    progress: StartProgress | None = None,
    read_only: bool = False,
) -> Services:
    """Open the store and databases, run recovery, build the brain. No channel yet.

    ``exclusive`` (the daemon): raise :class:`DataDirInUse` when another daemon holds
    the data directory's transcript journal; a corrupt conversations.db is set aside
    and rebuilt from the transcripts (:mod:`bot.index_rescue`). ``download_models=False``
    (a one-shot command): the embedding model comes from ``embedding.model_path`` or the
    model cache only, never from the network (:mod:`bot.embedding`). Recovery
    (``recover_now``) is skipped when a running daemon holds the data directory: it
    indexes its own writes. ``load_refs=False`` (a one-shot command, which delivers no
    message): the message-ref filter is not built, duplicate checks ask the database.
    ``stop`` (the daemon's SIGTERM) ends recovery between two transcripts: the services
    open with what is caught up so far (``recovery.stopped``), the rest is the next
    start's. ``progress`` (the daemon's) is told how far recovery's catch-up has come.
    ``read_only`` (a reading command after :class:`DataDirFull`): the databases are read
    as they are and recovery only checks that nothing is to catch up; a write it would
    need (the index behind the transcripts, a migration, a journal to replay) raises
    :class:`DataDirFull` saying so.
    """
    options: dict[str, Any] = {
        "stop": stop,
        "progress": progress,
        "brain": brain,
        "embedder": embedder,
        "recover_now": recover_now,
        "exclusive": exclusive,
        "download_models": download_models,
        "load_refs": load_refs,
    }
    if read_only:
        return await opened_read_only(config, _open_services(config, **options, read_only=True))
    if exclusive:  # damage the last run found while running (bot/index_rescue.py)
        set_aside_marked(config.index_path, config.conversations_dir)
    try:
        return await _open_services(config, **options)
    except IndexCorrupt as exc:
        # Damage the open found, or one only recovery read (a page the open did not
        # touch): once, from scratch.
        try:
            set_aside(config.index_path, config.conversations_dir, exc.__cause__ or exc)
        except OSError:
            log.exception("cannot set the corrupt %s aside", config.index_path)
            raise exc from None
    return await _open_services(config, **options)


async def _open_services(
    config: AppConfig,
    *,
    brain: Brain | None,
    embedder: Any,
    recover_now: bool,
    exclusive: bool,
    download_models: bool,
    load_refs: bool,
    stop: asyncio.Event | None,
    progress: StartProgress | None,
    read_only: bool = False,
) -> Services:
    """:func:`open_services`, once."""
    from bot.conversations import ConversationManager
    from bot.router import Router

    if not read_only:  # (its write probe is what a full disk refused)
        check_data_dir(config)
    index_db, state = await open_databases(config, exclusive, read_only)
    opened = [index_db, state]
    if index_db.vec_available and not await index_db.run(vector_tables_exist, write=False):
        # Only when missing: even with nothing to create it was a write transaction, and
        # a reading command beside the daemon waited for its write lock, then failed
        # "database is locked" (exit 70) while the daemon wrote.
        dims = config.embedding.dimensions
        await index_db.run(lambda c: create_vector_tables(c, dims))
    bus = EventBus()
    store = TranscriptStore(
        config.conversations_dir,
        fsync=config.transcripts.fsync == "always",
        checkpoint_seconds=config.transcripts.checkpoint_seconds,
    )
    index = ConversationIndex(index_db)
    if embedder is None and config.embedding.enabled:
        from bot.embedding import EmbeddingService

        embedder = EmbeddingService(
            config.embedding, cache_dir=config.model_cache_dir, download=download_models
        )
    search = SearchService(config, index_db, embedder)
    services = Services(
        config=config,
        bus=bus,
        store=store,
        index_db=index_db,
        state=state,
        index=index,
        conversations=ConversationManager(config, store, index, bus),
        external=ExternalStore(config, index_db, bus),
        search=search,
        outbox=Outbox(state),
        identities=OwnerIdentities(config),
        embedder=embedder,
        incoming=IncomingFlow(max_wait=config.brain.flood_reply_wait_seconds),
    )
    try:
        # Before recovery reads any transcript: what a machine crash lost comes back
        # from the journal first. On the loop's thread: nothing else runs yet, and the
        # replay is a no-op after a clean stop.
        store.open(exclusive=exclusive)
        # the party files' journal goes with the transcripts': the daemon holds both,
        # a command next to a daemon neither
        services.external.open(exclusive=exclusive, shared=store.shared)
    except BlockingIOError as exc:
        store.close()
        await close_all(opened)
        lock = journal_lock_path(config.conversations_dir.resolve())
        holder = lock_holder(lock)
        raise DataDirInUse(
            f"another my-agent daemon{f' (pid {holder})' if holder else ''} is running on"
            f" {config.data_dir} (it holds {lock}); stop it first"
        ) from exc
    except OSError as exc:
        store.close()
        await close_all(opened)
        raise DatabaseOpenError(f"cannot replay the transcript journal: {exc}") from exc
    services.brain = brain if brain is not None else build_brain(config, services)
    services.router = Router(services)
    services.replies = ReplyEngine(services)
    interrupted = False  # (Ctrl-C, a cancelled start: recovery stops at its next check)

    def stopping() -> bool:
        return interrupted or (stop is not None and stop.is_set())

    try:
        if recover_now and store.shared:
            # A daemon runs on this data directory (a one-shot command next to it): it is
            # between writing a transcript and indexing those lines, so catching up here
            # indexed them a second time (duplicate turns). Its index is read as it is.
            log.info("a daemon runs on %s: its index is not caught up here", config.data_dir)
        elif recover_now:
            services.recovery = await index_db.run(
                lambda c: recover(
                    c,
                    store,
                    config.external_dir,
                    config,
                    stopping,
                    progress,
                    flag_idle=not read_only,
                )
            )
            log.info("recovery: %s", services.recovery.to_dict())
        if load_refs:  # every ref ever recorded: 0.3 s at 150,000 (docs/benchmarks.md)
            await index.load_refs()
    except BaseException as exc:
        # Close the connections: their threads would otherwise keep the process alive.
        # Cancelled too (Ctrl-C in a command's catch-up or `reindex`'s rebuild): before
        # session 42 only an Exception closed them, and the process hung at its exit.
        interrupted = True
        store.close()
        services.external.close()
        await close_all(opened)
        if not isinstance(exc, Exception):
            raise
        if not exclusive and is_corruption(exc):
            # a command (no daemon runs here: it would have skipped recovery): the remedy
            # named, as for damage a command's own query meets (bot.cli_store)
            raise DatabaseOpenError(
                f"{config.index_path} is damaged ({exc}): run `my-agent reindex` to "
                "rebuild it from the transcripts, or start the daemon, which sets it "
                "aside and rebuilds it"
            ) from exc
        error = IndexCorrupt if exclusive and is_corruption(exc) else DatabaseOpenError
        raise error(f"recovery from the transcripts failed: {exc}") from exc
    if exclusive:  # the daemon: its next start sets a damaged index aside and rebuilds it
        # (after recovery: damage found by it is rescued above, at once)
        index_db.on_damage = lambda exc: _index_damaged(services, exc)
    # What exists now (config, caches, the loaded refs, every module) lives as long as the
    # services: out of the collector's sight, a full collection no longer walks it. Such a
    # collection paused the loop (and every thread waiting for the GIL) 30-60 ms, the
    # largest stall in the ingest latency tail (docs/benchmarks.md).
    gc.freeze()
    return services


def _index_damaged(services: Services, exc: BaseException) -> None:
    """Tell the owner, once, that conversations.db was found damaged while running, and
    leave word for the next start to rebuild it."""
    mark_damaged(services.config.index_path, exc)
    problem = services.index_damage()
    if problem is not None:
        spawn(services.alert_owner(f"Index problem: {problem}."), name="index-damage")


async def close_services(services: Services) -> None:
    if services.page_check is not None and not services.page_check.done():
        services.page_check.cancel()
        await asyncio.wait([services.page_check])
    await services.outbox.stop()
    try:
        await services.brain.close()
    finally:
        # every append queued so far finishes (its index update too) and is checkpointed
        await asyncio.to_thread(services.store.close)
        await asyncio.to_thread(services.external.close)
        await services.index_db.close()
        await services.state.close()
        gc.unfreeze()  # what the services held can be collected again
