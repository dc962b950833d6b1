"""Where a forwarded message starts and ends in a mail's text, and what its headers say.

A forwarded message is not history but what the sender wants read: from a forward
marker on ("---------- Forwarded message ---------", "Begin forwarded message:",
"-------- Forwarded Message --------" and their translations, mutt's "----- Forwarded
message from <sender> -----") the text is kept as it is, up to where the client marks
the forward's end (:func:`forward_end`: an "End of Forwarded Message" line, mutt's
"----- End forwarded message -----", or the end of a ``>`` block the forward is quoted
in whole, headers too, followed by unquoted text). Nothing marking it, the forward runs
to the end.
:func:`forward_headers` reads its From, Date (or Sent) and Subject lines.

Which lines are the sender's own, history, or a forward (for a mail whose subject says
it is a forward, also an Outlook header block) is channels/email/quotes.py's to say;
this module knows the clients' marks.
"""

from __future__ import annotations

import re

_FORWARD = re.compile(
    r"^\s*([-=_*]{2,}\s*(forwarded message|weitergeleitete nachricht|message transféré|"
    r"mensaje reenviado|messaggio inoltrato|doorgestuurd bericht|mensagem encaminhada|"
    r"vidarebefordrat meddelande|videresendt meddelelse|videresendt melding|"
    r"wiadomość przekazana dalej|přeposlaná zpráva|пересылаемое сообщение)\s*[-=_*]{2,}|"
    r"begin forwarded message|anfang der weitergeleiteten nachricht|"
    r"début du message réexpédié|inicio del mensaje reenviado|inizio messaggio inoltrato|"
    r"begin doorgestuurd bericht)\s*(?::\s*)?$",
    re.IGNORECASE,
)
# Where a client marks a forwarded message's end (Thunderbird, Evolution, mutt, K-9 and
# their translations): what the sender types below it is theirs again. No two runs of
# spaces may meet in these patterns ("\s*[-=_*]*\s*:?\s*$" did, and was tried on every
# line below a forward): before session 42 a line of spaces took a time cubic in them,
# a 20 kB mail a minute and more.
_FORWARD_END = re.compile(
    r"^\s*(?:[-=_*]+\s*)?(end of (the )?forwarded (message|mail|e-?mail)|"
    r"end forwarded (message|mail)|ende der weitergeleiteten nachricht|"
    r"fin du message (transféré|réexpédié)|fin del mensaje reenviado|"
    r"fine (del )?messaggio inoltrato|einde (van het )?doorgestuurd bericht)"
    r"\s*(?:[-=_*]+\s*)?(?::\s*)?$",
    re.IGNORECASE,
)
# mutt's (and NeoMutt's) names the sender, "----- Forwarded message from Ana <a@x> -----"
# (its forward_attribution_intro), matched on the stripped line: before session 42 it
# was no marker, and the header block below it was dropped as a reply's history, the
# forwarded mail with it (its end, "----- End forwarded message -----", was known).
_MUTT_FORWARD = re.compile(r"[-=_*]{2,}\s*forwarded message from\s.*[-=_*]{2}", re.IGNORECASE)
_QUOTE = re.compile(r"^\s*>")  # (as quotes.py reads a quoted line)


def is_forward_marker(line: str) -> bool:
    """Whether ``line`` is a mail client's forward marker: a forwarded message starts."""
    return _FORWARD.match(line) is not None or _MUTT_FORWARD.fullmatch(line.strip()) is not None


def forward_end(lines: list[str], start: int) -> int:
    """The index past the last line of the forwarded message that starts at ``start``:
    past its client's end marker ("-------- End of Forwarded Message --------", a
    forward inside it ending at its own), else past the ``>`` block it is quoted in whole
    (headers quoted, from the line after the marker) when unquoted text follows that
    block; else the end of the text (nothing marks where it ends: what follows may be
    the forwarded mail's own, kept in it as before)."""
    depth = 1
    for k in range(start + 1, len(lines)):
        if is_forward_marker(lines[k]):
            depth += 1
        elif _FORWARD_END.match(lines[k]):
            depth -= 1
            if depth == 0:
                return k + 1
    # A forward quoted whole, its header lines too (the marker, then "> From: ..." at
    # once, as Apple Mail's plain text has it): it ends with the quote when the sender
    # writes on below it. Header lines NOT quoted are no such forward: a Gmail forward
    # of a mail that starts with a quote ("> Did you get the invoice?", the sender's
    # answer below it) has that shape, and this session's first rule read the sender's
    # words below the quote as the owner's (session 42, found by QA the same day).
    k = start + 1
    while k < len(lines) and not lines[k].strip():
        k += 1
    if k == len(lines) or not _quoted_header(lines[k]):
        return len(lines)
    last = k
    while k < len(lines) and (_QUOTE.match(lines[k]) or not lines[k].strip()):
        if lines[k].strip():
            last = k
        k += 1
    return last + 1 if k < len(lines) else len(lines)


# The header lines of a forwarded message, by what they say (the labels of the
# languages the markers above are in).
_FORWARD_HEADERS = {
    "from": ("from", "von", "de", "da", "van", "från", "fra", "od", "от"),
    "date": ("date", "sent", "datum", "gesendet", "envoyé", "date d'envoi", "enviado",
             "fecha", "inviato", "data", "verzonden", "skickat", "sendt", "wysłano"),
    "subject": ("subject", "betreff", "objet", "asunto", "oggetto", "onderwerp", "ämne",
                "emne", "temat", "předmět", "тема"),
}  # fmt: skip
# (a label, and a value, start and end with no space: "\s*\*?([^:*\n]{1,20}?)\s*:\s*\*?
# \s*(.*?)\s*$" let runs of spaces meet, and before session 42 one line of thousands of
# spaces below a forward marker took seconds, quadratic in them; a blank label, " : x",
# is no header line now)
_HEADER_LINE = re.compile(r"^\s*(?:\*\s*)?([^:*\s][^:*\n]{0,19}?)\s*:\s*(?:\*\s*)?(.*\S)?\s*$")


def forward_headers(block: str) -> dict[str, str]:
    """From, Date (or Sent) and Subject of a forwarded ``block``, as its header lines
    (the first that say each, before its first blank line after them) give them."""
    found: dict[str, str] = {}
    started = False
    for line in block.split("\n")[:30]:
        if not line.strip():
            if started:
                break
            continue
        match = _HEADER_LINE.match(line)
        if match is None:
            if started:
                break
            continue
        started = True
        label = match.group(1).strip().lower()
        for key, labels in _FORWARD_HEADERS.items():
            if label in labels and key not in found and match.group(2):
                found[key] = match.group(2)
    return found


def _quoted_header(line: str) -> bool:
    """Whether ``line`` is a header line of a forward quoted whole ("> From: Ana")."""
    quote = _QUOTE.match(line)
    return quote is not None and _HEADER_LINE.match(line[quote.end() :]) is not None
