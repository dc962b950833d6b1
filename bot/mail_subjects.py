"""Mail subjects: reply and forward prefixes in the languages clients write them.

Plain string functions, the one rule for both sides: the e-mail channel folds a reply's
subject with them (``Re: `` once) and the core's thread finder (bot/resolver.py) compares
subjects with them when a reply lost its In-Reply-To and References. Before session 23
each had its own list, and the core's knew only ``Re:``/``AW:``/``SV:`` and no tags: a
reply ``Antw: Trip`` or ``RE: [EXTERNAL] Trip`` without headers started a new
conversation although the channel answered it as ``Re: Trip``. Our own Message-IDs'
form (:func:`own_message_id`) is the same kind of rule: the channel writes them, the
thread finder recognises them.
"""

from __future__ import annotations

import re

from bot.graphemes import ELLIPSIS, cut

# "Re:", "RE:", "Re[2]:", "Re: Re:", "AW:", "SV:", "Antw:", "Odp:", "回复:"... in any mix
# (Hungarian "Vá:", Greek "ΑΠ:"/"Σχετ:", Croatian/Serbian "Odg:" too).
_REPLY_PREFIX = re.compile(
    r"^\s*((re|aw|sv|vs|antw|antwort|odp|ynt|atb|r|rif|res|vá|απ|σχετ|odg|回复|回覆|答复)"
    r"(\s*\[\d+\]|\s*\(\d+\))?\s*[:：]\s*)+",
    re.IGNORECASE,
)
# "Fwd:", "FW:", "WG:" (German), "TR:" (French), "RV:" (Spanish), "ENC:" (Portuguese),
# Outlook's "I:" (Italian), "VB:" (Swedish), "VL:" (Finnish), "PD:" (Polish), "İLT:"
# (Turkish), "转发:" / "轉寄:" (Chinese): without them the forwarded mail below its header
# block was cut as quoted history, and "pay this invoice" reached the model without it.
# A subject misread as a forward only keeps more of its text.
_FORWARD_PREFIX = re.compile(
    r"^\s*((fwd?|wg|tr|rv|enc|doorst|i|vb|vl|pd|i̇lt|ilt|转发|轉寄|轉發)"
    r"(\s*\[\d+\]|\s*\(\d+\))?\s*[:：]\s*)+",
    re.IGNORECASE,
)
# What a reply to a mail that has no subject is titled. It was "Re:" alone, which every
# client lists as an empty subject (session 41). Gmail, Outlook and Thunderbird show such
# a mail as "(no subject)", and some clients send that text as its subject: it is no
# subject of the thread's, folded away like a prefix (a reply to our "Re: (no subject)"
# has the thread's empty subject, never starts a "Subject:" line or a changed subject,
# and is answered "Re: (no subject)" again, not "Re: (no subject)" twice).
NO_SUBJECT = "(no subject)"
# The longest subject we write, in characters (session 41: a 5,000-character subject,
# spam or a pasted paragraph, came back whole in our "Re: ..." and in what the owner was
# told of the mail). Gmail shows about 130 characters of one, Outlook fewer; 200 keeps
# every word a person gives a subject, and its UTF-8 (800 bytes at most) folds within
# RFC 5322's lines of 998 octets whether it goes raw (SMTPUTF8) or encoded (RFC 2047).
MAX_SUBJECT = 200
# A tag a gateway or a ticket system puts before the subject ("[EXTERNAL]", "[Ticket #1]"),
# which mail clients then put their own "RE:" before: "RE: [EXTERNAL] Re: Trip".
_TAG = re.compile(r"^\s*(\[[^\[\]\r\n]{1,64}\])\s*")


def _folded(subject: str | None, *, forwards: bool = False) -> tuple[bool, str]:
    """(whether ``subject`` starts with a reply prefix, possibly after tags; the subject
    without its reply prefixes, and its forward prefixes too with ``forwards``). The tags
    among them are kept, each once, in their order: ``RE: [EXTERNAL] Re: [EXTERNAL] Trip``
    is ``[EXTERNAL] Trip``. A company's gateway tags every mail from outside and Outlook
    puts its ``RE:`` before the tag: only the prefixes before the first tag were folded,
    and each round of replies added a ``Re:`` and a tag."""
    rest, tags, replied = subject or "", [], False
    while True:
        if found := _REPLY_PREFIX.match(rest):
            replied = True
        elif forwards and (found := _FORWARD_PREFIX.match(rest)):
            pass
        elif (found := _TAG.match(rest)) and rest[found.end() :].strip():
            if found.group(1) not in tags:
                tags.append(found.group(1))
        else:
            break
        rest = rest[found.end() :]
    if rest.strip().casefold() == NO_SUBJECT:
        rest = ""
    return replied, " ".join([*tags, rest.strip()]).strip()


def is_reply_subject(subject: str | None) -> bool:
    """Whether ``subject`` starts with a reply prefix (``Re:``, ``AW:``, ``SV:``...),
    also after a tag (``[EXTERNAL] RE: Trip``)."""
    return _folded(subject)[0]


def is_forward_subject(subject: str | None) -> bool:
    """Whether ``subject`` starts with a forward prefix (``Fwd:``, ``WG:``, ``TR:``...)."""
    return bool(_FORWARD_PREFIX.match(subject or ""))


def subject_base(subject: str | None) -> str:
    """``subject`` without its reply prefixes, case and spacing: what two mails of one
    thread have in common (``Re: Trip`` and ``AW: RE: trip``)."""
    return " ".join(_folded(subject)[1].casefold().split())


def thread_subject(subject: str | None) -> str:
    """:func:`subject_base` without forward prefixes either: what the thread finder
    compares (a conversation started by ``Fwd: Invoice`` is answered ``Re: Invoice``
    by some clients)."""
    return " ".join(_folded(subject, forwards=True)[1].casefold().split())


def bare_subject(subject: str | None) -> str:
    """``subject`` without its reply and forward prefixes, as written (case kept; tags
    kept, each once): what a title is made of (bot/lifecycle/titles.py)."""
    return _folded(subject, forwards=True)[1]


def reply_subject(subject: str | None) -> str:
    """``Re: <subject>`` with any existing reply prefixes (in any language) folded;
    ``Re: (no subject)`` for a mail without one (:data:`NO_SUBJECT`); at most
    :data:`MAX_SUBJECT` characters (:func:`capped_subject`)."""
    base = _folded(subject)[1]
    return f"Re: {capped_subject(base or NO_SUBJECT, MAX_SUBJECT - 4)}"


def capped_subject(subject: str, limit: int = MAX_SUBJECT) -> str:
    """``subject`` when it has at most ``limit`` characters, else its start, cut between
    two words (on a grapheme boundary in a script written without spaces, or a word
    longer than half of it), white space collapsed, and an ellipsis: ``limit``
    characters at most. What we write of someone else's subject: :func:`same_subject`
    knows the cut one for the whole, so threading goes on."""
    if len(subject) <= limit:
        return subject
    text = " ".join(subject.split())
    if len(text) <= limit:
        return text
    kept = cut(text, limit - len(ELLIPSIS))
    space = kept.rfind(" ")
    if text[len(kept)] != " " and space >= limit // 2:
        kept = kept[:space]  # the word cut in two is left out
    return kept.rstrip() + ELLIPSIS


def same_subject(one: str, other: str) -> bool:
    """Whether two subjects compared as :func:`subject_base` or :func:`thread_subject`
    gives them are one thread's: equal, or one is the other cut by :func:`capped_subject`
    (our answer to a long subject, and the replies to it, carry the cut one)."""
    if one == other:
        return True
    short, whole = sorted((one, other), key=len)
    return (
        short.endswith(ELLIPSIS)
        and len(short) > MAX_SUBJECT // 3  # a cut one, not a subject ending in "…"
        and whole.startswith(short[: -len(ELLIPSIS)].rstrip())
    )


# How the Message-IDs of the mails the e-mail channel sends begin (channels/email/
# outgoing.py's ``stable_message_id``), before ``<digest>@<our domain>>``.
OWN_ID_PREFIX = "<my-agent."


def own_message_id(ref: str, address: str | None) -> bool:
    """Whether ``ref`` is a Message-ID of a mail we sent from ``address`` (our prefix,
    its domain): a reply to it is a reply to us, also when our record of it is gone."""
    domain = (address or "").rpartition("@")[2].strip().lower()
    ref = ref.strip().lower()
    return bool(domain) and ref.startswith(OWN_ID_PREFIX) and ref.endswith(f"@{domain}>")
