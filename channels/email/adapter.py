"""The e-mail channel adapter: IMAP in (IDLE, polling fallback), threaded SMTP replies out.

Inbound, for every new message in the watched folder, in UID order: fetch it with
``BODY.PEEK[]`` (so it stays unseen), parse it, hand an :class:`InboundMessage` to the
core, and only once ``deliver`` has returned (the message is durable) mark it ``\\Seen``
or move it to ``imap.processed_folder``, then advance the persisted UID cursor. A crash
anywhere in between leads to the same message being delivered again, which the core drops
as a duplicate (by its Message-ID and content, :mod:`channels.email.dedup`): nothing
is lost and nothing is handled twice.

Outbound, :meth:`EmailChannel.send` composes a threaded reply and sends it over SMTP;
failures raise so that the core's outbox retries them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import replace
from typing import Any

from bot.channel import ChannelHost, DeliveryError
from bot.config.model import AppConfig
from bot.events import OutboundMessage, SendResult
from bot.tasks import spawn
from channels.email.backoff import STABLE_SESSION_SECONDS, Backoff
from channels.email.dsn import Undeliverable
from channels.email.handled import HANDLED
from channels.email.imap import ImapSession
from channels.email.inbound import to_inbound
from channels.email.inbox import Inbox, Unstorable
from channels.email.memory import Correspondence
from channels.email.misconfig import ImapMisconfiguration
from channels.email.parsing import parse_message
from channels.email.sending import Outbound

log = logging.getLogger("my_agent.email")


class EmailChannel:
    """:class:`bot.channel.Channel` for e-mail. ``services`` is the core's Services."""

    name = "email"
    supports_streaming = False

    def __init__(self, config: AppConfig, services: Any = None) -> None:
        self._config = config
        cfg = config.channels.email
        if not cfg.address:
            raise ValueError("channels.email.address is required")
        self._cfg = cfg
        address = cfg.address.lower()
        self._password = cfg.password or os.environ.get("EMAIL_PASSWORD") or ""
        self._host: ChannelHost | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self.ready = asyncio.Event()  # set after the first successful sync (tests, status)
        # Set once the first sync is over, or failed (an outage): what the outbox owes
        # (a reply a stop left unsent) waits for it, behind the mail that came meanwhile.
        self.caught_up = asyncio.Event()
        self.connects = 0
        self.delivered = 0
        self.backoff = Backoff(cfg.imap.reconnect_initial, cfg.imap.reconnect_max)
        # a login refused, TLS that does not fit: told to the owner, cleared once it works
        self.misconfigured = ImapMisconfiguration(cfg.imap)
        if cfg.require_auth and not cfg.auth_serv_id:
            log.warning(
                "channels.email.auth_serv_id is not set: the owner's mail is checked against "
                "the topmost Authentication-Results header only; set it to your receiving "
                "server's id so that no other header can vouch for the owner's address"
            )
        # recent mails in and out (threading, loops); our mailbox's names: in a loop
        # marker of a mail, it came back round
        self._memory = Correspondence(
            (
                a.lower()
                for a in (cfg.address, cfg.imap.username, cfg.smtp.username)
                if a and "@" in a
            ),
            owner=config.owner.identities.get("email", ()),
        )
        self._undeliverable = Undeliverable()  # addresses our mail bounced from lately
        self._outbound = Outbound(
            config.channels.email, address, self._password, self._memory, self._undeliverable
        )
        self._inbox: Inbox | None = None  # the folder's reader (made at start)

    @property
    def address(self) -> str:
        """The mailbox's address (lower case): mail from it is ours, and ours is from it."""
        return self._outbound.address

    @address.setter
    def address(self, value: str) -> None:
        self._outbound.address = value

    # -- lifecycle -----------------------------------------------------------------
    async def start(self, host: ChannelHost) -> None:
        """Start watching the mailbox; returns after the first sync, or after at most 10 s
        (``imap.timeout`` if shorter) with the connection still being retried in the
        background, so an unreachable server never holds up the daemon's start."""
        self._host = host
        if self._inbox is None:
            self._inbox = Inbox(self._cfg, host, self._deliver)
        self._stopping.clear()
        self._task = spawn(self._run(), name="email-imap")
        try:
            await asyncio.wait_for(self.ready.wait(), min(self._cfg.imap.timeout, 10.0))
        except TimeoutError:
            if self.connects:
                # connected, and the first sync is still fetching (30 mails waiting on a
                # loaded machine): "not reachable" sent the owner to the server's settings
                log.info("IMAP connected; the first sync goes on in the background")
            else:
                log.warning("IMAP not reachable yet; retrying in the background")

    async def stop(self) -> None:
        """Stop watching the mailbox. Sends in progress belong to the outbox and finish."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise

    def problems(self) -> list[str]:
        """What an operator should know: IMAP settings that do not fit the server (a
        login refused, TLS), mails the server would not hand over yet, and senders
        taken for a mail loop."""
        inbox = self._inbox
        unfetched = inbox.unfetched.problems() if inbox is not None else []
        refused = [self.misconfigured.problem] if self.misconfigured.problem else []
        marks = [inbox.mark_problem] if inbox is not None and inbox.mark_problem else []
        return [*refused, *unfetched, *marks, *self._memory.problems()]

    def poke(self) -> None:
        """Check the mailbox now (tests, and a hook for a future 'check mail' command)."""
        self._wake.set()

    # -- inbound -------------------------------------------------------------------
    def _session(self) -> ImapSession:
        imap = self._cfg.imap
        return ImapSession(imap, imap.username or self.address, self._password, imap.timeout)

    async def _run(self) -> None:
        assert self._inbox is not None and self._host is not None
        inbox, host = self._inbox, self._host
        while not self._stopping.is_set():
            session = self._session()
            inbox.session_started()
            synced: float | None = None  # when this session's sync completed
            connected = False
            try:
                mailbox = await session.connect()
                connected = True
                await self.misconfigured.connected(host)
                if self._cfg.imap.processed_folder:
                    await session.ensure_folder(self._cfg.imap.processed_folder)
                    await session.select(self._cfg.imap.folder)
                self.connects += 1
                log.info("IMAP connected to %s (UIDVALIDITY %d)", mailbox.name, mailbox.uidvalidity)
                await inbox.sync(session)
                synced = time.monotonic()
                self.ready.set()
                self.caught_up.set()
                await self._watch(session)
                await session.close()  # stopping: log out politely
            except asyncio.CancelledError:
                session.abort()
                raise
            except Exception as exc:
                self.caught_up.set()  # the server down: what we owe goes out meanwhile
                await inbox.session_failed()  # over a mail: counted against it
                if not connected:
                    await self.misconfigured.failed(host, exc)
                if synced is not None and time.monotonic() - synced >= STABLE_SESSION_SECONDS:
                    self.backoff.reset()  # it held: a new outage starts from the first delay
                delay = self.backoff.next()
                log.warning(
                    "IMAP session ended (%s: %s); reconnecting in %.1fs",
                    type(exc).__name__,
                    exc,
                    delay,
                )
                session.abort()
                await self._sleep(delay)

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        waiters = [
            asyncio.ensure_future(self._stopping.wait()),
            asyncio.ensure_future(self._wake.wait()),
        ]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _watch(self, session: ImapSession) -> None:
        imap = self._cfg.imap
        if imap.idle and not session.has_capability("IDLE"):
            # New mail then waits up to poll_interval: the owner should know why.
            log.info(
                "the IMAP server offers no IDLE: checking %s every %gs (imap.poll_interval)",
                imap.folder,
                imap.poll_interval,
            )
        while not self._stopping.is_set():
            if imap.idle and session.has_capability("IDLE"):
                self._wake.clear()
                await session.idle(imap.poll_interval, self._wake)
            else:
                await self._sleep(imap.poll_interval)
            if self._stopping.is_set():
                return
            assert self._inbox is not None
            await self._inbox.sync(session)

    async def _deliver(self, raw: bytes, uid: int, validity: str, replayed: bool = False) -> bool:
        """Hand one fetched mail to the core; False when it was not stored. ``replayed``:
        marked handled by an earlier run of ours (:mod:`channels.email.handled`): it is
        recorded, never answered, acknowledged nor escalated."""
        assert self._host is not None
        # Off the event loop: a mail nested a thousand levels deep took the parser a
        # second, a 25 MB one more, and every channel and the dashboard stood still.
        parsed = await asyncio.to_thread(parse_message, raw)
        if parsed.from_addr == self.address:
            log.info("skipping our own message %s (uid %d)", parsed.message_id, uid)
            return True
        copy = self._memory.list_copy(parsed)
        if copy and parsed.mailing_list:
            # The owner wrote to a list and Cc'd us: the list's copy came too, and it
            # was a second conversation ("[team] Offsite", the same words recorded
            # again), or a second escalation of a stranger's mail.
            log.info(
                "mail uid %d: a mailing list's copy of %s, already received", uid, parsed.message_id
            )
            return True
        parsed = self._memory.loop_guard(parsed, uid)  # automatic, unmarked (mail loops)
        if parsed.bounce is not None and (failed := self._undeliverable.reported(parsed.bounce)):
            log.warning(
                "mail %s to %s bounced (%s)",
                parsed.bounce.original_id,
                ", ".join(failed),
                parsed.bounce.status or parsed.bounce.action,
            )
        try:
            legacy = self._inbox is not None and self._inbox.keys.legacy(validity, uid, parsed.date)
            inbound = await asyncio.to_thread(
                to_inbound,
                parsed,
                raw,
                uid,
                validity,
                self._cfg,
                legacy_key=legacy,
                thread_subject=self._memory.received(parsed),
                # its own Message-ID first: another copy joins the first one's thread
                copy=copy or parsed.mailing_list,
                owner=self._memory.owner,
            )
            if replayed:
                log.info(
                    "mail uid %d (%s) was handled by an earlier run (marked %s): recorded "
                    "again where missing, not answered",
                    uid,
                    parsed.message_id,
                    HANDLED,
                )
                inbound = replace(inbound, addressed=False, replayed=True)
            await self._host.deliver(inbound)
        except DeliveryError as exc:
            log.warning("core refused mail uid %d (%s); will retry", uid, exc)
            return False
        except Exception as exc:
            # A bug, not an outage: still never acknowledge what may not be stored;
            # retried on the next check (without reconnecting), and passed over for now
            # if it keeps failing, so that one mail holds up no later mail forever.
            log.exception("delivering mail uid %d failed; will retry", uid)
            raise Unstorable(f"uid {uid}: {exc!r}") from exc
        self.delivered += 1
        return True

    # -- outbound ------------------------------------------------------------------
    async def send(self, message: OutboundMessage) -> SendResult:
        """Compose and send one mail; raises for the outbox to retry. Waits for the first
        check of the mailbox to end: the daemon's start waits for it at most 10 s, and a
        reply a stop left owed went out before the mail that came meanwhile (the owner's
        "never mind", a new question in its thread) was even recorded."""
        if not self.caught_up.is_set() and self._task is not None:
            log.info(
                "the %s to %s waits for the first check of %s to end",
                message.kind,
                message.chat_id,
                self._cfg.imap.folder,
            )
            await self.caught_up.wait()
        return await self._outbound.send(message, self._host)
