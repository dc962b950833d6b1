"""Mail for a server without SMTPUTF8 (RFC 6531): what can still be said in ASCII.

A recipient with an accented domain (``ben@bücher.example``) has an ASCII form (IDNA);
one with an accented local part (``jöhn@example.de``) has none and is left out, the
mail going to the others with headers naming only them. A non-ASCII Message-ID among
those a reply threads under (RFC 6532) is left out of its In-Reply-To/References.
:class:`channels.email.smtp.SmtpSender` uses these when the server refuses SMTPUTF8.
"""

from __future__ import annotations

import copy
from email.headerregistry import Address
from email.message import EmailMessage

_REFS = ("In-Reply-To", "References")


def utf8_refs(message: EmailMessage) -> bool:
    """Whether ``message`` names a non-ASCII Message-ID in In-Reply-To or References."""
    return any(not str(message.get(name, "")).isascii() for name in _REFS)


def ascii_refs(message: EmailMessage) -> EmailMessage:
    """A copy of ``message`` whose In-Reply-To and References keep their ASCII ids only."""
    out = copy.deepcopy(message)
    for name in _REFS:
        ids = [i for i in str(out.get(name, "")).split() if i.isascii()]
        del out[name]
        if ids:
            out[name] = " ".join(ids)
    return out


def ascii_address(addr: str) -> str | None:
    """``addr`` as a server without SMTPUTF8 takes it, or None: an accented local part
    has no ASCII form; an accented domain has one (IDNA)."""
    if addr.isascii():
        return addr
    local, _, domain = addr.rpartition("@")
    if not local.isascii():
        return None
    try:
        return f"{local}@{domain.encode('idna').decode('ascii')}"
    except UnicodeError:
        return None


def readdressed(message: EmailMessage, ascii_form: dict[str, str | None]) -> EmailMessage:
    """A copy of ``message`` whose To and Cc name each recipient in its ASCII form and
    leave out those without one (a header naming them could not be sent either)."""
    out = copy.deepcopy(message)
    kept: dict[str, list[Address]] = {}
    for name in ("To", "Cc"):
        header = out[name]
        del out[name]
        kept[name] = []
        for addr in getattr(header, "addresses", ()):
            new = ascii_form.get(addr.addr_spec, ascii_address(addr.addr_spec))
            if new is not None:
                local, _, domain = new.rpartition("@")
                kept[name].append(Address(addr.display_name, local, domain))
    if not kept["To"]:  # the sender was the one left out: the others become the To
        kept["To"], kept["Cc"] = kept["Cc"], []
    for name, addresses in kept.items():
        if addresses:
            out[name] = addresses
    return out
