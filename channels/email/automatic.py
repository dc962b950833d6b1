"""Whether a mail was sent by a machine: an auto-responder, a mailing list, a delivery or
read report, a calendar's answer to an invitation. Answering such mail risks a mail loop
(two machines answering each other for ever), and nobody waits for the answer: it is
recorded, never answered (:mod:`channels.email.inbound` hands it over unaddressed)."""

from __future__ import annotations

import re
from email.message import Message

from channels.email.compose import is_reply_subject
from channels.email.decoding import header_value, raw_header
from channels.email.mime import content_type

# Headers only automatic mail carries: auto-responders' own, and mailing lists' (RFC 2369,
# RFC 2919: newsletters, list traffic, notifications).
_AUTOMATIC_HEADERS = ("X-Autoreply", "X-Autorespond", "List-Id", "List-Unsubscribe")
# The subject Exchange and Outlook give an out-of-office reply, in the recipient's language
# ("Automatic reply:", before Exchange 2010 "Out of Office:"; "Automatische Antwort:",
# "Réponse automatique :", ...), always followed by a colon.
_AUTO_REPLY_SUBJECT = re.compile(
    r"^\s*(automatic reply|auto[- ]?reply|auto response|out of (the )?office|"
    r"automatische antwort|abwesenheitsnotiz|réponse automatique|respuesta automática|"
    r"risposta automatica|resposta automática|automatisch antwoord|autosvar|"
    r"automatisk svar|automaattinen vastaus|automatyczna odpowiedź|automatická odpověď|"
    r"otomatik yanıt|автоматический ответ|自動応答|自动回复)\s*:",
    re.IGNORECASE,
)


def is_auto_reply_subject(subject: str) -> bool:
    """Whether ``subject`` is one an auto-responder gives its answer ("Automatic reply:
    ...", "Out of Office: ...", in a dozen languages)."""
    return bool(_AUTO_REPLY_SUBJECT.match(subject))


def is_automatic(msg: Message, sender: str | None) -> bool:
    """RFC 3834 auto-replies, bounces and bulk mail (answering them risks mail loops)."""
    auto = header_value(msg, "Auto-Submitted").lower()
    if auto and auto != "no":
        return True
    for name in ("Precedence", "X-Precedence"):
        if header_value(msg, name).lower() in ("bulk", "junk", "list", "auto_reply"):
            return True
    if any(raw_header(msg, name) for name in _AUTOMATIC_HEADERS):
        return True
    # Exchange's out-of-office reply has no Auto-Submitted: it says what it is with
    # X-Auto-Response-Suppress and its subject. The header alone is no sign (Exchange
    # adds it to ordinary mail too: the owner's own mail would go unanswered), nor is
    # the subject alone (a person may type "Out of office next week: ...").
    subject = header_value(msg, "Subject")
    suppress = header_value(msg, "X-Auto-Response-Suppress").strip().lower()
    if suppress and suppress != "none" and _AUTO_REPLY_SUBJECT.match(subject):
        return True
    # An auto-responder with no header to say so (hosting panels' vacation scripts,
    # old Exchange rules) names itself in the subject it gives its answer: "Out of
    # Office: Re: Trip". A person never types that in front of a reply's subject.
    if (found := _AUTO_REPLY_SUBJECT.match(subject)) and is_reply_subject(subject[found.end() :]):
        return True
    # A null envelope sender (RFC 5321: bounces, and the auto-replies of servers that
    # follow RFC 3834) and delivery/read reports (multipart/report) want no answer.
    if header_value(msg, "Return-Path").replace(" ", "") == "<>":
        return True
    if content_type(msg) == "multipart/report":
        return True
    return _unattended(sender or "")


def _unattended(sender: str) -> bool:
    """Whether ``sender``'s mailbox says nobody reads it: mailer-daemon, postmaster, and
    every spelling of "no reply" in its local part ("no_reply", "do-not-reply",
    "notifications-noreply", "noreply+tag"). Only three exact names were caught before
    session 40: Apple's and LinkedIn's receipts got an acknowledgement, or a known
    contact's paid answer, that went nowhere."""
    local = sender.split("@", 1)[0].lower()
    if local in ("mailer-daemon", "postmaster"):
        return True
    squeezed = re.sub(r"[-_.]", "", local.split("+", 1)[0])
    return "noreply" in squeezed or "donotreply" in squeezed
