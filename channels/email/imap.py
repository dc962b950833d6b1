"""A small IMAP session over aioimaplib: login, select, UID search/fetch/mark, IDLE.

Everything aioimaplib-specific stays here; the adapter sees UIDs, bytes and booleans.
A dropped connection surfaces as :class:`ImapError` (or a timeout) from any call, after
which the session is discarded and the adapter reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import aioimaplib

from bot.config.channels import ImapConfig
from channels.email.imap_wire import (
    FolderRefused,
    ImapError,
    LoginRefused,
    NoGreeting,
    StarttlsRefused,
    checked,
    expunged,
    fetched_literal,
    mailbox_name,
    permanent_flags,
    said,
    selected,
)
from channels.email.misconfig import tls_context

T = TypeVar("T")

log = logging.getLogger("my_agent.email.imap")


@dataclass(frozen=True)
class Mailbox:
    name: str
    uidvalidity: int
    uidnext: int  # 0 when the server did not say
    # the flags the server keeps for good (None: it did not say)
    permanent_flags: frozenset[str] | None = None


class ImapSession:
    """One authenticated connection with one selected folder."""

    def __init__(self, config: ImapConfig, username: str, password: str, timeout: float) -> None:
        self._config = config
        self._username = username
        self._password = password
        self._timeout = timeout
        self._client: aioimaplib.IMAP4 | None = None
        self.lost = asyncio.Event()  # set by aioimaplib when the socket closes
        self.mailbox: Mailbox | None = None
        self._closing = False  # our own LOGOUT/abort: the socket closing is no loss

    # -- connection ----------------------------------------------------------------
    async def connect(self) -> Mailbox:
        cfg = self._config
        if cfg.security == "ssl":
            client: aioimaplib.IMAP4 = aioimaplib.IMAP4_SSL(
                cfg.host, cfg.port, timeout=self._timeout, ssl_context=self._tls_context()
            )
            client.protocol.conn_lost_cb = self._on_lost
        else:
            client = aioimaplib.IMAP4(
                cfg.host, cfg.port, timeout=self._timeout, conn_lost_cb=self._on_lost
            )
        self._client = client
        try:
            # Raced against the socket's loss and a deadline, as every command: a server
            # that greeted and then hung up or went silent left aioimaplib waiting for
            # its own CAPABILITY under a lock that a cancelled wait_for needs back, so
            # the connect never ended: no reconnect, inbound mail stopped for good and
            # every e-mail send waited for the first check of the inbox (session 38).
            await self._until_lost(client.wait_hello_from_server(), "the greeting")
        except TimeoutError as exc:
            raise NoGreeting(
                f"no greeting (or no answer to its CAPABILITY) from {cfg.host}:{cfg.port} "
                f"within {self._timeout:g}s"
            ) from exc
        if cfg.security == "starttls":
            await self._starttls(client)
        await self._login(client)
        # Capabilities change after login (IDLE, MOVE, UIDPLUS): ask again.
        await self._until_lost(client.protocol.capability(), "CAPABILITY")
        return await self.select(cfg.folder)

    async def _login(self, client: aioimaplib.IMAP4) -> None:
        # aioimaplib itself refuses LOGIN (an abort) when the server says LOGINDISABLED.
        if "LOGINDISABLED" in client.protocol.capabilities:
            raise LoginRefused("the server lists LOGINDISABLED", needs_tls=True)
        response = await self._until_lost(client.login(self._username, self._password), "LOGIN")
        if response.result != "OK":
            raise LoginRefused(f"{response.result} {said(response)}".strip())

    async def _starttls(self, client: aioimaplib.IMAP4) -> None:
        proto = client.protocol
        # aioimaplib knows the command but has no helper for it (nor for the upgrade).
        command = aioimaplib.Command("STARTTLS", proto.new_tag(), loop=proto.loop)
        response = await self._until_lost(proto.execute(command), "STARTTLS")
        if response.result != "OK":
            raise StarttlsRefused(f"STARTTLS failed: {response.result} {said(response)}")
        loop = asyncio.get_running_loop()
        transport = await loop.start_tls(
            proto.transport, proto, self._tls_context(), server_hostname=self._config.host
        )
        proto.transport = transport
        await self._until_lost(proto.capability(), "CAPABILITY")

    def _tls_context(self) -> ssl.SSLContext:
        """System CAs, plus ``tls_ca_file`` when configured; certificates are verified."""
        return tls_context(self._config.tls_ca_file, "channels.email.imap.tls_ca_file")

    def _on_lost(self, exc: Exception | None) -> None:
        # Every stop logged "IMAP connection lost: None": a close of ours is no loss.
        if self._closing:
            log.debug("IMAP connection closed")
        elif exc is None:
            log.info("IMAP connection closed by the server")
        else:
            log.info("IMAP connection lost: %s", exc)
        self.lost.set()

    @property
    def client(self) -> aioimaplib.IMAP4:
        if self._client is None or self.lost.is_set():
            raise ImapError("not connected")
        return self._client

    def has_capability(self, name: str) -> bool:
        return self._client is not None and name in self._client.protocol.capabilities

    async def close(self) -> None:
        """LOGOUT politely (bounded), then close the socket."""
        client = self._client
        if client is None:
            return
        self._closing = True
        try:
            if not self.lost.is_set() and not client.has_pending_idle():
                await asyncio.wait_for(client.logout(), 2)
        except Exception:  # already gone: nothing to tell the server
            log.debug("IMAP logout failed", exc_info=True)
        self.abort()

    def abort(self) -> None:
        """Close the socket at once (cancellation, dead connections)."""
        client, self._client = self._client, None
        self._closing = True
        if client is not None and client.protocol.transport is not None:
            client.protocol.transport.close()

    async def _until_lost(self, awaitable: Awaitable[T], what: str, deadline: bool = True) -> T:
        """``awaitable`` (a command's response), or :class:`ImapError` as soon as the
        connection is lost: aioimaplib notices a lost socket but leaves a command
        waiting for its whole timeout (30 s of unseen mail after a server restart,
        which sends BYE and closes while the IDLE is being ended). Without ``deadline``
        the command may take longer than the timeout as long as data keeps arriving
        (aioimaplib's own command timer, restarted by every chunk, bounds silence)."""
        task = asyncio.ensure_future(awaitable)
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait(
                {task, lost},
                timeout=self._timeout if deadline else None,
                return_when=FIRST_COMPLETED,
            )
        finally:
            lost.cancel()
        if task.done():
            return task.result()
        task.cancel()
        if self.lost.is_set():
            raise ImapError(f"connection lost during {what}")
        raise TimeoutError(f"{what}: no answer within {self._timeout:g}s")

    async def _command(
        self, awaitable: Awaitable[aioimaplib.Response], what: str, deadline: bool = True
    ) -> Any:
        return checked(await self._until_lost(awaitable, what, deadline), what)

    # -- commands ------------------------------------------------------------------
    async def select(self, folder: str) -> Mailbox:
        what = f"SELECT {folder}"
        response = await self._until_lost(self.client.select(mailbox_name(folder)), what)
        if response.result == "NO":  # no such folder (Dovecot, pymap: [NONEXISTENT])
            raise FolderRefused(f"{what} failed: {said(response)}")
        checked(response, what)
        validity, uidnext = selected(response.lines)
        if validity is None:
            raise ImapError(f"SELECT {folder}: no UIDVALIDITY in the response")
        self.mailbox = Mailbox(folder, validity, uidnext, permanent_flags(response.lines))
        return self.mailbox

    async def noop(self) -> None:
        await self._command(self.client.noop(), "NOOP")

    async def search_uids(self, criteria: str) -> list[int]:
        """UIDs matching ``criteria`` (e.g. ``UID 105:*`` or ``UNSEEN``), ascending."""
        response = await self._command(
            self.client.uid_search(criteria, charset=None), f"UID SEARCH {criteria}"
        )
        uids: set[int] = set()
        for line in response.lines[:-1]:
            uids.update(int(tok) for tok in bytes(line).split() if tok.isdigit())
        return sorted(uids)

    async def fetch(self, uid: int) -> bytes | None:
        """The whole message without setting \\Seen; None when it no longer exists."""
        # A big mail on a slow link may take longer than the timeout to arrive: only
        # silence (aioimaplib's timer, restarted by every chunk) ends this command.
        what = f"UID FETCH {uid}"
        fetch = self.client.uid("fetch", str(uid), "(UID BODY.PEEK[])")
        response = await self._until_lost(fetch, what, deadline=False)
        expunged(response, what)  # gone: None, unless the mail came all the same
        return fetched_literal(response.lines, uid)

    async def mark_seen(self, uid: int, keyword: str | None = None) -> bool:
        """Set \\Seen (and ``keyword`` with it); False when another client expunged the
        mail meanwhile."""
        what = f"STORE {uid}"
        flags = f"\\Seen {keyword}" if keyword else "\\Seen"
        flag = self.client.uid("store", str(uid), f"+FLAGS.SILENT ({flags})")
        return not expunged(await self._until_lost(flag, what), what)

    async def move(self, uid: int, folder: str) -> bool:
        """MOVE, or COPY + \\Deleted + UID EXPUNGE on servers without MOVE; False when
        another client expunged the mail meanwhile (nothing left to move)."""
        if self.has_capability("MOVE"):
            what = f"MOVE {uid}"
            moving = self.client.uid("move", str(uid), mailbox_name(folder))
            return not expunged(await self._until_lost(moving, what), what)
        what = f"COPY {uid}"
        copying = self.client.uid("copy", str(uid), mailbox_name(folder))
        if expunged(await self._until_lost(copying, what), what):
            return False
        await self._command(
            self.client.uid("store", str(uid), "+FLAGS.SILENT (\\Deleted \\Seen)"),
            f"STORE {uid}",
        )
        if self.has_capability("UIDPLUS"):
            await self._command(self.client.uid("expunge", str(uid)), f"UID EXPUNGE {uid}")
        return True

    async def ensure_folder(self, folder: str) -> None:
        response = await self._until_lost(
            self.client.create(mailbox_name(folder)), f"CREATE {folder}"
        )
        if response.result != "OK":
            log.debug("CREATE %s: %s (probably exists)", folder, response.lines[-1:])

    async def idle(self, timeout: float, stop: asyncio.Event) -> bool:
        """IDLE until the server pushes something, ``timeout`` passes, the connection drops
        or ``stop`` is set. True when the server reported a change."""
        client = self.client
        # aioimaplib's idle_start waits for the server's "+ idling" and does not notice a
        # connection lost meanwhile: it would sit there until the command timeout, with
        # new mail unseen. Race it against the loss (a regression seen in CI).
        starting = asyncio.ensure_future(client.idle_start(timeout=timeout))
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait(
                {starting, lost}, timeout=self._timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            lost.cancel()
        if not starting.done() or self.lost.is_set():
            starting.cancel()
            if starting.done() and not starting.cancelled() and starting.exception() is None:
                starting.result().cancel()  # IDLE did start: stop waiting on it
            if self.lost.is_set():
                raise ImapError("connection lost while starting IDLE")
            raise ImapError("the server did not acknowledge IDLE in time")
        idle = starting.result()
        # Some servers (pymap) report in IDLE only what changes once they listen, a moment
        # after their "+ idling", not a mail that came since the last command: that one
        # waits for the next sync, at most ``timeout`` later. Tests wait for this line.
        log.debug("IDLE acknowledged (for at most %gs)", timeout)
        changed = False
        push = asyncio.ensure_future(client.wait_server_push(timeout + 1))
        waiters = {
            push,
            asyncio.ensure_future(self.lost.wait()),
            asyncio.ensure_future(stop.wait()),
        }
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if push.done() and not push.cancelled() and push.exception() is None:
                result = push.result()
                changed = result != aioimaplib.STOP_WAIT_SERVER_PUSH and any(
                    b"EXISTS" in bytes(line) or b"RECENT" in bytes(line)
                    for line in (result if isinstance(result, list) else [])
                )
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self.lost.is_set():
            idle.cancel()
            raise ImapError("connection lost during IDLE")
        client.idle_done()
        await self._until_lost(idle, "the end of IDLE")
        return changed
