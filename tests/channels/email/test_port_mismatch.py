"""Security settings that do not fit the port (channels/email/port_probe.py): ``none`` or
``starttls`` at a port of implicit TLS (IMAP 993, SMTP 465), ``ssl`` at a plain port, a
port where another protocol or nothing at all answers. Before session 25 the first timed
out like an outage (retried for ever, the owner never told), and the second was told as
"TLS failed (WRONG_VERSION_NUMBER)", which names no fix. Real servers on 127.0.0.1:
pymap (behind a TLS-terminating proxy for implicit TLS), aiosmtpd, a silent listener."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiosmtpd.smtp import SMTP

from bot.channel import Misconfigured
from bot.events import OutboundMessage
from channels.email.adapter import EmailChannel
from channels.email.port_probe import Heard, mismatch
from tests.channels.email.conftest import (
    Capture,
    FakeHost,
    Proxy,
    PymapServer,
    SmtpServer,
    _authenticator,
    create_folder,
)
from tests.channels.email.test_adapter import OWNER, make_config

# The timeout of the tests against a silent port (seconds): nothing answers there, so
# no answer can be late on a loaded machine; only the waiting is shortened.
SILENCE = 0.3


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A port that takes connections and never says a word (nor answers TLS)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(4096):
            pass

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    for writer in held:
        writer.transport.abort()
    server.close()
    await server.wait_closed()


@pytest.fixture
async def implicit_tls_imap(pymap: PymapServer, cert: tuple[Path, Path]) -> AsyncIterator[Proxy]:
    """pymap behind TLS from the first byte, as on port 993."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert[0]), str(cert[1]))
    proxy = Proxy(pymap.port)
    await proxy.start(tls=context)
    yield proxy
    await proxy.stop()


async def _imap_alert(
    tmp_path: Path, channels: list[EmailChannel], port: int, folder: str, **imap: object
) -> str:
    """What the owner is told about an IMAP channel with these settings."""
    host = FakeHost()
    channel = EmailChannel(make_config(tmp_path, port, 1, folder, imap={"timeout": 2, **imap}))
    channels.append(channel)
    await channel.start(host)
    problem, *later = await host.wait_alerts(1)
    assert set(later) <= {problem}
    assert problem is not None
    assert channel.problems()[0] == problem
    assert not channel.ready.is_set()
    return problem


@pytest.mark.parametrize("security", ["none", "starttls"])
async def test_imap_plain_at_a_port_of_implicit_tls_is_told(
    pymap: PymapServer,
    implicit_tls_imap: Proxy,
    tmp_path: Path,
    channels: list[EmailChannel],
    security: str,
) -> None:
    folder = await create_folder(pymap.port)
    problem = await _imap_alert(
        tmp_path, channels, implicit_tls_imap.port, folder, security=security
    )
    assert "speaks TLS from the first byte" in problem
    assert "set channels.email.imap.security to ssl" in problem
    assert f"127.0.0.1:{implicit_tls_imap.port}" in problem


async def test_imap_ssl_at_a_plain_port_is_told(
    pymap: PymapServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    problem = await _imap_alert(tmp_path, channels, pymap.port, folder, security="ssl")
    assert "speaks plain text, not TLS (it greets '* OK" in problem
    assert "set channels.email.imap.security to starttls" in problem


@pytest.mark.parametrize("security", ["none", "ssl"])
async def test_imap_at_a_silent_port_is_told(
    silent_port: int, tmp_path: Path, channels: list[EmailChannel], security: str
) -> None:
    # Silence is silence however long it is waited for: a short timeout proves the
    # same (three attempts, each waiting it out up to three times, took ~13 s at 2 s).
    problem = await _imap_alert(
        tmp_path, channels, silent_port, "INBOX", security=security, timeout=SILENCE
    )
    assert f"took the connection but said nothing within {SILENCE:g}s" in problem
    assert "check channels.email.imap.host and channels.email.imap.port" in problem


async def test_imap_at_an_smtp_port_is_told(
    smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    problem = await _imap_alert(tmp_path, channels, smtp.port, "INBOX")
    assert "an SMTP server answers, not IMAP (it greets '220 " in problem
    assert "check channels.email.imap.port" in problem


async def _smtp_trouble(tmp_path: Path, port: int, security: str, timeout: float = 2) -> str:
    """The Misconfigured a send raises with these SMTP settings."""
    smtp = {"timeout": timeout, "security": security}
    config = make_config(tmp_path, 1, port, "INBOX", smtp=smtp)
    with pytest.raises(Misconfigured) as raised:
        await EmailChannel(config).send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))
    return str(raised.value)


@pytest.mark.parametrize("security", ["none", "starttls"])
async def test_smtp_plain_at_a_port_of_implicit_tls_is_misconfigured(
    tls_smtp: tuple[Capture, int, int], tmp_path: Path, security: str
) -> None:
    capture, _, implicit_port = tls_smtp
    trouble = await _smtp_trouble(tmp_path, implicit_port, security)
    assert "speaks TLS from the first byte" in trouble
    assert "set channels.email.smtp.security to ssl" in trouble
    assert capture.messages == []


async def test_smtp_ssl_at_a_plain_port_is_misconfigured(smtp: SmtpServer, tmp_path: Path) -> None:
    trouble = await _smtp_trouble(tmp_path, smtp.port, "ssl")
    assert "speaks plain text, not TLS (it greets '220 " in trouble
    assert "set channels.email.smtp.security to starttls" in trouble
    assert smtp.capture.messages == []


async def test_smtp_at_a_silent_port_or_an_imap_port_is_misconfigured(
    silent_port: int, pymap: PymapServer, tmp_path: Path
) -> None:
    trouble = await _smtp_trouble(tmp_path, silent_port, "none", timeout=SILENCE)
    assert f"said nothing within {SILENCE:g}s" in trouble
    assert "channels.email.smtp.port" in trouble
    trouble = await _smtp_trouble(tmp_path, pymap.port, "none")
    assert "an IMAP server answers, not SMTP (it greets '* OK" in trouble


async def test_smtp_with_no_login_over_plain_text_is_told_so(tmp_path: Path) -> None:
    # Regression: aiosmtplib's advice ("Try connecting via TLS (or STARTTLS)") was read
    # as STARTTLS not offered, and the owner told to fix "security: starttls", the very
    # setting that was missing.
    capture = Capture()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(capture, hostname="localhost", authenticator=_authenticator),
        "127.0.0.1",
        0,
    )
    try:
        port = int(server.sockets[0].getsockname()[1])
        trouble = await _smtp_trouble(tmp_path, port, "none")
    finally:
        server.close()
        await server.wait_closed()
    assert "offers no login over a plain connection" in trouble
    assert "set channels.email.smtp.security to starttls" in trouble
    assert "does not offer STARTTLS" not in trouble


async def test_a_closed_smtp_port_is_an_outage(tmp_path: Path, refused_port: int) -> None:
    config = make_config(tmp_path, 1, refused_port, "INBOX", smtp={"timeout": 2})
    with pytest.raises(Exception) as raised:
        await EmailChannel(config).send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))
    assert not isinstance(raised.value, Misconfigured)


async def test_the_refused_port_refuses_and_no_server_can_take_it(refused_port: int) -> None:
    # Regression (session 41): the refusing port was closed before use, free for any
    # server to take meanwhile; it stays bound now, never listening.
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", refused_port)
    with pytest.raises(OSError):
        await asyncio.start_server(lambda r, w: None, "127.0.0.1", refused_port)


def test_what_the_port_said_explains_a_failure_only_when_it_contradicts_the_settings() -> None:
    where = "imap.example.com:993"
    # It speaks what the settings expect: the failure was an outage, not a setting.
    assert mismatch("IMAP", "ssl", where, Heard("tls"), 30) is None
    assert mismatch("IMAP", "starttls", where, Heard("plain", "* OK ready"), 30) is None
    assert mismatch("SMTP", "none", where, Heard("plain", "220 mx ESMTP"), 30) is None
    other = mismatch("IMAP", "none", where, Heard("plain", "SSH-2.0-OpenSSH_9.6\x1b[2J"), 30)
    assert other is not None and "no IMAP server answers ('SSH-2.0-OpenSSH_9.6[2J')" in other
    long = mismatch("SMTP", "ssl", where, Heard("plain", "220 " + "x" * 500), 30)
    assert long is not None and "220 " + "x" * 55 + "…'" in long and "x" * 60 not in long
