"""What a mail server says on its own, when it did not answer as the settings expect.

``security: none`` (or ``starttls``) pointed at a port of implicit TLS (IMAP 993, SMTP
465) waits for a greeting the server never sends: it waits for our TLS handshake. The
client saw a timeout, taken for an outage, and the owner was never told. ``security:
ssl`` at a plain port (143, 587, 25) fails its handshake on the server's plain greeting.
Asked afresh, once the attempt has failed, the server tells which it is: it completes a
TLS handshake (any certificate: only the protocol matters here), or it greets in plain
text (and the greeting says which protocol), or it says nothing at all.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger("my_agent.email")

# How long each step of the probe waits; a server greets, or answers a TLS handshake,
# at once: the full timeout was already spent by the attempt that failed.
PROBE_WAIT = 10.0


@dataclass(frozen=True)
class Heard:
    """What the port said: ``tls`` (it completed a TLS handshake), ``plain`` (it spoke
    first in plain text, ``line`` its first line), or ``silent`` (nothing at all)."""

    kind: Literal["tls", "plain", "silent"]
    line: str = ""


def _any_certificate() -> ssl.SSLContext:
    # Only "does it speak TLS" is asked: the certificate is checked by the real attempt.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _connect(
    host: str, port: int, wait: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.wait_for(asyncio.open_connection(host, port), wait)
    except (OSError, TimeoutError):
        return None  # not reachable (now): an outage, nothing to learn here


def _close(writer: asyncio.StreamWriter) -> None:
    # At once, without a goodbye: the probe has heard what it came for.
    writer.transport.abort()


async def _handshake(host: str, port: int, wait: float) -> str | None:
    """``tls`` (a TLS handshake completed), ``other`` (the server answered it with
    something else, or closed), ``silent`` (no answer within ``wait``); None: no
    connection."""
    try:
        # TLS from the first byte: a plain server's greeting must reach the handshake,
        # not a stream's buffer (where a start_tls after the connection would leave it).
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host,
                port,
                ssl=_any_certificate(),
                server_hostname=host,
                ssl_handshake_timeout=wait,
            ),
            2 * wait,  # the connection, then the handshake's own bound
        )
    except ssl.SSLError:
        return "other"
    except ConnectionAbortedError:  # asyncio's "SSL handshake is taking longer than"
        return "silent"
    except (OSError, TimeoutError):
        return None  # not reachable (now): an outage, nothing to learn here
    _close(writer)
    return "tls"


async def _first_line(host: str, port: int, wait: float) -> str | None:
    """The first line the server sends unasked ("" when it sends nothing); None: no
    connection."""
    connected = await _connect(host, port, wait)
    if connected is None:
        return None
    reader, writer = connected
    try:
        line = await asyncio.wait_for(reader.readline(), wait)
    except (OSError, TimeoutError, ValueError):
        line = b""
    finally:
        _close(writer)
    return line[:200].decode("ascii", "replace").strip()


async def listen(host: str, port: int, wait: float = PROBE_WAIT) -> Heard | None:
    """What ``host:port`` speaks: a TLS handshake first, then, when it answered that
    with something else, the first line it sends unasked; None when it cannot be
    reached at all (an outage is no setting to fix).

    TLS is tried first: a server of implicit TLS answers the handshake at once, and a
    plain one sends its greeting, which ends the handshake at once too; only a silent
    server costs ``wait`` there."""
    answer = await _handshake(host, port, wait)
    if answer is None:
        return None
    if answer == "tls":
        heard = Heard("tls")
    elif answer == "silent":
        heard = Heard("silent")
    else:
        line = await _first_line(host, port, wait)
        if line is None:
            return None
        heard = Heard("plain", line) if line else Heard("silent")
    log.debug("%s:%d answered the probe: %s", host, port, heard)
    return heard


# Which greeting is whose: an IMAP server greets "* OK" (or PREAUTH, BYE), an SMTP one
# with a 3-digit code ("220 mail.example.com ESMTP").
_GREETS = {"IMAP": ("* OK", "* PREAUTH", "* BYE"), "SMTP": ("220", "421", "554")}
# The usual ports, as the owner is told them.
_PORTS = {"IMAP": "993 with ssl, 143 with starttls", "SMTP": "465 with ssl, 587 with starttls"}


def _shown(line: str) -> str:
    """The server's line as the owner is shown it: printable, short."""
    kept = "".join(c for c in line if c.isprintable())
    return kept if len(kept) <= 60 else kept[:59] + "…"


def mismatch(service: str, security: str, where: str, heard: Heard, waited: float) -> str | None:
    """What the settings of ``service`` ("IMAP" or "SMTP") at ``where`` get wrong, going
    by what the port said when asked afresh; None when that explains nothing (it greets
    as configured now: the failure was an outage)."""
    key = f"channels.email.{service.lower()}"
    if heard.kind == "silent":
        return (
            f"the {service} server at {where} took the connection but said nothing within "
            f"{waited:g}s, neither a greeting nor TLS: check {key}.host and {key}.port "
            f"(another service listens there, or the server hangs)"
        )
    if heard.kind == "tls":
        if security == "ssl":
            return None
        return (
            f"the {service} server at {where} speaks TLS from the first byte (implicit "
            f"TLS) and sends no plain greeting: set {key}.security to ssl (usual ports: "
            f"{_PORTS[service]})"
        )
    other = next(s for s in _GREETS if s != service)
    line = _shown(heard.line)
    if heard.line.startswith(_GREETS[other]):
        return (
            f"at {where} an {other} server answers, not {service} (it greets {line!r}): "
            f"check {key}.port (usual ports: {_PORTS[service]})"
        )
    if not heard.line.startswith(_GREETS[service]):
        return (
            f"at {where} something that is no {service} server answers ({line!r}): "
            f"check {key}.host and {key}.port"
        )
    if security != "ssl":
        return None
    return (
        f"the {service} server at {where} speaks plain text, not TLS (it greets "
        f"{line!r}): set {key}.security to starttls, or {key}.port to its port of "
        f"implicit TLS (usual ports: {_PORTS[service]})"
    )


async def diagnose(service: str, security: str, host: str, port: int, waited: float) -> str | None:
    """Ask ``host:port`` what it speaks (see :func:`listen`) and say what the settings
    get wrong; None for an outage or an answer that explains nothing."""
    heard = await listen(host, port, min(waited, PROBE_WAIT))
    if heard is None:
        return None
    return mismatch(service, security, f"{host}:{port}", heard, waited)
