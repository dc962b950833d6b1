"""The body of a mail: its text (plain preferred over HTML) and its attachments, from a
MIME tree however broken (a multipart without a usable boundary is split on the boundary
lines its body has, else read as text)."""

from __future__ import annotations

import email
import email.utils
import re
from dataclasses import dataclass
from email import policy
from email.message import Message

from bot.events import Attachment
from channels.email.calendar import calendar_text
from channels.email.decoding import (
    decode_bytes,
    header_value,
)
from channels.email.html import html_to_text
from channels.email.mime_parts import (
    DAMAGED,
    broken_base64,
    content_type,
    filename,
    inline,
    is_attachment,
    part_text,
    payload_bytes,
)
from channels.email.secure import (
    SMIME_TYPES,
    encrypted_notice,
    signed_mail,
    unwrap_clearsigned,
)
from channels.email.tnef import tnef_files

# A boundary delimiter line (RFC 2046 bchars, without the space).
_BOUNDARY_LINE = re.compile(rb"^--([0-9A-Za-z'()+_,./:=?-]{1,70})\r?$", re.MULTILINE)
# What follows a guessed boundary line in a real body part: one of its MIME headers. A
# divider the sender typed ("------") is followed by text, and must not be guessed.
_PART_HEADER = re.compile(rb"\r?\ncontent-[a-z-]+[ \t]*:", re.IGNORECASE)
# The notice mailers put before the first part, for clients without MIME: not the text.
_MIME_NOTICE = re.compile(
    r"(?i)\s*this is a (multi-?part message in mime format|mime-encapsulated message)\.?\s*"
)
# What an attachment read out of Outlook's winmail.dat says of itself.
IN_WINMAIL = "sent inside Outlook's winmail.dat"
_SIGNATURE_TYPES = {"application/pgp-signature", "application/pkcs7-signature"}
# Boundaries guessed per mail (Walker._unsplit): each parses the rest of the body again
_MAX_BOUNDARY_GUESSES = 16
# Attached mails read into the text, one inside the other (a forward of a forward ...):
# deeper ones are named only, so a chain thousands deep costs no recursion.
_MAX_ATTACHED_DEPTH = 4
# The headers of an attached mail shown above its text, as a mail client's forward does.
_FORWARDED_HEADERS = ("From", "Date", "Subject", "To", "Cc")


@dataclass
class _Walked:
    text: str
    walker: Walker


class Walker:
    """Collects text and attachments from a MIME tree, choosing plain over HTML."""

    def __init__(self, depth: int = 0) -> None:
        self.attachments: list[Attachment] = []
        self.guesses = 0  # boundaries guessed (_unsplit)
        self.depth = depth  # attached mails this walker's part is inside

    def attach(self, part: Message) -> None:
        ctype = content_type(part)
        name = filename(part)
        if ctype == "message/rfc822" and name is None:
            name = self._embedded_subject(part)
        if not part.is_multipart() and (
            ctype == "application/ms-tnef" or (name or "").lower() == "winmail.dat"
        ):
            # Outlook's wrapper of the mail's files: the files are what the owner sent
            inside = tnef_files(payload_bytes(part))
            self.attachments.extend(
                Attachment(kind="file", name=file, size=size, description=IN_WINMAIL)
                for file, size in inside
            )
            if inside:
                return
        size = self._size(part)  # decodes the part: the decoder notes its defects
        if not part.is_multipart() and broken_base64(part):
            # Its "decoded" length (0 bytes for base64 that is none) is no size: the
            # owner is told the file came damaged instead.
            self.attachments.append(
                Attachment(kind="file", name=name, mime_type=ctype, description=DAMAGED)
            )
            return
        self.attachments.append(Attachment(kind="file", name=name, mime_type=ctype, size=size))

    @staticmethod
    def _size(part: Message) -> int | None:
        if part.is_multipart():
            try:
                return len(part.as_bytes()) if hasattr(part, "as_bytes") else 0
            except Exception:
                # An attached mail forwarding a forward ... hundreds deep exceeds the
                # recursion limit when serialised: its size is unknown, and the walk
                # (which failed as a whole: the raw body became the text) goes on.
                return None
        return len(payload_bytes(part))

    @staticmethod
    def _embedded_subject(part: Message) -> str | None:
        inner = part.get_payload()
        if isinstance(inner, list) and inner and isinstance(inner[0], Message):
            subject = header_value(inner[0], "Subject")
            return f"{subject}.eml" if subject else None
        return None

    def text(self, part: Message) -> str:
        """Readable text of ``part``; attachments under it are recorded on the way."""
        ctype = content_type(part)
        if ctype.startswith("multipart/") and not part.is_multipart():
            return self._unsplit(part, ctype)
        if ctype == "message/rfc822":
            self.attach(part)
            return self._attached_mail(part)
        if ctype == "text/calendar" and not part.is_multipart() and inline(part):
            # Outlook's invitation: the event is only in it (channels.email.calendar).
            method = part.get_param("method")
            event = calendar_text(part_text(part), method if isinstance(method, str) else None)
            if event is not None:
                return event
        if ctype in SMIME_TYPES or ctype == "multipart/encrypted":
            if (read := self._secured(part, ctype)) is not None:
                return read
        if not part.is_multipart() and is_attachment(part):
            self.attach(part)
            return ""
        if part.is_multipart():
            children = [c for c in part.get_payload() if isinstance(c, Message)]
            if ctype == "multipart/report":
                # A delivery or read report returns the mail it reports on (ours):
                # named, not read (channels.email.dsn says what it reports).
                children = [c for c in children if content_type(c) != "message/rfc822"]
                self.attachments.extend(
                    Attachment(kind="file", name=None, mime_type="message/rfc822", size=None)
                    for c in part.get_payload()
                    if isinstance(c, Message) and content_type(c) == "message/rfc822"
                )
            if ctype == "multipart/alternative":
                return self._alternative(children)
            if ctype == "multipart/signed" and children:
                for extra in children[1:]:
                    if content_type(extra) not in _SIGNATURE_TYPES:
                        self.attach(extra)
                return self.text(children[0])
            texts = [self.text(child) for child in children]
            return "\n\n".join(t.strip("\n") for t in texts if t.strip())
        if ctype == "text/plain" or ctype == "text":
            return unwrap_clearsigned(part_text(part))
        if ctype == "text/html":
            return html_to_text(part_text(part))
        if ctype.startswith("text/") and ctype not in ("text/calendar", "text/x-vcard"):
            return part_text(part)
        if ctype in _SIGNATURE_TYPES:
            return ""
        self.attach(part)
        return ""

    def _secured(self, part: Message, ctype: str) -> str | None:
        """The text of an opaque S/MIME signature's content, or the line standing for an
        encrypted part (:mod:`channels.email.secure`); None when ``part`` is neither
        (it is then named as a file)."""
        body = None if part.is_multipart() else payload_bytes(part)
        if notice := encrypted_notice(part, ctype, body):
            return notice
        inner = signed_mail(part, body) if body is not None else None
        if inner is None or self.depth >= _MAX_ATTACHED_DEPTH:
            return None
        # a signature inside a signature is the same walk one level down
        sub = Walker(self.depth + 1)
        sub.guesses = self.guesses
        text = sub.text(email.message_from_bytes(inner, policy=policy.default))
        self.guesses = sub.guesses
        self.attachments.extend(sub.attachments)
        return text

    def _attached_mail(self, part: Message) -> str:
        """An attached mail (a forward as attachment: Outlook's "Forward as
        Attachment", Apple Mail's forward of several mails) as a forward reads inline:
        a marker, its From/Date/Subject/To, its text. Only its name reached the turn,
        and the model could not read what the owner forwarded to it."""
        inner = part.get_payload()
        if not (isinstance(inner, list) and inner and isinstance(inner[0], Message)):
            return ""
        mail = inner[0]
        lines = ["---------- Forwarded message ---------"]
        lines += [f"{h}: {v}" for h in _FORWARDED_HEADERS if (v := header_value(mail, h))]
        if self.depth >= _MAX_ATTACHED_DEPTH:
            lines += ["", "[attached mail nested too deep: not read]"]
            return "\n".join(lines)
        sub = Walker(self.depth + 1)
        sub.guesses = self.guesses  # one budget for the whole mail
        try:
            body = sub.text(mail)
        except Exception:  # a defect in the attached mail: it stays named, unread
            body = "[attached mail could not be read]"
        self.guesses = sub.guesses
        named = [
            f"[{'attached mail' if a.mime_type == 'message/rfc822' else 'attachment'}: "
            f"{a.name or a.mime_type or 'file'}]"
            for a in sub.attachments
        ]
        return "\n".join([*lines, "", body.strip("\n"), *named]).strip("\n")

    def _unsplit(self, part: Message, ctype: str) -> str:
        """A multipart the parser could not split: its header names no boundary, or one
        the body never uses (broken mailers, hand-made mail). The body's first boundary
        line followed by a part's header is tried instead (a divider the sender typed,
        "------", is none: the text above it was lost as a preamble); without one the
        body is read as text. It used to be recorded as an attachment only, and the
        mail's text was lost."""
        body = payload_bytes(part)
        found = next(
            (m for m in _BOUNDARY_LINE.finditer(body) if _PART_HEADER.match(body, m.end())),
            None,
        )
        # Each guess parses the rest of the body again: a bounded number of them, so a
        # mail nesting thousands of such parts costs linear time, not quadratic.
        self.guesses += 1
        if found is not None and self.guesses <= _MAX_BOUNDARY_GUESSES:
            boundary = found.group(1).decode("ascii")
            header = f'Content-Type: {ctype}; boundary="{boundary}"\n\n'
            rebuilt = email.message_from_bytes(header.encode() + body, policy=policy.default)
            if rebuilt.is_multipart():
                # No header declared what comes before the first part a preamble, and a
                # client shows it: the sender's words there are kept, the notice is not.
                above = self._plain(body[: found.start()]).strip("\n")
                if _MIME_NOTICE.fullmatch(above):
                    above = ""
                below = self.text(rebuilt)
                return "\n\n".join(t.strip("\n") for t in (above, below) if t.strip())
        return self._plain(body)

    @staticmethod
    def _plain(body: bytes) -> str:
        text = decode_bytes(body, None).replace("\r\n", "\n").replace("\r", "\n")
        return html_to_text(text) if re.search(r"(?i)<(html|body|div|p)[\s>]", text) else text

    def _alternative(self, children: list[Message]) -> str:
        # Prefer text/plain, then HTML, then whatever nested structure carries text.
        # Attachments inside the unchosen alternatives are the same files in another
        # rendering: recorded only when the chosen one has none (below).
        by_pref = sorted(
            children,
            key=lambda c: {"text/plain": 0, "text/html": 1}.get(content_type(c), 2),
        )
        for child in by_pref:
            sub = self._sub_walk(child)
            if sub.text.strip():
                self.attachments.extend(sub.walker.attachments or self._files_beside(children))
                return sub.text
        return ""

    def _files_beside(self, children: list[Message]) -> list[Attachment]:
        """The files of the richest alternative that has any. An iPhone puts the photo
        the owner took in the HTML rendering only (plain text, then HTML and the image
        in a multipart): the plain text was chosen and the photo named nowhere (before
        session 24). Only a multipart alternative can hold a file: a plain or HTML leaf
        is not walked twice."""
        for child in reversed(children):
            if child.is_multipart():
                files = self._sub_walk(child).walker.attachments
                if files:
                    return files
        return []

    def _sub_walk(self, part: Message) -> _Walked:
        sub = Walker()
        sub.guesses = self.guesses  # one budget for the whole mail
        text = sub.text(part)
        self.guesses = sub.guesses
        return _Walked(text, sub)
