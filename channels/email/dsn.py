"""Delivery status notifications (bounces): which mail of ours failed, to whom, and why.

A bounce (RFC 3464: ``multipart/report; report-type=delivery-status``; Exim's
``X-Failed-Recipients``; a report wrapped in a ``multipart/mixed`` by a gateway) is
automatic mail: recorded, never answered. What it says is read here, so that the turn
starts with it in one line (the owner's escalation quotes the first 500 characters, and
those of a Postfix bounce are boilerplate: "This is the mail system at host ...", the
failed address and the reason came after the cut) and so that the mail it reports on
is known by its Message-ID (the returned headers, else the bounce's In-Reply-To).
:func:`read_bounce` never raises: a report it cannot read is None, a field it cannot
read is empty.
"""

from __future__ import annotations

import email
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from email import policy
from email.message import Message

from bot.graphemes import cut
from bot.mail_subjects import capped_subject
from channels.email.decoding import addresses_in, decode_bytes, header_value, raw_header, unfold
from channels.email.mime_parts import content_type, own_parts

_REPORT_TYPES = ("message/delivery-status", "message/global-delivery-status")
_RETURNED = ("message/rfc822", "text/rfc822-headers", "message/global", "message/global-headers")
_MAX_DIAGNOSTIC = 200  # characters of the remote server's reason kept in the summary


@dataclass(frozen=True)
class Bounce:
    """What one delivery report says."""

    action: str  # "failed", "delayed", "delivered", "relayed", "expanded" (RFC 3464), or ""
    recipients: tuple[str, ...]  # lower-cased addresses the report is about
    status: str  # "5.1.1", or ""
    diagnostic: str  # the remote server's words, on one line, or ""
    original_id: str | None  # the Message-ID of the mail it reports on
    original_subject: str

    @property
    def failed(self) -> bool:
        return self.action in ("failed", "")

    def summary(self) -> str:
        """One line for the turn: ``Delivery failed: the mail to a@b ("Re: Dinner") could
        not be delivered: 550 5.1.1 User unknown.``"""
        to = ", ".join(self.recipients) or "an unknown address"
        what = (  # the subject as we cut it (session 41): a report may quote any
            f'the mail to {to} ("{capped_subject(self.original_subject)}")'
            if self.original_subject
            else (f"the mail to {to}")
        )
        if self.failed:
            head = f"Delivery failed: {what} could not be delivered"
        elif self.action == "delayed":
            head = f"Delivery delayed: {what} is not delivered yet (the server keeps trying)"
        else:
            head = f"Delivery report ({self.action}): {what}"
        reason = self.diagnostic or self.status
        return f"{head}: {reason}." if reason else f"{head}."


def report_fields(part: Message) -> list[Message]:
    """The field blocks of a report part (``message/delivery-status``: per message, then
    one per recipient; ``message/disposition-notification``: one), however the parser
    left its body."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return [block for block in payload if isinstance(block, Message)]
    text = payload if isinstance(payload, str) else decode_bytes(bytes(payload or b""))
    blocks = re.split(r"\r?\n[ \t]*\r?\n", text.strip())
    return [email.message_from_string(block + "\n\n") for block in blocks if block.strip()]


def _field(block: Message, name: str) -> str:
    """A DSN field's value without its type (``rfc822; a@b`` -> ``a@b``)."""
    value = header_value(block, name)
    return value.split(";", 1)[1].strip() if ";" in value else value.strip()


def _returned_headers(part: Message) -> Message | None:
    payload = part.get_payload()
    if isinstance(payload, list):
        return payload[0] if payload and isinstance(payload[0], Message) else None
    if isinstance(payload, str):
        head = re.split(r"\r?\n[ \t]*\r?\n", payload.lstrip(), maxsplit=1)[0]
        return email.message_from_string(head + "\n\n", policy=policy.compat32)
    return None


def read_bounce(msg: Message, msgids: Callable[[str], list[str]]) -> Bounce | None:
    """The report ``msg`` carries, or None when it is no bounce. ``msgids`` reads the ids
    of a header value (the parser's, which tolerates malformed ones)."""
    parts = list(own_parts(msg))
    reports = [p for p in parts if content_type(p) in _REPORT_TYPES]
    exim = raw_header(msg, "X-Failed-Recipients")
    if not reports and not exim:
        return None
    # (action, address, status, diagnostic) per recipient the report names
    entries: list[tuple[str, str, str, str]] = []
    for block in report_fields(reports[0]) if reports else []:
        address = _field(block, "Final-Recipient") or _field(block, "Original-Recipient")
        if not address and not _field(block, "Action"):
            continue  # the per-message fields (Reporting-MTA, Arrival-Date)
        for found in addresses_in(address) or [""]:
            entries.append(
                (
                    _field(block, "Action").lower(),
                    found.lower(),
                    _field(block, "Status"),
                    _field(block, "Diagnostic-Code"),
                )
            )
    # One action per summary: the failures, else the delays, else what there is.
    for wanted in ("failed", "delayed", None):
        chosen = [e for e in entries if wanted is None or e[0] == wanted]
        if chosen:
            break
    action = chosen[0][0] if chosen else "failed"
    recipients = [e[1] for e in chosen if e[1]]
    status = next((e[2] for e in chosen if e[2]), "")
    diagnostic = next((e[3] for e in chosen if e[3]), "")
    for value in exim:
        recipients += [a.lower() for a in addresses_in(unfold(value))]
    original_id: str | None = None
    original_subject = ""
    for part in parts:
        if content_type(part) in _RETURNED and (head := _returned_headers(part)) is not None:
            ids = msgids(header_value(head, "Message-ID"))
            original_id = ids[0] if ids else None
            original_subject = header_value(head, "Subject")
            break
    if original_id is None:  # no headers returned: the bounce may name the mail itself
        replied = (
            msgids(header_value(msg, "In-Reply-To"))[:1]
            or msgids(" ".join(raw_header(msg, "References")))[-1:]
        )
        original_id = replied[0] if replied else None
    diagnostic = " ".join(diagnostic.split())
    if len(diagnostic) > _MAX_DIAGNOSTIC:
        diagnostic = cut(diagnostic, _MAX_DIAGNOSTIC - 3) + "..."
    return Bounce(
        action=action,
        recipients=tuple(dict.fromkeys(recipients)),
        status=status,
        diagnostic=diagnostic,
        original_id=original_id,
        original_subject=" ".join(original_subject.split()),
    )


class Undeliverable:
    """Addresses our mail bounced from lately, as reported by bounces of mails we sent.

    An escalation about a bounce goes to the owner; when the owner's own address is
    what bounces, that escalation bounces too, and its bounce was escalated again (a
    loop, one turn per escalation interval, and the owner told nothing: every mail to
    them failed). Only a report naming a Message-ID we sent counts (anyone can send a
    ``multipart/report``; our Message-IDs are not guessable); memory only: after a
    restart, one more escalation goes out and its bounce is recognised."""

    HOLD_SECONDS = 3600.0  # after the last bounce from an address
    _REMEMBERED = 512  # mails sent

    def __init__(self) -> None:
        self._sent: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._until: dict[str, float] = {}

    def sent(self, message_id: str, recipients: list[str]) -> None:
        """We sent ``message_id`` to ``recipients``."""
        self._sent[message_id] = tuple(r.lower() for r in recipients)
        while len(self._sent) > self._REMEMBERED:
            self._sent.popitem(last=False)

    def reported(self, bounce: Bounce) -> tuple[str, ...]:
        """Take note of ``bounce``; the addresses of ours it says failed (or are delayed)."""
        to = self._sent.get(bounce.original_id or "")
        if to is None or bounce.action not in ("failed", "delayed", ""):
            return ()
        failed = tuple(r for r in bounce.recipients if r in to) or to
        until = time.monotonic() + self.HOLD_SECONDS
        for address in failed:
            self._until[address] = until
        return failed

    def holds(self, address: str) -> bool:
        """Whether mail of ours to ``address`` bounced within the last hour."""
        until = self._until.get(address.lower())
        if until is None:
            return False
        if until <= time.monotonic():
            del self._until[address.lower()]
            return False
        return True
