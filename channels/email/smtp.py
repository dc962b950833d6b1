"""Sending over SMTP with aiosmtplib, sorting failures into "retry later" and "never".

The core's outbox retries whatever raises; :class:`bot.channel.PermanentSendError` stops
the retries. Only a 5xx answer about the recipients or the message itself, or non-ASCII
addresses the server cannot take (no SMTPUTF8) for every recipient, is permanent:
connection problems, timeouts, 4xx answers and authentication failures (a wrong password
is fixed by the owner, after which the queued replies should still go out) are retried.
A recipient a server without SMTPUTF8 cannot address is left out, with a warning, and the
mail goes to the others (an accented domain is written in its ASCII form, IDNA). So is a
recipient the server refuses with 5xx while it takes the others; one it refuses with
4xx is :class:`Deferred`: the mail went to the others, and is owed to it. A TLS failure
(``ssl`` to a server that speaks plain SMTP on that port, a certificate not trusted) or
STARTTLS not offered, and a login the server refuses for good (5xx: a wrong password),
are :class:`bot.channel.Misconfigured`: retried (the owner fixes it, and the queued
replies still go), but the owner is told after the first few attempts (it will not fix
itself).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from email.message import EmailMessage

import aiosmtplib

from bot.channel import Misconfigured, PermanentSendError, Unreachable
from bot.config.channels import SmtpConfig
from channels.email.id_folding import MAIL_POLICY
from channels.email.misconfig import (
    CaFileUnreadable,
    handshake_failed,
    tls_context,
    tls_failure,
)
from channels.email.port_probe import diagnose
from channels.email.smtputf8 import ascii_address, ascii_refs, readdressed, utf8_refs

log = logging.getLogger("my_agent.email.smtp")

# Why a recipient was left out, as the owner is told it.
NO_SMTPUTF8 = (
    "the mail server does not take non-ASCII addresses (no SMTPUTF8), and this one has "
    "no ASCII form"
)


@dataclass
class Sent:
    """What one send did: who the server took, who was left out for good (address ->
    why, as the owner is told it) and who it refused for now (address -> its answer)."""

    to: list[str]
    left_out: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)


class Deferred(Exception):
    """The server took the mail for some recipients and refused others for now (4xx):
    retried later for those alone (the channel remembers who has it)."""

    def __init__(self, sent: Sent) -> None:
        self.sent = sent
        answers = "; ".join(f"{a} {why}" for a, why in sent.deferred.items())
        super().__init__(f"recipients refused for now, to be retried: {answers}")


class SmtpSender:
    """Sends one message per connection (replies are rare; no pool to go stale)."""

    def __init__(
        self, config: SmtpConfig, username: str | None, password: str | None, timeout: float
    ) -> None:
        self._config = config
        self._username = username
        self._password = password
        self._timeout = timeout

    async def send(self, message: EmailMessage, sender: str, recipients: list[str]) -> Sent:
        """Deliver ``message``; raise to retry, :class:`PermanentSendError` when pointless.
        Returns who has it, and who was left out and why (:data:`NO_SMTPUTF8`, a 5xx
        refusal); :class:`Deferred` when some have it and others are refused for now."""
        try:
            refused = await self._send(message, sender, recipients)
            sent = Sent(recipients)
        except aiosmtplib.SMTPNotSupported as exc:
            if not sender.isascii():
                raise  # our own address: the owner's configuration to fix, retried
            ascii_form = {r: ascii_address(r) for r in recipients}
            reachable = [a for a in ascii_form.values() if a is not None]
            lost = [r for r, a in ascii_form.items() if a is None]
            if all(ascii_form[r] == r for r in recipients):
                raise  # every address is ASCII: STARTTLS or AUTH missing, the owner's to fix
            if not reachable:
                # Every retry fails alike, and would hold up the mail queued behind it.
                raise PermanentSendError(f"cannot send to {recipients}: {exc}") from exc
            if lost:
                # One Cc'd jöhn@example.de must not cost the owner and everyone else the
                # reply: it goes to whoever can be addressed, its headers naming only them.
                log.warning(
                    "SMTP server has no SMTPUTF8: %s left out of %s, sent to the other %d",
                    ", ".join(lost),
                    message.get("Message-ID", "a mail"),
                    len(reachable),
                )
            refused = await self._send(readdressed(message, ascii_form), sender, reachable)
            sent = Sent(reachable, dict.fromkeys(lost, NO_SMTPUTF8))
        if refused:
            # Partly delivered: the others have it; sent again as a whole, it would reach
            # them twice. Those refused for good are left out (the owner is told), those
            # refused for now are owed the mail (it was only logged, and lost to them).
            for rcpt, (code, text) in refused.items():
                log.warning("SMTP refused recipient %s: %s %s", rcpt, code, text)
                answer = f"{code} {text}".strip()
                if 400 <= code < 500:
                    sent.deferred[rcpt] = answer
                else:
                    sent.left_out[rcpt] = f"the mail server refused it ({answer})"
            sent.to = [r for r in sent.to if r not in refused]
        if sent.deferred:
            raise Deferred(sent)
        return sent

    async def _send(
        self, message: EmailMessage, sender: str, recipients: list[str]
    ) -> dict[str, tuple[int, str]]:
        """Send; the recipients the server refused while it took the others.

        A reply to a mail whose Message-ID is not ASCII (RFC 6532) names it as it is, in
        UTF-8, with SMTPUTF8: written as RFC 2047 encoded words (what the email package
        does with a non-ASCII header otherwise) it matches no Message-ID, and no client
        threads the reply. A server without SMTPUTF8 gets the reply without those ids
        (the rest of References still threads it, and clients fall back to the subject)."""
        if not utf8_refs(message):
            return await self._submit(message, sender, recipients, utf8=False)
        try:
            return await self._submit(message, sender, recipients, utf8=True)
        except aiosmtplib.SMTPNotSupported as exc:
            if "SMTPUTF8" not in str(exc):
                raise
            log.warning(
                "SMTP server has no SMTPUTF8: non-ASCII Message-IDs left out of %s's "
                "In-Reply-To/References",
                message.get("Message-ID", "a mail"),
            )
            return await self._submit(ascii_refs(message), sender, recipients, utf8=False)

    async def _submit(
        self, message: EmailMessage, sender: str, recipients: list[str], *, utf8: bool
    ) -> dict[str, tuple[int, str]]:
        """One SMTP session sending ``message`` (as UTF-8 headers with ``utf8``)."""
        cfg = self._config
        try:
            context = (
                tls_context(cfg.tls_ca_file, "channels.email.smtp.tls_ca_file")
                if cfg.security != "none"
                else None
            )
        except CaFileUnreadable as exc:  # told to the owner, the reply kept for the fix
            raise Misconfigured(f"SMTP: {exc}") from exc
        # A non-ASCII address needs SMTPUTF8 too (aiosmtplib saw to that when it was
        # handed the message: SMTPNotSupported without it, which send() answers).
        utf8 = utf8 or not (sender + "".join(recipients)).isascii()
        try:
            errors, response = await aiosmtplib.send(
                # Flattened by us: aiosmtplib wrote long ids as encoded words (id_folding)
                message.as_bytes(policy=MAIL_POLICY.clone(utf8=utf8)),
                sender=sender,
                recipients=recipients,
                mail_options=["SMTPUTF8"] if utf8 else None,
                hostname=cfg.host,
                port=cfg.port,
                username=self._username if self._password else None,
                password=self._password,
                use_tls=cfg.security == "ssl",
                start_tls=True if cfg.security == "starttls" else False,
                tls_context=context,
                timeout=self._timeout,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = [r.code for r in exc.recipients]
            if codes and all(500 <= code < 600 for code in codes):
                raise PermanentSendError(
                    "recipients refused: "
                    + "; ".join(f"{r.recipient} {r.code} {r.message}" for r in exc.recipients)
                ) from exc
            raise
        except aiosmtplib.SMTPRecipientRefused as exc:
            if 500 <= exc.code < 600:
                raise PermanentSendError(
                    f"{exc.recipient} refused: {exc.code} {exc.message}"
                ) from exc
            raise
        except aiosmtplib.SMTPSenderRefused as exc:
            if 500 <= exc.code < 600:  # "553 not owned by user": every mail fails alike
                raise Misconfigured(
                    f"the SMTP server refused our sender address {sender} ({exc.code} "
                    f"{exc.message}): check that channels.email.smtp.username may send as "
                    f"channels.email.address ({cfg.host}:{cfg.port})"
                ) from exc
            raise
        except aiosmtplib.SMTPDataError as exc:
            if 500 <= exc.code < 600:
                raise PermanentSendError(f"message refused: {exc.code} {exc.message}") from exc
            raise
        except aiosmtplib.SMTPAuthenticationError as exc:
            if 500 <= exc.code < 600:  # 535 and kin: the login, not the moment (454 is)
                raise Misconfigured(
                    f"the SMTP server refused the login ({exc.code} {exc.message}): check "
                    "channels.email.smtp.username and EMAIL_PASSWORD "
                    f"({cfg.host}:{cfg.port})"
                ) from exc
            raise
        except (aiosmtplib.SMTPException, OSError) as exc:
            if trouble := await smtp_trouble(exc, cfg):
                raise Misconfigured(trouble) from exc
            if isinstance(exc, aiosmtplib.SMTPConnectError):
                # refused, timed out or turned away at the greeting: nothing was sent,
                # and the outbox holds the mail for as long as the outage lasts
                raise Unreachable(f"the SMTP server {cfg.host}:{cfg.port}: {exc}") from exc
            raise
        log.debug("SMTP accepted message for %s: %s", recipients, response)
        return {rcpt: (answer.code, answer.message) for rcpt, answer in errors.items()}


async def smtp_trouble(exc: BaseException, cfg: SmtpConfig) -> str | None:
    """What is wrong, when ``exc`` says the security settings do not fit the server;
    else None (an outage).

    aiosmtplib wraps the :class:`ssl.SSLError` of a handshake with a plain server
    ("wrong version number") or of an untrusted certificate in an SMTPConnectError, and
    times out waiting for the greeting of a server of implicit TLS (port 465) spoken to
    in plain text, or finds no SMTP in what another server says: the port is asked
    afresh what it speaks (:mod:`channels.email.port_probe`).
    """
    where = f"{cfg.host}:{cfg.port}"
    key = "channels.email.smtp.security"
    if (
        isinstance(exc, aiosmtplib.SMTPConnectTimeoutError)
        or (cfg.security == "ssl" and handshake_failed(exc))
        # "Malformed SMTP response line": something else answers there (IMAP's "* OK")
        or (isinstance(exc, aiosmtplib.SMTPResponseException) and exc.code < 0)
    ):
        if mismatch := await diagnose("SMTP", cfg.security, cfg.host, cfg.port, cfg.timeout):
            return mismatch
    if failure := tls_failure(exc, cfg.security):
        return f"{failure} ({where}; {key}, channels.email.smtp.tls_ca_file)"
    said = str(exc)
    if isinstance(exc, aiosmtplib.SMTPException) and "STARTTLS extension not supported" in said:
        return f"the SMTP server at {where} does not offer STARTTLS ({key}: starttls)"
    if isinstance(exc, aiosmtplib.SMTPException) and "AUTH extension is not supported" in said:
        # aiosmtplib's own advice ("Try connecting via TLS (or STARTTLS)") was read as
        # STARTTLS not offered: the server offers a login only over TLS, or none at all.
        if cfg.security == "none":
            return (
                f"the SMTP server at {where} offers no login over a plain connection: set "
                f"{key} to starttls (port 587) or ssl (port 465)"
            )
        return (
            f"the SMTP server at {where} offers no login: set channels.email.smtp.auth to "
            "false for a relay that takes mail without one, or use the submission port"
        )
    return None


class Owed:
    """Mails the server took for some recipients and refused others for now: who is
    still owed each (by Message-ID), and who was left out meanwhile. The outbox retries
    the entry with the same Message-ID; the retry goes to those owed it alone (sent
    again as a whole, the others had it twice). In memory: after a restart, a retry
    goes to everyone again, under the same Message-ID (clients show it once)."""

    _REMEMBERED = 512

    def __init__(self) -> None:
        self._owed: OrderedDict[str, tuple[set[str], dict[str, str]]] = OrderedDict()

    def recipients(self, message_id: str, recipients: list[str]) -> list[str]:
        """Who this send of ``message_id`` goes to."""
        owed = self._owed.get(message_id)
        if owed is None:
            return recipients
        return [r for r in recipients if r in owed[0] or ascii_address(r) in owed[0]]

    def deferred(self, message_id: str, sent: Sent) -> None:
        """``sent`` was refused for now to some: remember who is owed it."""
        left_out = {**self._owed.get(message_id, (set(), {}))[1], **sent.left_out}
        self._owed[message_id] = (set(sent.deferred), left_out)
        self._owed.move_to_end(message_id)
        while len(self._owed) > self._REMEMBERED:
            self._owed.popitem(last=False)

    def refused(self, message_id: str, exc: PermanentSendError) -> Sent:
        """The retry of ``message_id`` was refused for good to all it owed: when others
        had it from an earlier send, those are left out (the mail did not fail as a
        whole); else ``exc`` stands."""
        owed = self._owed.get(message_id)
        if owed is None:
            raise exc
        return Sent([], dict.fromkeys(sorted(owed[0]), f"the mail server refused it ({exc})"))

    def done(self, message_id: str, sent: Sent) -> Sent:
        """The last send of ``message_id``: ``sent`` with whoever an earlier one left out."""
        _, left_out = self._owed.pop(message_id, (set(), {}))
        return Sent(sent.to, {**left_out, **sent.left_out})


def left_out_reason(left_out: dict[str, str]) -> str:
    """Why ``left_out`` (address -> why) were left out, as the owner is told it."""
    reasons = set(left_out.values())
    if len(reasons) <= 1:
        return next(iter(reasons), "")
    return "; ".join(f"{address}: {why}" for address, why in left_out.items())
