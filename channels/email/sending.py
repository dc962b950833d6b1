"""Sending mail: an :class:`OutboundMessage` composed as a threaded mail and handed to
SMTP, with the bookkeeping the channel does once the server took it.

The mail loop guard (no acknowledgement to automatic mail), the bounce guard (no
escalation mailed to an address that bounced lately), the recipients still owed a mail
the server refused for now (:class:`~channels.email.smtp.Owed`), and the Message-IDs
recorded so that replies find their conversation. Failures raise, so that the core's
outbox retries them; what can never be sent raises :class:`PermanentSendError`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from bot.channel import ChannelHost, PermanentSendError
from bot.config.channels import EmailChannelConfig
from bot.events import OutboundMessage, SendResult
from channels.email.compose import well_formed
from channels.email.dsn import Undeliverable
from channels.email.memory import REMEMBERED, Correspondence
from channels.email.outgoing import compose_outgoing, thread_root
from channels.email.smtp import Deferred, Owed, SmtpSender, left_out_reason
from channels.email.thread_index import thread_ref

log = logging.getLogger("my_agent.email")


class Outbound:
    """The sending half of :class:`channels.email.adapter.EmailChannel`; ``memory`` and
    ``undeliverable`` are shared with its receiving half."""

    def __init__(
        self,
        cfg: EmailChannelConfig,
        address: str,
        password: str,
        memory: Correspondence,
        undeliverable: Undeliverable,
    ) -> None:
        self._cfg = cfg
        self.address = address
        self._smtp = SmtpSender(
            cfg.smtp,
            cfg.smtp.username or cfg.address,
            (password or None) if cfg.smtp.auth else None,
            cfg.smtp.timeout,
        )
        self._owed = Owed()  # mails some recipients are still owed (refused for now)
        # Message-IDs and Outlook threads recorded with their conversation in this run:
        # once is enough (every reply in a thread, and every retry of a mail some
        # recipients are owed, recorded it again, a line in the transcript each)
        self._recorded: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._memory = memory
        self._undeliverable = undeliverable

    async def send(self, message: OutboundMessage, host: ChannelHost | None) -> SendResult:
        """Compose and send one mail; raises for the outbox to retry. ``host`` learns
        the Message-ID of what went out (replies to it find the conversation)."""
        recipient = message.chat_id.strip().lower()
        # A lone surrogate (a JavaScript string cut in an emoji, a pair split between two
        # streamed pieces) cannot be encoded: the reply failed for good, lost for one
        # character. Joined or made U+FFFD, it goes out.
        text = well_formed(message.text)
        subject_given = well_formed(message.subject) if message.subject else None
        if message.kind == "acknowledgement" and self._memory.automatic(recipient):
            log.info("not acknowledging automatic mail from %s (mail loop guard)", recipient)
            return SendResult(message_ref=None)
        if message.kind == "escalation" and self._undeliverable.holds(recipient):
            # Mail to this address bounced within the hour: the escalation (the
            # dashboard shows it) would bounce as well, and were it about that bounce,
            # its own bounce would be escalated again (a mail loop).
            log.warning("escalation to %s not mailed: mail to it bounced lately", recipient)
            return SendResult(message_ref=None)
        try:
            composed, subject = compose_outgoing(
                message,
                text,
                subject_given,
                address=self.address,
                cfg=self._cfg,
                recent=self._memory.recent,
                last_from=self._memory.last_from,
                owner=self._memory.owner,
            )
        except Exception as exc:
            # The same message would fail the same way on every retry, and the outbox
            # sends in order: retrying would hold up every mail queued behind it.
            raise PermanentSendError(f"cannot compose the mail: {exc!r}") from exc
        mail_id = composed.message_id
        if message.conversation_id and host is not None:
            # Before the mail leaves, not once the server took it: a server-side
            # out-of-office answers within milliseconds, and its reply (or the owner's,
            # after a crash between the send and the record) found no thread and opened
            # a conversation of its own. A mail that then fails names an id nobody has.
            await self._record(host, message, mail_id, message.conversation_id)
        try:
            sent = await self._smtp.send(
                composed.message, self.address, self._owed.recipients(mail_id, composed.recipients)
            )
        except Deferred as exc:
            # Some have it; the outbox retries it for those refused for now.
            self._owed.deferred(mail_id, exc.sent)
            self._sent(message, mail_id, subject, exc.sent.to)
            raise
        except PermanentSendError as exc:
            sent = self._owed.refused(mail_id, exc)
        sent = self._owed.done(mail_id, sent)
        self._sent(message, mail_id, subject, sent.to)
        return SendResult(
            message_ref=mail_id,
            left_out=tuple(sent.left_out),
            left_out_reason=left_out_reason(sent.left_out),
        )

    def _sent(self, message: OutboundMessage, mail_id: str, subject: str, to: list[str]) -> None:
        """Bookkeeping once the server took ``mail_id`` for ``to`` (some, or all)."""
        if not to:
            return
        log.info("sent %s %s to %s", message.kind, mail_id, to)
        self._memory.sent(mail_id, subject)
        self._undeliverable.sent(mail_id, to)

    async def _record(
        self, host: ChannelHost, message: OutboundMessage, mail_id: str, conversation_id: str
    ) -> None:
        """Map what replies to ``mail_id`` will name to the conversation: our Message-ID,
        and the recipient's Outlook thread (their answer names it by its Thread-Index
        even when a gateway drops References), each once per run."""
        root = thread_root(message, self._memory.recent)
        refs = [mail_id, *([thread_ref(message.chat_id, root)] if root else [])]
        for ref in refs:
            if (ref, conversation_id) in self._recorded:
                continue
            try:
                await host.record_message_ref("email", ref, conversation_id)
            except Exception:  # the mail can still go: its replies then start a thread anew
                log.exception("could not record Message-ID %s", mail_id)
                return
            self._recorded[(ref, conversation_id)] = None
            while len(self._recorded) > REMEMBERED:
                self._recorded.popitem(last=False)
