"""Real local mail servers for the e-mail tests: pymap (IMAP) and aiosmtpd (SMTP).

pymap runs as a subprocess once per test module (it needs about 0.4 s to start); each
test works in its own folder, so tests in a module never see each other's mail.
aiosmtpd runs in the test's event loop and can be stopped and restarted on the same port
to simulate an outage.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aioimaplib
import pytest
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from bot.bench import pymap_server
from bot.bench.pymap_server import free_port as free_port  # the e-mail tests' import
from bot.bench.pymap_server import pymap_command as pymap_command
from bot.channel import DeliveryError
from bot.events import InboundMessage
from tests.channels.email.helpers import missing

if TYPE_CHECKING:
    from channels.email.adapter import EmailChannel
    from tests.channels.email.stack import Stack

USER = "bot@example.com"
PASSWORD = "secret"
_folders = itertools.count(1)


@dataclass
class PymapServer:
    port: int
    process: subprocess.Popen[bytes]


def email_channel(
    imap_port: int, smtp_port: int, folder: str, *, imap: Any = None, smtp: Any = None, **email: Any
) -> dict[str, Any]:
    """The ``channels.email`` config of the tests: this mailbox (:data:`USER`) on the
    local servers, in ``folder``, with short timeouts and reconnect delays; ``imap``,
    ``smtp`` and ``email`` override those of the IMAP, SMTP and channel keys."""
    return {
        "enabled": True,
        "address": USER,
        "display_name": "My Assistant",
        "password": PASSWORD,
        "imap": {
            "host": "127.0.0.1",
            "port": imap_port,
            "security": "none",
            "folder": folder,
            "poll_interval": 0.3,
            "timeout": 5,
            "reconnect_initial": 0.05,
            "reconnect_max": 0.2,
            **(imap or {}),
        },
        "smtp": {
            "host": "127.0.0.1",
            "port": smtp_port,
            "security": "none",
            "timeout": 5,
            **(smtp or {}),
        },
        **email,
    }


def start_pymap(port: int | None = None, keywords: tuple[str, ...] = ()) -> PymapServer:
    """pymap on ``port`` (a free one by default); ``keywords``: the IMAP keywords its
    folders keep (pymap keeps none: its PERMANENTFLAGS are the system flags)."""
    try:
        process, port = pymap_server.start_pymap(port, USER, PASSWORD, keywords=keywords)
    except RuntimeError as exc:
        missing(str(exc))
    return PymapServer(port, process)


def stop_pymap(server: PymapServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(5)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="module")
def pymap() -> Iterator[PymapServer]:
    server = start_pymap()
    yield server
    stop_pymap(server)


async def imap_client(port: int) -> aioimaplib.IMAP4:
    """The tests' own connection (the MTA delivering, a look at the folder). Its timeout
    bounds a hang, nothing measured: at a load of 10 on two cores pymap took over 5 s
    to answer a LOGIN, and three tests failed in their setup (session 26)."""
    client = aioimaplib.IMAP4("127.0.0.1", port, timeout=30)
    await client.wait_hello_from_server()
    response = await client.login(USER, PASSWORD)
    assert response.result == "OK", response
    return client


async def create_folder(port: int) -> str:
    """A fresh folder for one test."""
    name = f"T{os.getpid()}x{next(_folders)}"
    client = await imap_client(port)
    try:
        response = await client.create(name)
        assert response.result == "OK", response
    finally:
        await client.logout()
    return name


async def append(
    port: int, folder: str, raw: bytes | EmailMessage, arrived: datetime | None = None
) -> None:
    """Deliver a message the way an MTA would: APPEND from a second connection;
    ``arrived``: its arrival date at the server (INTERNALDATE), else now."""
    data = raw.as_bytes() if isinstance(raw, EmailMessage) else raw
    client = await imap_client(port)
    try:
        response = await client.append(data, mailbox=folder, date=arrived)
        assert response.result == "OK", response
    finally:
        await client.logout()


async def folder_state(port: int, folder: str) -> dict[int, bytes]:
    """UID -> FLAGS line of every message in ``folder``."""
    client = await imap_client(port)
    try:
        await client.select(folder)
        response = await client.uid("fetch", "1:*", "(UID FLAGS)")
        out: dict[int, bytes] = {}
        for line in response.lines:
            match = re.match(rb"^\d+ FETCH .*UID (\d+)", bytes(line))
            if match:
                out[int(match.group(1))] = bytes(line)
        return out
    finally:
        await client.logout()


# -- SMTP ----------------------------------------------------------------------------
class Capture:
    """aiosmtpd handler keeping every accepted message."""

    def __init__(self) -> None:
        self.messages: list[tuple[Envelope, EmailMessage]] = []
        self.received = asyncio.Condition()
        self.reject_rcpt: dict[str, str] = {}  # address -> SMTP reply
        self.rejected: list[str] = []  # the addresses refused by reject_rcpt, each time
        self.reject_mail: str | None = None  # the answer to every MAIL FROM, if set
        # answers to the next DATA commands instead of taking the mail ("451 4.7.1 ...")
        self.data_answers: list[str] = []
        # the next N mails are taken, then the connection dropped before the answer
        self.hang_up_after_data = 0

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if self.reject_mail:
            return self.reject_mail
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if address.lower() in self.reject_rcpt:
            self.rejected.append(address.lower())
            return self.reject_rcpt[address.lower()]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.data_answers:
            return self.data_answers.pop(0)
        content = envelope.original_content or b""
        msg = message_from_bytes(content, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        async with self.received:
            self.messages.append((envelope, msg))
            self.received.notify_all()
        if self.hang_up_after_data:
            self.hang_up_after_data -= 1
            assert server.transport is not None
            server.transport.abort()  # taken, and the "250" never reaches the sender
        return "250 Message accepted"

    async def wait_for(self, count: int, timeout: float = 30.0) -> list[EmailMessage]:
        async with self.received:
            await asyncio.wait_for(
                self.received.wait_for(lambda: len(self.messages) >= count), timeout
            )
        return [m for _, m in self.messages]


def _authenticator(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
) -> AuthResult:
    if isinstance(auth_data, LoginPassword) and (
        auth_data.login.decode() == USER and auth_data.password.decode() == PASSWORD
    ):
        return AuthResult(success=True)
    return AuthResult(success=False, handled=False)


@dataclass
class SmtpServer:
    capture: Capture
    port: int = 0
    server: asyncio.AbstractServer | None = None
    stopped: list[bool] = field(default_factory=list)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: SMTP(
                self.capture,
                hostname="localhost",
                authenticator=_authenticator,
                auth_require_tls=False,
            ),
            "127.0.0.1",
            self.port,
            reuse_address=True,
        )
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None


@pytest.fixture
async def smtp() -> AsyncIterator[SmtpServer]:
    server = SmtpServer(Capture())
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A 127.0.0.1 port that refuses connections for the whole test: bound, never
    listening (Linux refuses a connection to it). Until session 41 such tests took
    :func:`free_port`, closed before use, so another test's or program's server could
    take the port meanwhile and answer the test's client."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


# -- a fake core ---------------------------------------------------------------------
class FakeHost:
    """A ChannelHost recording deliveries, with cursors in memory."""

    def __init__(self) -> None:
        self.delivered: list[InboundMessage] = []
        self.cursors: dict[tuple[str, str], str] = {}
        self.refs: dict[str, str] = {}
        self.alerts: list[tuple[str, str, str | None]] = []  # (channel, key, problem)
        self.told: list[str] = []  # what tell_owner said
        self.reachable_again: list[str] = []  # channels that said they reach their server
        self.fail_next = 0
        self.refused = 0
        self.arrived = asyncio.Condition()

    async def deliver(self, message: InboundMessage) -> None:
        if self.fail_next:
            self.fail_next -= 1
            self.refused += 1
            raise DeliveryError("simulated storage failure")
        async with self.arrived:
            self.delivered.append(message)
            self.arrived.notify_all()

    def renumber(self, folder: str) -> None:
        """As if the server renumbered ``folder`` since: the stored UIDVALIDITY and UID
        are meaningless."""
        self.cursors[("email", f"{folder}:uidvalidity")] = "1"
        self.cursors[("email", f"{folder}:last_uid")] = "99999"

    async def get_cursor(self, channel: str, key: str) -> str | None:
        return self.cursors.get((channel, key))

    async def set_cursor(self, channel: str, key: str, value: str) -> None:
        async with self.arrived:
            self.cursors[(channel, key)] = value
            self.arrived.notify_all()

    async def wait_cursor(
        self, key: str, until: Callable[[str | None], bool], timeout: float = 30.0
    ) -> str | None:
        """The e-mail cursor ``key`` once ``until`` holds for its value."""
        async with self.arrived:
            await asyncio.wait_for(
                self.arrived.wait_for(lambda: until(self.cursors.get(("email", key)))), timeout
            )
        return self.cursors.get(("email", key))

    async def reachable(self, channel: str) -> None:
        self.reachable_again.append(channel)

    async def record_message_ref(self, channel: str, ref: str, conversation_id: str) -> None:
        self.refs[ref] = conversation_id

    async def alert_owner(self, channel: str, key: str, problem: str | None) -> None:
        async with self.arrived:
            self.alerts.append((channel, key, problem))
            self.arrived.notify_all()

    async def tell_owner(self, channel: str, text: str) -> None:
        async with self.arrived:
            self.told.append(text)
            self.arrived.notify_all()

    async def wait_alerts(self, count: int, timeout: float = 60.0) -> list[str | None]:
        """The problems reported (None: solved), once there are ``count``."""
        async with self.arrived:
            await asyncio.wait_for(
                self.arrived.wait_for(lambda: len(self.alerts) >= count), timeout
            )
        return [problem for _, _, problem in self.alerts]

    async def wait_for(self, count: int, timeout: float = 30.0) -> list[InboundMessage]:
        async with self.arrived:
            await asyncio.wait_for(
                self.arrived.wait_for(lambda: len(self.delivered) >= count), timeout
            )
        return list(self.delivered)


# -- a TCP proxy that can cut connections --------------------------------------------
class Proxy:
    """Forwards 127.0.0.1:port to a target; :meth:`cut` drops every live connection;
    with ``hold`` set, what the client sends is swallowed (a command that never gets its
    answer); with ``rate`` (bytes per second), the server's answers trickle (a slow link);
    a client command containing ``drop_on`` ends the connection (as Dovecot hangs up on a
    FETCH of a message it cannot read); ``rewrite`` edits what the server says (a server
    without a capability); ``answer`` may answer a client command itself, unforwarded
    (a server's refusal the real one never sends); ``client_said`` is everything the
    clients sent; with ``refuse`` set, a new connection is closed at once (the server
    unreachable for a while)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.hold = False
        self.refuse = False
        self.rate: float | None = None
        self.drop_on: bytes | None = None
        self.rewrite: Callable[[bytes], bytes] | None = None
        self.answer: Callable[[bytes], bytes | None] | None = None
        self.client_said = bytearray()
        self.port = 0
        self.connections = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, tls: ssl.SSLContext | None = None) -> None:
        """Listen; with ``tls``, terminate TLS here (implicit TLS in front of a plain server)."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=tls)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            writer.transport.abort()
            return
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if dst is up_writer:
                        self.client_said += data
                    elif self.rewrite is not None:
                        data = self.rewrite(data)
                    if self.hold and dst is up_writer:
                        continue
                    if self.answer and dst is up_writer and (ours := self.answer(data)):
                        writer.write(ours)
                        await writer.drain()
                        continue
                    if self.drop_on and dst is up_writer and self.drop_on in data:
                        writer.transport.abort()
                        up_writer.transport.abort()
                        break
                    if self.rate and dst is writer:
                        for at in range(0, len(data), 4096):
                            dst.write(data[at : at + 4096])
                            await dst.drain()
                            await asyncio.sleep(4096 / self.rate)
                        continue
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        for task in (
            asyncio.create_task(pipe(reader, up_writer)),
            asyncio.create_task(pipe(up_reader, writer)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def cut(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()


@pytest.fixture
async def stacks() -> AsyncIterator[list[Stack]]:
    """The end-to-end stacks a test opened (:mod:`tests.channels.email.stack`), closed
    after it."""
    # imported here: the stack module imports this one
    from tests.channels.email.stack import close_stack

    opened: list[Stack] = []
    yield opened
    for stack in opened:
        await close_stack(stack)


@pytest.fixture
async def channels() -> AsyncIterator[list[EmailChannel]]:
    """The channels a test started (``test_adapter.start``), stopped after it."""
    started: list[EmailChannel] = []
    yield started
    for channel in started:
        await channel.stop()


# -- TLS: a self-signed certificate, SMTP servers of STARTTLS and of implicit TLS ------
@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        missing("openssl is needed to make a test certificate")
    root = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(root / "key.pem"),
            "-out",
            str(root / "cert.pem"),
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return root / "cert.pem", root / "key.pem"


@pytest.fixture
async def tls_smtp(cert: tuple[Path, Path]) -> AsyncIterator[tuple[Capture, int, int]]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert[0]), str(cert[1]))
    capture = Capture()
    loop = asyncio.get_running_loop()
    starttls = await loop.create_server(
        lambda: SMTP(
            capture,
            hostname="localhost",
            authenticator=_authenticator,
            tls_context=context,
            require_starttls=True,
        ),
        "127.0.0.1",
        0,
    )
    implicit = await loop.create_server(
        # aiosmtpd does not see the implicit TLS layer: allow AUTH explicitly.
        lambda: SMTP(
            capture, hostname="localhost", authenticator=_authenticator, auth_require_tls=False
        ),
        "127.0.0.1",
        0,
        ssl=context,
    )
    yield (
        capture,
        int(starttls.sockets[0].getsockname()[1]),
        int(implicit.sockets[0].getsockname()[1]),
    )
    for server in (starttls, implicit):
        server.close()
        await server.wait_closed()
