"""Read receipts (message disposition notifications, RFC 8098): who read which mail, when.

A mail client sends one when its user opens a mail that asked for it (Outlook's "Read:
Trip planning", Thunderbird's "Return Receipt (displayed) - ..."), often without
``Auto-Submitted``: a ``multipart/report; report-type=disposition-notification`` whose
``message/disposition-notification`` part names the mail (``Original-Message-ID``), the
reader (``Final-Recipient``) and what they did (``Disposition: ...; displayed``); a
gateway may wrap it in a ``multipart/mixed``. It is automatic mail: recorded in the
conversation of the mail it is about as one line, ``Read receipt: ann@example.net read
"Trip planning" (Tue, 14 Jan 2025 10:00:00 +0100).``, never answered, the model never
run on it. Before session 26 its text was the client's boilerplate ("Your message ...
was read on ..."), a user turn in a conversation of its own (the report names the mail
only in its report part), and a gateway's wrapped report was answered like a person's
mail. :func:`read_receipt` never raises: a field it cannot read is empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message

from bot.mail_subjects import capped_subject
from channels.email.decoding import addresses_in, header_value
from channels.email.dsn import report_fields
from channels.email.mime_parts import content_type, own_parts

_REPORT_TYPE = "message/disposition-notification"
# The subject prefixes clients give a receipt, before the subject of the mail read.
_RECEIPT_SUBJECT = re.compile(
    r"^\s*(?:(?:read receipt|not read|read|ungelesen|gelesen|non lu|lu|no leído|leído|"
    r"non letto|letto|não lido|lido|niet gelezen|gelezen|disposition notification)\s*:|"
    r"return receipt \([^)]*\)\s*-)\s*",
    re.IGNORECASE,
)
# RFC 8098 section 3.2.6.2: the disposition types, as a person says them.
_DONE = {
    "displayed": "read",
    "deleted": "deleted without reading",
    "dispatched": "sent on",
    "processed": "processed",
    "denied": "declined to confirm reading",
    "failed": "could not confirm reading",
}


@dataclass(frozen=True)
class ReadReceipt:
    """What one disposition notification says."""

    reader: str  # the address the mail was read at (Final-Recipient), or ""
    disposition: str  # "displayed", "deleted", ... (RFC 8098), or ""
    original_id: str | None  # the Message-ID of the mail it is about
    original_subject: str  # from the receipt's own subject, its prefix left out
    when: str  # the receipt's Date header, as sent

    def summary(self, sender: str) -> str:
        """One line for the turn: ``Read receipt: ann@example.net read "Trip" (Tue, ...).``"""
        who = self.reader or sender
        # the subject as we cut it (session 41): a receipt may carry any subject
        what = (
            f'"{capped_subject(self.original_subject)}"'
            if self.original_subject
            else "a mail of ours"
        )
        done = _DONE.get(self.disposition, "read")
        at = f" ({self.when})" if self.when else ""
        return f"Read receipt: {who} {done} {what}{at}."


def read_receipt(msg: Message, msgids: Callable[[str], list[str]]) -> ReadReceipt | None:
    """The read receipt ``msg`` is, or None (it has no disposition report outside an
    attached mail: a receipt the owner forwards as an attachment is a question about
    one). ``msgids`` reads the ids of a header value (the parser's, tolerant)."""
    reports = [p for p in own_parts(msg) if content_type(p) == _REPORT_TYPE]
    if not reports:
        return None
    fields = next(iter(report_fields(reports[0])), None)
    reader = disposition = ""
    original: list[str] = []
    if fields is not None:
        found = addresses_in(header_value(fields, "Final-Recipient"))
        reader = found[0].lower() if found else ""
        # "manual-action/MDN-sent-manually; displayed" (modifiers after a slash)
        value = header_value(fields, "Disposition").rpartition(";")[2]
        disposition = value.split("/")[0].strip().lower()
        original = msgids(header_value(fields, "Original-Message-ID"))
    if not original:  # some clients name the mail only as the one the receipt answers
        original = msgids(header_value(msg, "In-Reply-To"))
    subject = " ".join(header_value(msg, "Subject").split())
    return ReadReceipt(
        reader=reader,
        disposition=disposition,
        original_id=original[0] if original else None,
        original_subject=_RECEIPT_SUBJECT.sub("", subject, count=1),
        when=" ".join(header_value(msg, "Date").split()),
    )
