"""Building outgoing mail: threaded replies that every client files in the right thread.

A reply is From the assistant (with its display name), To the sender (and, with
reply-all, the original To/Cc minus ourselves), has a single ``Re:`` prefix, an
``In-Reply-To`` naming the message answered and a ``References`` chain that accumulates
the thread (RFC 5322 section 3.6.4), our own ``Message-ID``, a ``Date``, and a UTF-8
body: the text as written (text/plain) and, as its alternative, the text's Markdown shown
as HTML (:mod:`channels.email.html_body`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

from bot.events import utcnow
from bot.mail_subjects import capped_subject, is_reply_subject, reply_subject, subject_base
from channels.email.html_body import html_body
from channels.email.id_folding import MAIL_POLICY

# The reply prefixes are the core's (bot/mail_subjects.py), one rule for the reply's
# subject and the thread finder; re-exported here for the channel's modules.
__all__ = ["is_reply_subject", "reply_subject", "subject_base"]

_CONTROL = re.compile(r" *[\x00-\x1f\x7f]+ *")
# References headers grow with a thread; keep the first and the most recent ids when it
# gets long (the RFC 5322 advice), which keeps every client's threading intact.
MAX_REFERENCES = 20
# Reply-To addresses answered at most (people name one, now and then two or three)
MAX_REPLY_TO = 5


def one_line(value: str) -> str:
    """``value`` made safe for a header: every line break (CR, LF, U+2028, and whatever
    else :meth:`str.splitlines` splits on, which the email policy refuses) and every
    other control character (a NUL, which RFC 5322 forbids anywhere in a mail, an
    escape: the policy writes them raw) becomes one space with the spaces around it.
    Subjects and names come from other people's mail (RFC 2047 can encode any of them)."""
    value = _CONTROL.sub(" ", value)
    return " ".join(part.strip() for part in value.splitlines() if part.strip())


def well_formed(text: str) -> str:
    """``text`` with its surrogates as a mail can carry them: a pair split in two (as
    text put together from pieces may hold it) joined, a lone one made U+FFFD. Python
    cannot encode either, and a reply that cannot be encoded fails the same way on
    every retry."""
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def references_chain(references: Iterable[str], in_reply_to: str | None) -> list[str]:
    """The References of a reply: the parent's References, then the parent's Message-ID.

    Duplicates are dropped (first occurrence wins) and very long chains keep the thread
    root plus the most recent ids.
    """
    out: list[str] = []
    seen: set[str] = set()
    for ref in [*references, *([in_reply_to] if in_reply_to else [])]:
        ref = ref.strip()
        if ref and ref not in seen:
            seen.add(ref)
            out.append(ref)
    if len(out) > MAX_REFERENCES:
        out = [out[0], *out[-(MAX_REFERENCES - 1) :]]
    return out


def reply_recipients(
    sender: str | Sequence[str],
    original_to: Sequence[str],
    original_cc: Sequence[str],
    ourselves: Iterable[str],
    reply_all: bool,
) -> tuple[list[str], list[str]]:
    """(To, Cc) of a reply; ourselves are never among them, nobody appears twice.
    ``sender``: whom the reply answers, the mail's From or the addresses of its
    Reply-To (:func:`answer_addresses`)."""
    me = {a.lower() for a in ourselves}
    seen: set[str] = set(me)
    to: list[str] = []
    cc: list[str] = []
    answered = [sender] if isinstance(sender, str) else list(sender)
    for addr in [*answered, *(original_to if reply_all else [])]:
        if addr and addr.lower() not in seen:
            seen.add(addr.lower())
            to.append(addr)
    if reply_all:
        for addr in original_cc:
            if addr and addr.lower() not in seen:
                seen.add(addr.lower())
                cc.append(addr)
    return to, cc


def answer_addresses(
    sender: str, reply_to: Iterable[str], owner: Collection[str] = ()
) -> list[str]:
    """Whom a reply to a mail from ``sender`` goes to: the addresses its ``Reply-To``
    names, when it names any (RFC 5322 section 3.6.3: where the author asks replies to
    be sent; every mail client answers there), else ``sender``. Before session 23 the
    header was read and never used: the owner writing from one address and asking to
    be answered at another was answered at the first.

    A mail from one of ``owner`` (the owner's addresses, lower case) is answered at the
    owner's addresses only: its Reply-To is followed where it names another of them,
    never to anyone else (:func:`owner_reply_to`)."""
    named = list(dict.fromkeys(a.strip().lower() for a in reply_to if "@" in a.strip()))
    named = owner_reply_to(sender, named, owner)
    # A From names one address; a Reply-To of hundreds would make one mail of a
    # stranger's (an acknowledgement) mail as many people.
    return named[:MAX_REPLY_TO] or [sender]


def owner_reply_to(sender: str, reply_to: list[str], owner: Collection[str]) -> list[str]:
    """``reply_to`` (lower case) as far as it is followed for a mail from ``sender``:
    whole for anyone but the owner; for the owner, only the owner's own addresses. The
    owner's answer is written with the owner's context, and a Reply-To proves nothing:
    DKIM vouches for From, and a signature that leaves Reply-To out still passes with
    one added by whoever resends the owner's signed mail (session 27: it went there)."""
    if sender.lower() not in owner:
        return reply_to
    return [a for a in reply_to if a in owner]


@dataclass(frozen=True)
class ComposedMail:
    message: EmailMessage
    message_id: str
    recipients: list[str]


def _address(addr: str, name: str | None = None) -> Address:
    local, _, domain = addr.partition("@")
    return Address(display_name=name or "", username=local, domain=domain)


def compose(
    *,
    from_addr: str,
    display_name: str | None,
    to: Sequence[str],
    cc: Sequence[str] = (),
    subject: str,
    text: str,
    in_reply_to: str | None = None,
    references: Sequence[str] = (),
    extra_headers: dict[str, str] | None = None,
    message_id: str | None = None,
    literal: bool = False,
) -> ComposedMail:
    """A ready-to-send message; ``message_id`` defaults to a fresh one in our domain.
    ``literal``: its HTML shows ``text`` as written, not as Markdown."""
    domain = from_addr.rpartition("@")[2] or "localhost"
    # ids never written as encoded words; bodies in 7 bits (quoted-printable or base64 as
    # the email package picks): a short non-ASCII reply went out as 8bit without
    # BODY=8BITMIME, which RFC 6152 forbids and a 7-bit relay mangles (before session 40)
    msg = EmailMessage(policy=MAIL_POLICY.clone(cte_type="7bit"))
    message_id = message_id or make_msgid(domain=domain)
    msg["From"] = _address(from_addr, one_line(display_name or ""))
    msg["To"] = [_address(a) for a in to]
    if cc:
        msg["Cc"] = [_address(a) for a in cc]
    # capped (session 41): the email package folds it in lines of 78 (RFC 2047 encoded
    # words when it is not ASCII), and 200 characters fit 998 octets even raw (SMTPUTF8)
    msg["Subject"] = capped_subject(one_line(subject))
    msg["Date"] = format_datetime(utcnow())
    msg["Message-ID"] = message_id
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    if references:
        msg["References"] = " ".join(references)
    for name, value in (extra_headers or {}).items():
        msg[name] = one_line(value)
    text = text if text.endswith("\n") else text + "\n"
    msg.set_content(text, charset="utf-8")
    html = html_body(text, literal=literal)
    if html is not None:
        msg.add_alternative(html, subtype="html", charset="utf-8")
        # the email package repeats the mail's MIME-Version in the part it adds
        for part in msg.iter_parts():
            del part["MIME-Version"]
        msg.set_boundary(_boundary(message_id, text, html))
    return ComposedMail(message=msg, message_id=message_id, recipients=[*to, *cc])


def _boundary(message_id: str, *parts: str) -> str:
    """The MIME boundary of the mail ``message_id``: the same at every retry (the email
    package draws a random one each time), and in none of its ``parts``."""
    seed = hashlib.sha256(message_id.encode("utf-8", "replace")).hexdigest()
    boundary = f"=_my-agent_{seed[:32]}"
    while any(boundary in part for part in parts):  # a text quoting a mail of ours
        seed = hashlib.sha256(seed.encode()).hexdigest()
        boundary = f"=_my-agent_{seed[:32]}"
    return boundary


def render_actions(text: str, actions: Sequence[tuple[str, str]]) -> str:
    """Mail has no buttons: list an escalation's actions as commands to reply with."""
    missing = [(label, cmd) for label, cmd in actions if cmd not in text]
    if not missing:
        return text  # the text already names every command
    lines = [text.rstrip(), "", "Reply with one of these commands (first line of your reply):"]
    lines.extend(f"  {command}    ({label})" for label, command in missing)
    return "\n".join(lines)
