"""Connection failures that the settings cause, told apart from outages.

A server that is down or a link that drops fixes itself: the channel retries. A login
the server refuses, TLS spoken to a server that speaks plain text on that port (or the
reverse: plain text at a port of implicit TLS, which waits for a handshake and says
nothing; :mod:`channels.email.port_probe` asks the port what it speaks), a port where
nothing or another protocol answers, STARTTLS the server does not offer, a certificate
not trusted: these do not, and the owner must be told. SMTP raises
:class:`bot.channel.Misconfigured` for them (:mod:`channels.email.smtp`); the IMAP side,
which has no outbox to tell the owner, counts them here (:class:`ImapMisconfiguration`)
and reports them through
:meth:`bot.channel.ChannelHost.alert_owner`.
"""

from __future__ import annotations

import logging
import ssl

from bot.channel import ChannelHost
from bot.config.channels import ImapConfig
from bot.config.problems import ca_file_problem
from bot.outbox import TELL_AFTER
from channels.email.imap_wire import FolderRefused, LoginRefused, NoGreeting, StarttlsRefused
from channels.email.port_probe import diagnose

log = logging.getLogger("my_agent.email")

# The key of the IMAP problem with the host (bot.channel.ChannelHost.alert_owner).
IMAP_ALERT = "imap"


class CaFileUnreadable(Exception):
    """``tls_ca_file`` could not be loaded when a connection was made (deleted or made
    unreadable after the start; check-config and the start refuse it before)."""


def tls_context(cafile: str | None, key: str) -> ssl.SSLContext:
    """System CAs, plus ``cafile`` when configured; certificates are verified.

    Before session 41 a CA file that could not be read raised FileNotFoundError (an
    outage to the IMAP loop, logged at every reconnect naming neither the key nor the
    file; for SMTP a retry of every reply) and one that held no certificate an SSLError
    (read as a TLS handshake failure): now :class:`CaFileUnreadable` names ``key`` (the
    dotted config key) and the file."""
    try:
        return ssl.create_default_context(cafile=cafile)
    except OSError as exc:  # ssl.SSLError too: a file that holds no certificate
        problem = ca_file_problem(cafile) if cafile else None
        raise CaFileUnreadable(f"{key}: {problem or f'{cafile}: {exc}'}") from exc


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it (client libraries wrap the errors they meet)."""
    seen: list[BaseException] = []
    at: BaseException | None = exc
    while at is not None and len(seen) < 5:  # not followed around a loop
        seen.append(at)
        at = at.__cause__ or at.__context__
    return seen


def handshake_failed(exc: BaseException) -> bool:
    """True when ``exc`` is a TLS handshake that failed for another reason than the
    certificate: the server answered with something that is no TLS (a plain greeting),
    which :func:`channels.email.port_probe.diagnose` can name."""
    return any(
        isinstance(e, ssl.SSLError) and not isinstance(e, ssl.SSLCertVerificationError)
        for e in _chain(exc)
    )


def tls_failure(exc: BaseException, security: str) -> str | None:
    """What is wrong, when ``exc`` (or what caused it) is a TLS failure; else None.

    Client libraries wrap the :class:`ssl.SSLError` of a handshake with a plain server
    ("wrong version number") or of an untrusted certificate in their own errors."""
    for seen in _chain(exc):
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"the server's TLS certificate is not trusted: {seen.verify_message}"
        if isinstance(seen, ssl.SSLError):
            return f"TLS failed with security: {security} ({seen.reason or seen})"
    return None


def imap_trouble(exc: BaseException, cfg: ImapConfig) -> str | None:
    """What is wrong with the IMAP settings, when ``exc`` (a failed connection attempt)
    says so (also a folder the server will not select); None for an outage (refused
    connection, timeout, a dropped link) and for a login refused for now
    (``[UNAVAILABLE]``)."""
    where = f"{cfg.host}:{cfg.port}"
    if isinstance(exc, CaFileUnreadable):
        return f"IMAP: {exc}"
    if tls := tls_failure(exc, cfg.security):
        return f"IMAP: {tls} ({where}; channels.email.imap.security, tls_ca_file)"
    if isinstance(exc, StarttlsRefused):
        return f"the IMAP server does not offer STARTTLS ({where}; channels.email.imap.security)"
    if isinstance(exc, FolderRefused):
        return f"{exc} ({where}): check channels.email.imap.folder"
    if isinstance(exc, LoginRefused):
        if exc.temporary:
            return None
        if exc.needs_tls:
            return (
                f"the IMAP server refuses to log in without TLS ({exc.answer}; {where}): set "
                "channels.email.imap.security to starttls or ssl"
            )
        return (
            f"the IMAP server refused the login ({exc.answer}; {where}): check "
            "channels.email.imap.username and EMAIL_PASSWORD"
        )
    return None


class ImapMisconfiguration:
    """Connection attempts failing for a reason of the settings, in a row: from the
    :data:`~bot.outbox.TELL_AFTER`-th on the owner is told (a single refusal may be a
    server's hiccup; the host keeps the owner from being told at every attempt), and
    once a connection succeeds it is cleared. An outage between two such failures
    neither counts nor resets the count."""

    def __init__(self, cfg: ImapConfig) -> None:
        self.cfg = cfg
        self.failures = 0
        self.problem: str | None = None  # the line told, while it lasts
        self._kept = True  # a line the last run may have kept: cleared at the first success

    async def failed(self, host: ChannelHost, exc: BaseException) -> None:
        """A connection attempt failed with ``exc``."""
        trouble = await self._port_mismatch(exc) or imap_trouble(exc, self.cfg)
        if trouble is None:
            return
        self.failures += 1
        if self.failures < TELL_AFTER:
            return
        if self.problem is None:
            log.error("%s", trouble)
        self.problem = trouble
        self._kept = True
        await host.alert_owner("email", IMAP_ALERT, trouble)

    async def _port_mismatch(self, exc: BaseException) -> str | None:
        """When the server sent no greeting (``security: none`` at a port of implicit
        TLS: it waits for our handshake, and the attempt timed out as an outage would)
        or a TLS handshake met something else (``ssl`` at a plain port): what the port
        speaks, asked afresh, and what to set; None for an outage."""
        cfg = self.cfg
        if isinstance(exc, CaFileUnreadable):  # no connection was tried (its SSLError)
            return None
        if isinstance(exc, NoGreeting) or (cfg.security == "ssl" and handshake_failed(exc)):
            return await diagnose("IMAP", cfg.security, cfg.host, cfg.port, cfg.timeout)
        return None

    async def connected(self, host: ChannelHost) -> None:
        """A connection attempt succeeded (logged in, folder selected)."""
        self.failures = 0
        if self.problem is not None:
            log.info("IMAP works again: %s", self.problem)
        self.problem = None
        if self._kept:
            self._kept = False
            await host.alert_owner("email", IMAP_ALERT, None)
