"""Stopping and reloading the daemon: :func:`shutdown` stops what :mod:`bot.daemon`
started, in reverse, draining in-flight replies first; :func:`reload` (SIGHUP) re-reads
the trust list and the owner's identities."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from bot import redaction
from bot.channel import Channel
from bot.notify import Notifier
from bot.services import Services, close_services
from bot.store_generations import advance_generations
from bot.tasks import cancel_all, until_done

log = logging.getLogger("my_agent.daemon")

# What a stop takes beyond the drain: the outbox's last sends (10 s), the channels, the
# cancelled tasks (2 s) and closing the store.
STOP_MARGIN_SECONDS = 15.0


async def _unless_hurried(waiting: Awaitable[bool], hurry: asyncio.Event | None) -> bool:
    """``waiting``'s result, or False as soon as ``hurry`` is set (what it waited for
    goes on until the stop cancels it)."""
    task = asyncio.ensure_future(waiting)
    return await until_done(task, None, hurry) and task.result()


async def shutdown(
    services: Services,
    channels: list[Channel],
    notifier: Notifier | None,
    drain_seconds: float | None = None,
    hurry: asyncio.Event | None = None,
    hangup: ReloadSignal | None = None,
) -> None:
    """Stop accepting, finish (or leave pending) in-flight replies, stop in reverse.

    ``hurry`` (the owner's second Ctrl-C) cuts the drain short: the replies still
    running are cancelled, their user turns stay pending and are answered after the
    restart, exactly as when the drain's time runs out. ``hangup``: the SIGHUP handler,
    closed first (a reload is not started while the daemon stops)."""
    if drain_seconds is None:
        drain_seconds = services.config.service.drain_seconds
    if hangup is not None:
        # A SIGHUP from now on is not acted on: before session 40, one during the drain
        # reloaded against services being shut down (Telegram's menus set while it
        # stopped) and told systemd READY=1 after STOPPING=1.
        hangup.close()
    if notifier:
        notifier.stopping()
        # The unit's TimeoutStopSec fits the default drain; a longer service.drain_seconds
        # (up to 300) was cut short by systemd's SIGKILL. This only ever extends it.
        notifier.extend_timeout(drain_seconds + STOP_MARGIN_SECONDS)
    services.router.accepting = False
    for channel in channels:
        # A send waiting out a peer's ban (Telegram's flood control) would hold the stop
        # for as long: it gives up, and the outbox keeps the message for the next start.
        stop_waiting = getattr(channel, "stop_waiting", None)
        if stop_waiting is not None:
            stop_waiting()
    deadline = time.monotonic() + drain_seconds
    services.incoming.stop()  # replies yielding to a flood wait no longer
    # Messages the disk refused, held (their channels were told so): tried once more;
    # what is still held is written for the next start below (before session 39 a stop
    # lost them).
    spool = services.router.spool
    await spool.stop(timeout=drain_seconds / 4, hurry=hurry)
    finished = await _unless_hurried(services.replies.queue.drain(timeout=drain_seconds / 2), hurry)
    if not finished and hurry is not None and hurry.is_set():
        await services.replies.queue.drain(timeout=0)  # cancels the running replies now
    if not finished:
        log.warning(
            "replies still running at shutdown: their user turns stay pending and "
            "are answered after restart"
        )
    if hurry is not None and hurry.is_set():
        deadline = time.monotonic()  # nothing more is waited for
    if services.lifecycle is not None:
        await services.lifecycle.stop(
            timeout=max(1.0, deadline - time.monotonic()) / 2, hurry=hurry
        )
    # Give the outbox a moment to flush what was just produced; the rest stays queued.
    # Only what can go now: rows for a channel that is not running, or waiting for a
    # retry, made every stop take the whole drain time (20 s).
    while time.monotonic() < deadline and await services.outbox.deliverable_count():
        if hurry is not None and hurry.is_set():
            break
        await asyncio.sleep(0.1)
    await services.outbox.stop()
    for channel in reversed(channels):
        try:
            await channel.stop()
        except Exception:
            log.exception("channel %s did not stop cleanly", channel.name)
    await cancel_all(timeout=2)
    try:
        await asyncio.to_thread(spool.save)  # nothing is held any more after this
    except Exception:  # a bug here must not leave the store unclosed
        log.exception("the held messages could not be written for the next start")
    if services.ready:
        # What was sent up to now is in this state.db: one put back from before this (a
        # copy taken while running) is told apart at a start (bot/store_generations.py).
        # Not after a start cut short: its re-queue may not have looked yet.
        await advance_generations(services.state, services.index_db)
    await close_services(services)
    if notifier:
        notifier.stopped()
        await notifier.stop_watchdog()
        notifier.close()


class ReloadSignal:
    """The SIGHUP handler, one for the daemon's whole life: a SIGHUP before the daemon is
    ready is remembered and acted on once it is (:meth:`ready`), one after is acted on at
    once. A reload's READY=1 before the start's told systemd the start was done while
    the channels were still starting, hence the wait.

    Before, a first handler (remember) was replaced by a second (reload) once ready, and
    the daemon then looked whether the first had been called. A SIGHUP whose callback the
    loop had already queued ran the first handler after that look: the reload was lost
    (the Telegram SIGHUP test, twice in CI under load)."""

    def __init__(self) -> None:
        self._reload: Callable[[], object] | None = None
        self._asked = False
        self._closed = False

    def __call__(self) -> None:
        if self._closed:
            log.info("SIGHUP ignored: the daemon is stopping")
        elif self._reload is None:
            self._asked = True
        else:
            self._reload()

    def ready(self, reload: Callable[[], object]) -> None:
        """From now on a SIGHUP calls ``reload``; called at once if one came before.
        Nothing once :meth:`close` was called."""
        if self._closed:
            return
        self._reload = reload
        if self._asked:
            self._asked = False
            log.info("a reload was asked for while the daemon started: reloading now")
            reload()

    def close(self) -> None:
        """The daemon stops: a SIGHUP from now on is logged as ignored, one remembered
        from before ready is forgotten."""
        self._closed = True
        self._reload = None
        self._asked = False


# Sections a reload leaves as they were (the embedding model, the lifecycle's timers,
# the search's ranking are set up once, at the start).
# Every part of the configuration a SIGHUP does not take (it takes owner, trust and
# models). Only the first three were named: brain.base_url edited and SIGHUPed logged
# "configuration reloaded", and every reply and note went on failing against the old
# endpoint with nothing saying a restart was needed.
RESTART_SECTIONS = (
    "data_dir",
    "brain",
    "channels",
    "transcripts",
    "embedding",
    "conversations",
    "search",
    "service",
    "logging",
)


async def reload(services: Services, notifier: Notifier) -> None:
    """SIGHUP: re-read the trust list, the owner and the models (``models.*``: their
    check is made again); the persona is read fresh on each request anyway."""
    from bot.config import ConfigError, load_config

    notifier.reloading()
    try:
        fresh = load_config(services.config_path) if services.config_path else None
    except ConfigError as exc:
        log.error("reload refused, keeping the running configuration: %s", exc)
        notifier.ready("reload failed: configuration invalid")
        return
    if fresh is None:  # the embedded default: there is no file to read again
        log.info("no configuration file (embedded default): nothing to reload")
        notifier.ready("ready: nothing to reload (no configuration file)")
        return
    # A secret changed in the file is masked too (the running one still is: the
    # channels keep theirs until a restart).
    redaction.use_config(services.config, fresh)
    models_changed = fresh.models != services.config.models
    services.config.trust = fresh.trust
    services.config.owner = fresh.owner
    if models_changed:
        # (a model the service does not offer, fixed in models.aliases: before session
        # 31 only a restart took it, and /status listed it as missing until then)
        services.config.models = fresh.models
        lifecycle = getattr(services, "lifecycle", None)
        if lifecycle is not None:
            await lifecycle.missing_models.recheck(services.brain)
    from bot.identity import OwnerIdentities

    services.identities = OwnerIdentities(services.config)
    for channel in list(services.channels.values()):
        # what a channel derives from them (Telegram's command menus per owner chat)
        refresh = getattr(channel, "reload", None)
        if refresh is None:
            continue
        try:
            await refresh(services.config)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("channel %s did not take the reloaded configuration", channel.name)
    log.info(
        "configuration reloaded (trust list, owner identities%s)",
        ", models" if models_changed else "",
    )
    # What a reload does not take, said: a new embedding model (or idle timeout) edited
    # and SIGHUPed read as taken, while search went on with the old one until a restart.
    untaken = [
        name for name in RESTART_SECTIONS if getattr(fresh, name) != getattr(services.config, name)
    ]
    if untaken:
        log.warning(
            "%s changed in the configuration: a reload does not take %s; restart the daemon%s",
            ", ".join(name if name == "data_dir" else f"{name}.*" for name in untaken),
            "them" if len(untaken) > 1 else "it",
            " (a new embedding model then rebuilds the vectors in the background)"
            if "embedding" in untaken
            else "",
        )
        notifier.ready(f"ready: configuration reloaded; restart to take {', '.join(untaken)}")
        return
    notifier.ready("ready: configuration reloaded")


class Interrupts:
    """The SIGINT handler, one for the daemon's whole life: the first Ctrl-C stops the
    daemon (as SIGTERM does), one once it is stopping (a second Ctrl-C, or one after a
    SIGTERM) stops at once instead of waiting out the drain (:attr:`hurry`): it did
    nothing, and with a reply waiting out an API outage the owner waited 10-20 s at the
    terminal. Nothing is lost: the replies cut short are answered after the restart, as
    when the drain's time runs out. A repeated SIGTERM (a service manager's) still waits
    for the drain.

    Before, the second Ctrl-C's handler replaced the first once the daemon logged
    "stopping": a second SIGINT the loop read before that ran the first (stop, again)
    and was lost, as a SIGHUP was (:class:`ReloadSignal`)."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.hurry = asyncio.Event()

    def __call__(self) -> None:
        if not self.stop.is_set():
            self.stop.set()
            return
        if not self.hurry.is_set():
            log.warning(
                "interrupted again: stopping now; the replies still running are answered "
                "after the restart"
            )
        self.hurry.set()
