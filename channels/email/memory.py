"""What the e-mail channel remembers of its recent correspondence, in memory and bounded.

The core keeps conversations and Message-IDs durably; the channel keeps, for the last
few hundred mails, what composing an answer needs and the core does not hold: the mail
answered (its subject, References and recipients, for threading and reply-all), each
sender's latest Message-ID (an acknowledgement threads under it), the subjects of the
mails we sent (whether a reply changes the subject, which the model is then shown), and
which senders wrote automatic mail lately (never acknowledged: a mail loop).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

from channels.email.parsing import ParsedMail

_V = TypeVar("_V")

REMEMBERED = 512  # recent mails kept, per kind


def _bound(mapping: OrderedDict[str, _V], limit: int) -> None:
    while len(mapping) > limit:
        mapping.popitem(last=False)


class Correspondence:
    """The channel's bounded memory of recent mails in and out."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self.limit = limit
        self.recent: OrderedDict[str, ParsedMail] = OrderedDict()  # by Message-ID
        self.last_from: OrderedDict[str, str] = OrderedDict()  # sender -> latest id
        self.sent_subjects: OrderedDict[str, str] = OrderedDict()  # our id -> subject
        self._automatic: set[str] = set()  # senders of bounces and auto-replies

    def received(self, mail: ParsedMail) -> str | None:
        """Record ``mail`` as received; returns the subject of the mail it answers
        when that is known (ours or theirs), else None."""
        sender = mail.from_addr or "unknown@invalid"
        if mail.message_id:
            self.recent[mail.message_id] = mail
            self.recent.move_to_end(mail.message_id)
            _bound(self.recent, self.limit)
            self.last_from[sender] = mail.message_id
            self.last_from.move_to_end(sender)
            _bound(self.last_from, self.limit)
        else:  # their last mail has no id: an acknowledgement of it threads under nothing
            self.last_from.pop(sender, None)  # (it went under their mail before, unrelated)
        if mail.auto_submitted or mail.from_addr is None:
            if len(self._automatic) >= 4 * self.limit:
                self._automatic.clear()  # a bounded memory; bounces repeat their flag
            self._automatic.add(sender)
        else:
            self._automatic.discard(sender)
        parent = self.recent.get(mail.in_reply_to) if mail.in_reply_to else None
        if parent is not None:
            return parent.subject
        return self.sent_subjects.get(mail.in_reply_to or "")

    def sent(self, mail_id: str, subject: str) -> None:
        """Record a mail we sent (the server took it for at least one recipient)."""
        self.sent_subjects[mail_id] = subject
        _bound(self.sent_subjects, self.limit)

    def automatic(self, sender: str) -> bool:
        """Whether ``sender``'s latest mail was automatic (a bounce, an auto-reply)."""
        return sender in self._automatic
