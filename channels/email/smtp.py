"""Sending over SMTP with aiosmtplib, sorting failures into "retry later" and "never".

The core's outbox retries whatever raises; :class:`bot.channel.PermanentSendError` stops
the retries. Only a 5xx answer about the recipients or the message itself, or a non-ASCII
address the server cannot take (no SMTPUTF8), is permanent:
connection problems, timeouts, 4xx answers and authentication failures (a wrong password
is fixed by the owner, after which the queued replies should still go out) are retried.
"""

from __future__ import annotations

import logging
import ssl
from email.message import EmailMessage

import aiosmtplib

from bot.channel import PermanentSendError
from bot.config.channels import SmtpConfig

log = logging.getLogger("my_agent.email.smtp")


class SmtpSender:
    """Sends one message per connection (replies are rare; no pool to go stale)."""

    def __init__(
        self, config: SmtpConfig, username: str | None, password: str | None, timeout: float
    ) -> None:
        self._config = config
        self._username = username
        self._password = password
        self._timeout = timeout

    async def send(self, message: EmailMessage, sender: str, recipients: list[str]) -> None:
        """Deliver ``message``; raise to retry, :class:`PermanentSendError` when pointless."""
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
        except aiosmtplib.SMTPNotSupported as exc:
            if sender.isascii() and not "".join(recipients).isascii():
                # An internationalised recipient and a server without SMTPUTF8: every
                # retry fails alike, and would hold up the mail queued behind this one.
                raise PermanentSendError(f"cannot send to {recipients}: {exc}") from exc
            raise  # STARTTLS/AUTH missing, or our own address: what the owner can fix
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
