"""Sending over SMTP with aiosmtplib, sorting failures into "retry later" and "never".

The core's outbox retries whatever raises; :class:`bot.channel.PermanentSendError` stops
the retries. Only a 5xx answer about the recipients or the message itself, or non-ASCII
addresses the server cannot take (no SMTPUTF8) for every recipient, is permanent:
connection problems, timeouts, 4xx answers and authentication failures (a wrong password
is fixed by the owner, after which the queued replies should still go out) are retried.
A recipient a server without SMTPUTF8 cannot address is left out, with a warning, and the
mail goes to the others (an accented domain is written in its ASCII form, IDNA).
"""

from __future__ import annotations

import copy
import logging
import ssl
from email.headerregistry import Address
from email.message import EmailMessage

import aiosmtplib

from bot.channel import PermanentSendError
from bot.config.channels import SmtpConfig

log = logging.getLogger("my_agent.email.smtp")

# Why a recipient was left out, as the owner is told it.
NO_SMTPUTF8 = (
    "the mail server does not take non-ASCII addresses (no SMTPUTF8), and this one has "
    "no ASCII form"
)


class SmtpSender:
    """Sends one message per connection (replies are rare; no pool to go stale)."""

    def __init__(
        self, config: SmtpConfig, username: str | None, password: str | None, timeout: float
    ) -> None:
        self._config = config
        self._username = username
        self._password = password
        self._timeout = timeout

    async def send(
        self, message: EmailMessage, sender: str, recipients: list[str]
    ) -> tuple[list[str], list[str]]:
        """Deliver ``message``; raise to retry, :class:`PermanentSendError` when pointless.
        Returns the recipients it was sent to and those left out (see :data:`NO_SMTPUTF8`)."""
        try:
            await self._send(message, sender, recipients)
        except aiosmtplib.SMTPNotSupported as exc:
            if not sender.isascii():
                raise  # our own address: the owner's configuration to fix, retried
            ascii_form = {r: _ascii_address(r) for r in recipients}
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
            await self._send(_readdressed(message, ascii_form), sender, reachable)
            return reachable, lost
        return recipients, []

    async def _send(self, message: EmailMessage, sender: str, recipients: list[str]) -> None:
        cfg = self._config
        try:
            errors, response = await aiosmtplib.send(
                message,
                sender=sender,
                recipients=recipients,
                hostname=cfg.host,
                port=cfg.port,
                username=self._username if self._password else None,
                password=self._password,
                use_tls=cfg.security == "ssl",
                start_tls=True if cfg.security == "starttls" else False,
                tls_context=ssl.create_default_context(cafile=cfg.tls_ca_file)
                if cfg.security != "none"
                else None,
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
        except aiosmtplib.SMTPDataError as exc:
            if 500 <= exc.code < 600:
                raise PermanentSendError(f"message refused: {exc.code} {exc.message}") from exc
            raise
        for rcpt, (code, text) in errors.items():
            # Partly delivered: the others got it; resending would duplicate for them.
            log.warning("SMTP refused recipient %s: %s %s", rcpt, code, text)
        log.debug("SMTP accepted message for %s: %s", recipients, response)


def _ascii_address(addr: str) -> str | None:
    """``addr`` as a server without SMTPUTF8 takes it, or None: an accented local part
    has no ASCII form; an accented domain has one (IDNA)."""
    if addr.isascii():
        return addr
    local, _, domain = addr.rpartition("@")
    if not local.isascii():
        return None
    try:
        return f"{local}@{domain.encode('idna').decode('ascii')}"
    except UnicodeError:
        return None


def _readdressed(message: EmailMessage, ascii_form: dict[str, str | None]) -> EmailMessage:
    """A copy of ``message`` whose To and Cc name each recipient in its ASCII form and
    leave out those without one (a header naming them could not be sent either)."""
    out = copy.deepcopy(message)
    kept: dict[str, list[Address]] = {}
    for name in ("To", "Cc"):
        header = out[name]
        del out[name]
        kept[name] = []
        for addr in getattr(header, "addresses", ()):
            new = ascii_form.get(addr.addr_spec, _ascii_address(addr.addr_spec))
            if new is not None:
                local, _, domain = new.rpartition("@")
                kept[name].append(Address(addr.display_name, local, domain))
    if not kept["To"]:  # the sender was the one left out: the others become the To
        kept["To"], kept["Cc"] = kept["Cc"], []
    for name, addresses in kept.items():
        if addresses:
            out[name] = addresses
    return out
