"""TLS: IMAP STARTTLS against pymap with a certificate, SMTP STARTTLS and implicit TLS
against aiosmtpd; certificates are verified (a CA file makes a self-signed one trusted)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.bench import pymap_server
from bot.channel import Misconfigured
from bot.events import OutboundMessage
from channels.email.adapter import EmailChannel
from tests.channels.email.conftest import (
    PASSWORD,
    USER,
    Capture,
    FakeHost,
    Proxy,
    PymapServer,
    SmtpServer,
    append,
    create_folder,
    pymap_command,
    stop_pymap,
)
from tests.channels.email.helpers import mail_id, missing, text_of
from tests.channels.email.test_adapter import OWNER, mail, make_config


@pytest.fixture(scope="module")
def tls_pymap(cert: tuple[Path, Path]) -> Iterator[PymapServer]:
    if pymap_command() is None:
        missing("pymap is not installed")
    process, port = pymap_server.start_pymap(None, USER, PASSWORD, tls=cert)
    server = PymapServer(port, process)
    yield server
    stop_pymap(server)


async def _append_tls(port: int, cafile: Path) -> None:
    """APPEND over STARTTLS, like a mail server delivering (pymap refuses plain LOGIN)."""
    import aioimaplib

    from channels.email.imap import ImapSession

    config = make_config(
        Path("."), port, 1, "INBOX", imap={"security": "starttls", "tls_ca_file": str(cafile)}
    )
    session = ImapSession(config.channels.email.imap, USER, PASSWORD, 5)
    await session.connect()
    client: aioimaplib.IMAP4 = session.client
    response = await client.append(mail(1).as_bytes(), mailbox="INBOX")
    assert response.result == "OK"
    await session.close()


async def test_imap_starttls_verified(
    tls_pymap: PymapServer, cert: tuple[Path, Path], tmp_path: Path
) -> None:
    await _append_tls(tls_pymap.port, cert[0])
    host = FakeHost()
    trusted = EmailChannel(
        make_config(
            tmp_path,
            tls_pymap.port,
            1,
            "INBOX",
            imap={"security": "starttls", "tls_ca_file": str(cert[0])},
        )
    )
    try:
        await trusted.start(host)
        [got] = await host.wait_for(1)
        assert mail_id(got.message_id) == "<m1@example.org>"
    finally:
        await trusted.stop()
    # Without the CA the self-signed certificate is refused: no login, nothing read.
    untrusted = EmailChannel(
        make_config(
            tmp_path, tls_pymap.port, 1, "INBOX", imap={"security": "starttls", "timeout": 1}
        )
    )
    other = FakeHost()
    try:
        await untrusted.start(other)
        assert not untrusted.ready.is_set()
        assert other.delivered == []
        # ... and, at the third attempt, the owner is told (session 24: only logged)
        problem, *_ = await other.wait_alerts(1)
        assert problem is not None and "certificate is not trusted" in problem
        assert "tls_ca_file" in problem
    finally:
        await untrusted.stop()


async def test_smtp_starttls_and_ssl(
    tls_smtp: tuple[Capture, int, int], cert: tuple[Path, Path], tmp_path: Path
) -> None:
    capture, starttls_port, ssl_port = tls_smtp
    for security, port in (("starttls", starttls_port), ("ssl", ssl_port)):
        config = make_config(tmp_path, 1, port, "INBOX")
        config.channels.email.smtp.security = security  # type: ignore[assignment]
        config.channels.email.smtp.tls_ca_file = str(cert[0])
        channel = EmailChannel(config)
        await channel.send(OutboundMessage(channel="email", chat_id=OWNER, text=security))
    sent = await capture.wait_for(2)
    assert [text_of(m).strip() for m in sent] == ["starttls", "ssl"]
    # Unverifiable certificate: a (retryable) failure, never a silent plain-text send.
    config = make_config(tmp_path, 1, ssl_port, "INBOX")
    config.channels.email.smtp.security = "ssl"
    with pytest.raises(Exception, match=r"(?i)certificate"):
        await EmailChannel(config).send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))


@pytest.mark.parametrize(
    ("security", "trouble"),
    [("ssl", r"speaks plain text, not TLS"), ("starttls", r"does not offer STARTTLS")],
)
async def test_smtp_tls_settings_that_do_not_fit_the_server_are_misconfigured(
    smtp: SmtpServer, tmp_path: Path, security: str, trouble: str
) -> None:
    # Regression: TLS spoken to a plain server, or STARTTLS it does not offer, failed as
    # an outage would, and the outbox retried it ~4 hours before the owner was told. It
    # will not fix itself: Misconfigured has the owner told after a few attempts.
    config = make_config(tmp_path, 1, smtp.port, "INBOX")
    config.channels.email.smtp.security = security  # type: ignore[assignment]
    with pytest.raises(Misconfigured, match=trouble):
        await EmailChannel(config).send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))
    assert smtp.capture.messages == []


async def test_an_untrusted_certificate_is_misconfigured(
    tls_smtp: tuple[Capture, int, int], tmp_path: Path
) -> None:
    _, _, ssl_port = tls_smtp
    config = make_config(tmp_path, 1, ssl_port, "INBOX")
    config.channels.email.smtp.security = "ssl"
    with pytest.raises(Misconfigured, match="certificate is not trusted"):
        await EmailChannel(config).send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))


async def test_imap_implicit_tls(
    pymap: PymapServer, cert: tuple[Path, Path], tmp_path: Path
) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert[0]), str(cert[1]))
    proxy = Proxy(pymap.port)
    await proxy.start(tls=context)  # port 993 style: TLS from the first byte
    folder = await create_folder(pymap.port)
    await append(pymap.port, folder, mail(5))
    host = FakeHost()
    channel = EmailChannel(
        make_config(
            tmp_path, proxy.port, 1, folder, imap={"security": "ssl", "tls_ca_file": str(cert[0])}
        )
    )
    try:
        await channel.start(host)
        [got] = await host.wait_for(1)
        assert mail_id(got.message_id) == "<m5@example.org>"
    finally:
        await channel.stop()
        await proxy.stop()


@pytest.mark.parametrize("broken", ["deleted", "not a certificate"])
async def test_a_ca_file_that_cannot_be_loaded_names_its_key_and_file(
    cert: tuple[Path, Path],
    tmp_path: Path,
    refused_port: int,
    channels: list[EmailChannel],
    broken: str,
) -> None:
    # Regression (session 41): a tls_ca_file deleted after the start (check-config and
    # the start refuse a missing one) was logged "IMAP session ended (FileNotFoundError
    # ...); reconnecting" for good, naming neither key nor file, and SMTP retried every
    # reply with the same FileNotFoundError. A file that holds no certificate raised an
    # SSLError, read as a handshake that met a plain server (a port probe).
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert[0].read_bytes())
    tls = {"security": "ssl", "tls_ca_file": str(ca)}
    imap = {**tls, "timeout": 0.5}  # the start waits that long for the first login
    config = make_config(tmp_path, refused_port, 1, "INBOX", imap=imap, smtp=tls)
    if broken == "deleted":
        ca.unlink()
    else:
        ca.write_text("not a certificate\n")
    host = FakeHost()
    channel = EmailChannel(config)
    channels.append(channel)
    await channel.start(host)
    problem, *_ = await host.wait_alerts(1, timeout=10)
    assert problem is not None
    assert "channels.email.imap.tls_ca_file" in problem and str(ca) in problem
    assert "speaks" not in problem  # no port probe: no connection was made
    with pytest.raises(Misconfigured) as refused:
        await channel.send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))
    assert "channels.email.smtp.tls_ca_file" in str(refused.value)
    assert str(ca) in str(refused.value)
