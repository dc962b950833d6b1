"""The composition root: start store -> index -> brain -> scheduler -> channels; stop in
reverse on SIGTERM/SIGINT (:mod:`bot.daemon_stop`) and exit 0. The only place where
channels are wired in."""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
from pathlib import Path

from bot import store_lock
from bot.channel import Channel
from bot.config import AppConfig
from bot.daemon_stop import Interrupts, ReloadSignal, reload, shutdown
from bot.daemon_vectors import attach_background
from bot.index_page_checks import page_checks
from bot.notify import Notifier
from bot.party_resume import escalate_cut_messages, resume_known_parties
from bot.recovery_notices import tell_saved_copies
from bot.resume import resume_pending_replies
from bot.send_failures import SendFailureAlerts
from bot.service_databases import state_damage
from bot.services import ChannelStartError, DataDirInUse, Services
from bot.start_progress import keeping_start_alive
from bot.state_new import tell_unknown_deliveries
from bot.store_generations import read_generations, tell_unchecked
from bot.tasks import spawn

log = logging.getLogger("my_agent.daemon")

DRAIN_SECONDS = 20.0  # the default of service.drain_seconds


def build_channels(config: AppConfig, services: Services) -> list[Channel]:
    """Instantiate the enabled channel adapters (imported lazily: aiogram is slow)."""
    built: list[Channel] = []
    if config.channels.web.enabled:
        from channels.web import WebChannel

        built.append(WebChannel(config, services))
    if config.channels.telegram.enabled:
        from channels.telegram import TelegramChannel

        built.append(TelegramChannel(config, services))
    if config.channels.email.enabled:
        from channels.email import EmailChannel

        built.append(EmailChannel(config, services))
    if config.channels.loopback.enabled:
        from channels.loopback import LoopbackChannel

        built.append(LoopbackChannel(config, services))
    return built


def wire_channels(services: Services, channels: list[Channel]) -> None:
    for channel in channels:
        services.channels[channel.name] = channel
        stream = getattr(channel, "stream", None)
        if channel.supports_streaming and stream is not None:
            services.stream_sink = stream

    # A threaded channel (e-mail) records its own Message-IDs with their conversation
    # (ChannelHost.record_message_ref), before the mail leaves: recorded here again once
    # it was sent, every mail wrote the same transcript line twice.
    # a message given up on is told to the owner, not only logged (bot/send_failures.py)
    # and so is a recipient a message was sent without (a Cc the mail server cannot address)
    SendFailureAlerts(services).attach(services.outbox)


def _bind_remedy(channel: str, exc: OSError) -> str:
    """The config key behind a listening channel's bind error, and what to do with it:
    "address already in use" alone left the owner to find out which setting moves it."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f" (channels.{channel}.port: another program, or a my-agent on another data "
            "directory, listens there; stop it or choose a free port)"
        )
    if exc.errno == errno.EACCES:
        return f" (channels.{channel}.port: a port below 1024 needs root; choose a higher one)"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f" (channels.{channel}.host: not a name or address of this machine)"
    return ""


async def start_channels(services: Services, channels: list[Channel]) -> None:
    for channel in channels:
        try:
            await channel.start(services.router)
        except OSError as exc:  # a bind: the dashboard's port taken by another program
            raise ChannelStartError(
                f"channel {channel.name} cannot start: {exc}{_bind_remedy(channel.name, exc)}"
            ) from exc
        services.outbox.attach(channel)
        if getattr(channel, "started", True):
            log.info("channel %s started", channel.name)
        else:  # its own warning said why; "started" right after it read as a recovery
            log.info("channel %s not connected yet: retrying in the background", channel.name)


def channel_summary(channels: list[Channel]) -> str:
    """The channels for the "ready" line: those still connecting (a bot token Telegram
    refused, a server not reachable yet; they retry in the background) apart. The line
    said "channels web, telegram" of a Telegram that had refused every call."""
    down = [c.name for c in channels if not getattr(c, "started", True)]
    up = [c.name for c in channels if c.name not in down]
    text = ", ".join(up) or "none"
    return text + (f" (not connected yet, retrying: {', '.join(down)})" if down else "")


async def start_serving(
    services: Services, channels: list[Channel], stop: asyncio.Event | None = None
) -> int:
    """Queue what a restart owes, then start the channels; returns the owner's turns
    resumed.

    The owed answers go first, the known parties' (:mod:`bot.party_resume`, with an
    untrusted party's album a stop cut short) and the owner's (:mod:`bot.resume`): a
    channel hands over at once what came while we were down (Telegram's first poll),
    and those messages must queue behind them. Started
    after the channels, a resumed reply raced the first poll: the owner's new message
    was answered first, then the older one on its own, out of order, where one reply
    would have answered both (the debounce, an album). Nothing is sent before its
    channel starts: the outbox delivers a channel's rows once it is attached.

    ``stop`` set meanwhile (a SIGTERM) ends the resuming between two items and starts
    no channel: what was not queued is found again at the next start.
    """
    # Read once, before anything this start writes: the owner's re-queue records the
    # next generation, and the known parties' answers, looked at first, would then find
    # an older state.db put back as new as the index (session 40).
    generations = await read_generations(services.state, services.index_db)
    # A resumed turn's debounce counts from when the channels have started: a channel's
    # start (Telegram's setup) may outlast it, and the first poll's messages still join
    # its reply (a known party's resumed answer too, session 41: held from before it is
    # queued, or it could run out its pause during the owner's re-queue).
    services.replies.hold_bursts()
    try:
        await resume_known_parties(services, stop=stop, generations=generations)
        await escalate_cut_messages(services, stop=stop)
        resumed = await resume_pending_replies(services, stop, generations)
        if stop is not None and stop.is_set():
            return resumed
        # What the disk refused before the last stop (bot/spool.py): queued like a
        # channel's first messages, which are told apart as duplicates of them.
        await services.router.spool.restore(services.config.data_dir)
        await start_channels(services, channels)
    finally:
        services.replies.release_bursts()
    unreadable = services.unreadable_transcripts()
    if unreadable:  # the rest is served; the owner may chmod the file and restart
        await services.alert_owner("Started without some conversations: " + "; ".join(unreadable))
    # never dropped silently: the owner may have lost a file by mistake (the copies this
    # start made, and those a command's recovery made while the daemon was stopped)
    await tell_saved_copies(services)
    await tell_unchecked(services)  # an older state.db put back: replies not sent again
    # a state.db made anew next to the transcripts: which replies may not have gone out
    await tell_unknown_deliveries(services)
    # once the channels are up, so that damage it finds reaches the owner (before, the
    # alert had no channel to go on and was only logged); once a day, not at every start
    services.page_check = spawn(
        page_checks(services.index_db, services.router), name="index-page-checks"
    )
    return resumed


async def run_daemon(
    config: AppConfig, stop_event: asyncio.Event | None = None, config_path: Path | None = None
) -> int:
    """Run until SIGTERM/SIGINT (or ``stop_event``); returns the exit status."""
    stop = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    # Before the store opens: a SIGTERM during a long journal replay or recovery killed
    # the process by the signal (status 143); now it stops once they are done, exit 0.
    interrupts = Interrupts(stop)  # a second Ctrl-C hurries the stop
    for sig, handler in ((signal.SIGTERM, stop.set), (signal.SIGINT, interrupts)):
        try:
            loop.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError):
            pass
    # A SIGHUP before the daemon is ready (waiting for a reindex or the disk, replaying
    # the journal) killed the process by its default action; it is now done once ready.
    hangup = ReloadSignal()
    try:
        loop.add_signal_handler(signal.SIGHUP, hangup)
    except (NotImplementedError, RuntimeError):
        pass
    try:
        # Before anything is opened: a reindex deletes conversations.db and rebuilds it.
        maintenance = await store_lock.lock_for_daemon(config.data_dir, stop)
    except TimeoutError as exc:
        raise DataDirInUse(f"{exc}: start the daemon once it has ended") from exc
    try:
        if stop.is_set():
            return 0
        return await _serve(config, stop, config_path, hangup, interrupts.hurry)
    finally:
        store_lock.release(maintenance)


async def _serve(
    config: AppConfig,
    stop: asyncio.Event,
    config_path: Path | None,
    hangup: ReloadSignal | None = None,
    hurry: asyncio.Event | None = None,
) -> int:
    """Open the store, start the channels, serve until ``stop``, then shut down.
    ``hangup``: the SIGHUP handler, told when the daemon is ready; ``hurry``: set by a
    second Ctrl-C, cuts the drain short."""
    notifier = Notifier(status_path=config.data_dir / "daemon.json")
    notifier.status("opening the store and index")

    def waiting(text: str) -> None:  # the disk refuses writes: say so, and take longer
        notifier.status(text)
        notifier.extend_timeout(store_lock.STORAGE_WAIT_MAX + 60)

    try:
        # A missing or corrupt index is caught up from every transcript before READY:
        # while it goes on, systemd hears how far it has come and gives more time
        # (before session 41 a large store or a slow disk outlasted TimeoutStartSec).
        async with keeping_start_alive(notifier) as progress:
            services = await store_lock.open_services_waiting(config, stop, waiting, progress)
    except Exception as exc:
        if not (stop.is_set() and store_lock.may_wait(exc)):
            raise
        log.info("stopping (asked to while waiting for the store to open)")
        notifier.stopped()
        notifier.close()
        return 0
    services.config_path = config_path
    if progress.shown:  # the last progress line would stay until READY
        notifier.status("starting the channels")
    hurry = hurry or asyncio.Event()
    if stop.is_set():  # asked to stop while opening: start nothing, never say ready
        log.info("stopping (asked to while the store was opening)")
        await shutdown(services, [], notifier, hangup=hangup)
        return 0
    try:
        return await _run(services, notifier, stop, hangup, hurry)
    except Exception as exc:
        # Damage in a state.db page the open did not read (the quick check passed, the
        # page went bad since): exit 74 naming the file and the remedy, not an internal
        # error (exit 70) that systemd restarts (before session 40).
        damaged = state_damage(services.state, exc)
        if damaged is None:
            raise
        raise damaged from exc


async def _run(
    services: Services,
    notifier: Notifier,
    stop: asyncio.Event,
    hangup: ReloadSignal | None,
    hurry: asyncio.Event,
) -> int:
    """Start the channels on the opened ``services``, serve until ``stop``, shut down."""
    channels = build_channels(services.config, services)
    wire_channels(services, channels)
    notifier.start_watchdog()
    try:
        await attach_background(services)
        resumed = await start_serving(services, channels, stop)
        if stop.is_set():  # asked to stop while starting: never say ready
            log.info("stopping (asked to while the daemon was starting)")
            return 0
        services.ready = True
        notifier.brain = services.brain.name
        conversations = await services.index.count()
        names = channel_summary(channels)
        log.info(
            "my-agent ready: brain %s, channels %s, %d conversations, %d replies resumed",
            services.brain.name,
            names,
            conversations,
            resumed,
        )
        from bot.healthcheck import brain_state, live_status

        notifier.ready(
            f"ready: {brain_state(services.brain.name)}; channels {names}; "
            f"{conversations} conversations"
        )
        # Only now: a reload's READY=1 before this one told systemd the start was done
        # while the channels were still starting.
        if hangup is not None:
            hangup.ready(lambda: spawn(reload(services, notifier)))
        notifier.start_status_updates(lambda: live_status(services), 30.0)
        await stop.wait()
        log.info("stopping")
    finally:
        await shutdown(services, channels, notifier, hurry=hurry, hangup=hangup)
    return 0
