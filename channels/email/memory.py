"""What the e-mail channel remembers of its recent correspondence, in memory and bounded.

The core keeps conversations and Message-IDs durably; the channel keeps, for the last
few hundred mails, what composing an answer needs and the core does not hold: the mail
answered (its subject, References and recipients, for threading and reply-all), each
sender's latest Message-ID (an acknowledgement threads under it), the subjects of the
mails we sent (whether a reply changes the subject, which the model is then shown), and
which senders wrote automatic mail lately (never acknowledged: a mail loop). With it,
:meth:`Correspondence.loop_guard` tells the mail loops no header marks: mail that came
back round through our own mailbox, and a sender answering ours as a machine does.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import TypeVar

from channels.email.automatic import is_auto_reply_subject
from channels.email.parsing import ParsedMail

_V = TypeVar("_V")

log = logging.getLogger("my_agent.email")

REMEMBERED = 512  # recent mails kept, per kind
# A mail loop nothing marks (a bot, or an auto-responder without headers, answering
# every mail of ours): more answers to our mails from one sender within the window are
# taken as automatic, recorded and not answered. A person does not reply 30 times an
# hour by mail; a ping-pong with IDLE runs at several a minute.
LOOP_ANSWERS = 30
# The owner's own addresses: a quick back-and-forth with the assistant by mail can pass
# 30 an hour, and the owner's unanswered mail costs more than a loop's first hour; one
# answer every 15 s for an hour is no person's.
LOOP_ANSWERS_OWNER = 240
LOOP_WINDOW = 3600.0  # seconds


def _bound(mapping: OrderedDict[str, _V], limit: int) -> None:
    while len(mapping) > limit:
        mapping.popitem(last=False)


class Correspondence:
    """The channel's bounded memory of recent mails in and out."""

    def __init__(
        self, ours: Iterable[str] = (), limit: int = REMEMBERED, owner: Iterable[str] = ()
    ) -> None:
        self.ours = frozenset(ours)  # our mailbox's addresses (lower case)
        self.owner = frozenset(a.lower() for a in owner)  # the owner's addresses
        self.limit = limit
        self.recent: OrderedDict[str, ParsedMail] = OrderedDict()  # by Message-ID
        self.last_from: OrderedDict[str, str] = OrderedDict()  # sender -> latest id
        self.sent_subjects: OrderedDict[str, str] = OrderedDict()  # our id -> subject
        self._automatic: set[str] = set()  # senders of bounces and auto-replies
        # sender -> when their mails answering ours came (monotonic, within the window)
        self._answers: OrderedDict[str, deque[float]] = OrderedDict()
        self.loops: dict[str, int] = {}  # senders taken for a loop -> mails not answered

    def list_copy(self, mail: ParsedMail) -> bool:
        """Whether ``mail`` and a mail received lately are two copies of one, one of
        them a mailing list's (with its subject tag and footer): the same Message-ID
        and sender. A sender reusing a Message-ID for new content (a cron job) is no
        copy: that is a new message. Asked before :meth:`received`."""
        earlier = self.recent.get(mail.message_id) if mail.message_id else None
        return (
            earlier is not None
            and earlier.from_addr == mail.from_addr
            and (mail.mailing_list or earlier.mailing_list)
        )

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

    def loop_guard(self, mail: ParsedMail, uid: int) -> ParsedMail:
        """``mail`` (IMAP ``uid``), flagged automatic when no header says so but it is
        part of a mail loop: it came back round through our own mailbox (our address
        in a loop marker: a forwarding rule of ours, or of a mailbox it forwards to), or
        it answers ours as a machine does (:meth:`looping`). Answering it would send
        the answer round the loop too."""
        if mail.auto_submitted:
            return mail
        if self.ours.intersection(mail.loop_addresses):
            log.info("mail uid %d came back through our mailbox: not answered", uid)
        elif self.looping(mail):
            log.warning(
                "mail uid %d from %s answers ours like an auto-responder: not answered",
                uid,
                mail.from_addr,
            )
        else:
            return mail
        return dataclasses.replace(mail, auto_submitted=True)

    def looping(self, mail: ParsedMail, now: float | None = None) -> bool:
        """Whether ``mail``, which no header marks automatic, answers a mail of ours the
        way a machine does: with an auto-responder's subject ("Out of Office: Message
        from My Assistant"), or as the (:data:`LOOP_ANSWERS` + 1)th answer from its
        sender within :data:`LOOP_WINDOW` (two assistants, or an assistant and a bot,
        answering each other for ever)."""
        if not mail.in_reply_to or mail.in_reply_to not in self.sent_subjects:
            return False
        if is_auto_reply_subject(mail.subject):
            return True
        sender = mail.from_addr or "unknown@invalid"
        now = time.monotonic() if now is None else now
        times = self._answers.setdefault(sender, deque())
        self._answers.move_to_end(sender)
        _bound(self._answers, self.limit)
        times.append(now)
        while times and times[0] <= now - LOOP_WINDOW:
            times.popleft()
        if len(times) <= self.loop_answers(sender):
            self.loops.pop(sender, None)
            return False
        self.loops[sender] = self.loops.get(sender, 0) + 1
        return True

    def loop_answers(self, sender: str) -> int:
        """How many answers to ours within the window ``sender`` may send before the
        next is taken for a loop (the owner's addresses get :data:`LOOP_ANSWERS_OWNER`)."""
        return LOOP_ANSWERS_OWNER if sender.lower() in self.owner else LOOP_ANSWERS

    def problems(self, now: float | None = None) -> list[str]:
        """Senders whose mail is being taken for a mail loop (for ``my-agent status``),
        until an hour has passed without one."""
        now = time.monotonic() if now is None else now
        for sender in list(self.loops):
            times = self._answers.get(sender)
            if not times or times[-1] <= now - LOOP_WINDOW:
                del self.loops[sender]
        return [
            f"mail from {sender} answered ours over {self.loop_answers(sender)} times within "
            "an hour: "
            f"taken for a mail loop, {count} not answered"
            for sender, count in self.loops.items()
        ]

    def sent(self, mail_id: str, subject: str) -> None:
        """Record a mail we sent (the server took it for at least one recipient)."""
        self.sent_subjects[mail_id] = subject
        _bound(self.sent_subjects, self.limit)

    def automatic(self, sender: str) -> bool:
        """Whether ``sender``'s latest mail was automatic (a bounce, an auto-reply)."""
        return sender in self._automatic
