"""IMAP on the wire: how a folder name is sent, what SELECT and FETCH answers say, and
the refusals the session raises (a login, STARTTLS, a folder).

aioimaplib sends a command's arguments as they are and hands back the response lines
raw; :class:`channels.email.imap.ImapSession` encodes and decodes through these.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence

import aioimaplib

_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]")
_UIDNEXT = re.compile(rb"\[UIDNEXT (\d+)\]")
_PERMANENTFLAGS = re.compile(rb"\[PERMANENTFLAGS \(([^)]*)\)\]", re.IGNORECASE)
_FETCH_UID = re.compile(rb"UID (\d+)")
_LITERAL = re.compile(rb"\{(\d+)\}$")
# What is quoted of a server's refusal (its text is the server's to choose).
MAX_SAID = 200


def mailbox_name(folder: str) -> str:
    """``folder`` as an IMAP mailbox argument: modified UTF-7 (RFC 3501 section 5.1.3)
    for non-ASCII names, always quoted. aioimaplib sends arguments as they are, so
    ``Bot Inbox`` went out as two words and ``Erledigt/Gelöscht`` as raw UTF-8."""
    out: list[str] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            data = "".join(pending).encode("utf-16-be")
            out.append("&" + base64.b64encode(data).decode().rstrip("=").replace("/", ",") + "-")
            pending.clear()

    for ch in folder:
        if " " <= ch <= "~":
            flush()
            out.append("&-" if ch == "&" else ch)
        else:
            pending.append(ch)
    flush()
    encoded = "".join(out).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{encoded}"'


def selected(lines: Sequence[bytes | bytearray]) -> tuple[int | None, int]:
    """UIDVALIDITY (None when missing) and UIDNEXT (0 when the server did not say) of a
    SELECT response."""
    text = b"\n".join(bytes(line) for line in lines)
    validity = _UIDVALIDITY.search(text)
    uidnext = _UIDNEXT.search(text)
    return (
        int(validity.group(1)) if validity else None,
        int(uidnext.group(1)) if uidnext else 0,
    )


def permanent_flags(lines: Sequence[bytes | bytearray]) -> frozenset[str] | None:
    """The flags a SELECT response says are kept for good, ``\\*`` when the client may
    create keywords; None when it did not say."""
    text = b"\n".join(bytes(line) for line in lines)
    found = _PERMANENTFLAGS.search(text)
    if found is None:
        return None
    return frozenset(found.group(1).decode("ascii", "replace").split())


def fetched_literal(lines: Sequence[bytes | bytearray], uid: int) -> bytes | None:
    """The message a ``UID FETCH uid (UID BODY.PEEK[])`` response carries (aioimaplib
    gives the literal as a bytearray line after its FETCH line), or None. The UID may
    follow the literal; a FETCH for another UID (an unsolicited one) is not it."""
    for idx, line in enumerate(lines):
        if isinstance(line, bytearray):
            continue
        if b"FETCH" in line and _LITERAL.search(line) and idx + 1 < len(lines):
            got = _FETCH_UID.search(line) or (
                _FETCH_UID.search(bytes(lines[idx + 2])) if idx + 2 < len(lines) else None
            )
            if got is None or int(got.group(1)) == uid:
                return bytes(lines[idx + 1])
    return None


class ImapError(Exception):
    """The IMAP server refused a command or the connection is gone."""


class LoginRefused(ImapError):
    """The server refused LOGIN. ``answer``: its words; ``temporary`` when it says so
    (RFC 5530 ``[UNAVAILABLE]``: a server in maintenance); ``needs_tls`` when it takes
    no password over a plain connection (``[PRIVACYREQUIRED]``, ``LOGINDISABLED``)."""

    def __init__(self, answer: str, *, needs_tls: bool = False) -> None:
        super().__init__(f"LOGIN failed: {answer}")
        self.answer = answer
        self.temporary = "[UNAVAILABLE]" in answer.upper()
        self.needs_tls = needs_tls or "[PRIVACYREQUIRED]" in answer.upper()


class StarttlsRefused(ImapError):
    """The server refused STARTTLS (``security: starttls`` with a server that has none)."""


class NoGreeting(ImapError, TimeoutError):
    """No IMAP greeting (nor, with ``security: ssl``, a TLS handshake) within the timeout:
    a server down or hung, or one that speaks TLS where plain text was expected (what
    :func:`channels.email.port_probe.diagnose` tells apart)."""


class CommandRefused(ImapError):
    """The server answered a command NO or BAD: the connection is fine, the command is
    not (an account over its quota refuses MOVE and COPY)."""

    def __init__(self, message: str, answer: str) -> None:
        super().__init__(message)
        self.answer = answer


class FolderRefused(ImapError):
    """The server will not SELECT the folder (it does not exist, or is not ours)."""


def said(response: aioimaplib.Response) -> str:
    """The server's words in a tagged answer (``[AUTHENTICATIONFAILED] Invalid ...``),
    on one line and at most :data:`MAX_SAID` characters: they go into the owner's alert
    and the status line."""
    text = b" ".join(bytes(line) for line in response.lines[-1:]).decode("utf-8", "replace")
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text if len(text) <= MAX_SAID else text[: MAX_SAID - 1] + "…"


def checked(response: aioimaplib.Response, what: str) -> aioimaplib.Response:
    """``response`` when the server said OK; :class:`ImapError` naming ``what`` else."""
    if response.result != "OK":
        raise CommandRefused(
            f"{what} failed: {response.result} {response.lines[-1:]!r}",
            f"{response.result} {said(response)}",
        )
    return response


def expunged(response: aioimaplib.Response, what: str) -> bool:
    """True when ``what`` was refused because another client expunged its mail
    meanwhile: ``NO [EXPUNGEISSUED]`` (RFC 5530), which Dovecot and Cyrus send for a
    FETCH, STORE, COPY or MOVE of a mail another session deleted after our SEARCH. The
    mail is gone, the connection fine: taken for a broken session, it made the channel
    reconnect and fetch again, five times, before passing the mail over. Any other
    refusal raises as :func:`checked` does."""
    if response.result == "NO" and b"[EXPUNGEISSUED]" in b" ".join(
        bytes(line).upper() for line in response.lines[-1:]
    ):
        return True
    checked(response, what)
    return False
