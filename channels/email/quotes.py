"""Quoted history and signature stripping: what the sender actually wrote this time.

The body of a reply usually carries the whole thread below (or around) the new text.
:func:`strip_reply` keeps only the visible reply; the channel stores the full body in the
turn's metadata. The rules, in order:

* everything from an "original message" marker on is history: ``-----Original
  Message-----`` (and its translations), a line of underscores (Outlook, mailing-list
  footers), an Outlook header block (``From:`` followed by ``Sent:``/``To:``/``Subject:``,
  also in bold ``*From:*`` and in other languages);
* an attribution line ("On <date>, <name> wrote:", possibly wrapped over three lines, or
  its French, German, Spanish, Italian, Dutch, Portuguese, Scandinavian, Polish, Czech,
  Russian, Finnish or Hungarian variants, or any line naming an address in angle brackets
  and ending with a colon right above ``>`` quotes: Gmail's Japanese, Chinese, Korean,
  Turkish... orders) is dropped; when ``>`` quotes follow, the reply
  may be inline (text between quote blocks is kept), otherwise the history is unquoted
  and everything after the attribution is dropped;
* ``>`` lines are dropped;
* in each remaining block, a ``-- `` delimiter starts a signature, and a trailing mobile
  signature ("Sent from my iPhone", "Get Outlook for Android", "Von meinem iPhone
  gesendet", ...) or a ``-Name`` sign-off is dropped.

A forwarded message is not history but what the sender wants read: from a forward marker
on (channels/email/forward_marks.py; for a mail whose subject says it is a forward, also
an Outlook header block) the text is kept as it is, up to where the client marks the
forward's end: what the sender wrote below it is stripped like a reply again.

If nothing is left (a message that is all quote), the full text is returned rather than
an empty turn. Runs in time linear in the number of lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from channels.email.forward_marks import forward_end, is_forward_marker

_ORIGINAL = re.compile(
    r"^\s*[-=_*]{2,}\s*(original message|original|ursprüngliche nachricht|message d'origine|"
    r"mensaje original|messaggio originale|oorspronkelijk bericht|mensagem original|"
    r"ursprungligt meddelande|oprindelig meddelelse|opprinnelig melding|"
    r"wiadomość oryginalna|původní zpráva|исходное сообщение|alkuperäinen viesti)"
    r"\s*[-=_*]{2,}\s*$",
    re.IGNORECASE,
)
_UNDERSCORES = re.compile(r"^\s*_{20,}\s*$")
# (":\s*\*?\s*\S" let two runs of spaces meet: a "From:" followed by thousands of
# spaces took a time quadratic in them, on every line of every mail, before session 42)
_HEADER_FROM = re.compile(
    r"^\s*\*?(from|von|de|da|van|från|fra|od|от|lähettäjä|feladó)\s*:\s*(?:\*\s*)?\S",
    re.IGNORECASE,
)
_HEADER_OTHER = re.compile(
    r"^\s*\*?(sent|date|to|cc|subject|gesendet|datum|an|betreff|envoyé|date d'envoi|à|objet|"
    r"enviado|fecha|para|asunto|inviato|data|a|oggetto|verzonden|aan|onderwerp|skickat|"
    r"till|ämne|sendt|til|emne|wysłano|do|temat|odesláno|komu|předmět|отправлено|кому|"
    r"тема|lähetetty|vastaanottaja|aihe|elküldve|címzett|tárgy)\s*:",
    re.IGNORECASE,
)
# The labels only a mail header block has: "From/To/Date" alone is just as likely to be
# a request ("Book me a flight: From: Berlin / To: Lisbon / Date: Friday").
_HEADER_STRONG = {
    "sent", "subject", "gesendet", "betreff", "envoyé", "date d'envoi", "objet", "enviado",
    "asunto", "inviato", "oggetto", "verzonden", "onderwerp", "skickat", "ämne", "sendt",
    "emne", "wysłano", "temat", "odesláno", "předmět", "отправлено", "тема", "lähetetty",
    "aihe", "elküldve", "tárgy",
}  # fmt: skip
# The first word(s) of an attribution line in the languages mail clients ship with.
_ATTRIBUTION_START = re.compile(
    r"^\s*(on|le|am|el|il|op|em|den|på|w dniu|dne|dnia|\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}|"
    r"\d{1,2}\s+\w+\.?\s+\d{4}|\w+,\s)",
    re.IGNORECASE,
)
_ATTRIBUTION_END = re.compile(
    r"(wrote|writes|a écrit|schrieb|hat geschrieben|escribió|ha scritto|scrisse|schreef|"
    r"escreveu|skrev|pisze|napisał\(a\)|napisał|napsal\(a\)|napsal|написал\(а\)|написала|"
    r"написал|kirjoitti|írta|yazdı)(?!\w)(\s*|\s.{0,200})[:：]\s*$",
    re.IGNORECASE,
)
# A date-first attribution without a verb: "2014-01-09 2:47 GMT+01:00 George <g@x.com>:"
_ATTRIBUTION_DATE_ADDR = re.compile(r"^\s*\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}\b.{0,200}@.{0,100}:\s*$")
_SIG_DELIMITER = re.compile(r"^--\s*$")
_MOBILE = re.compile(
    r"^\s*("
    r"sent from my \S+( \S+){0,3}|"
    r"(sent|envoyé|enviado|inviato|gesendet|verzonden|skickat|sendt|wysłane) "
    r"(from|with|via|using|de|desde|da|von|vanaf|från|fra|z|con|com) "
    r"(my |mon |ma |mi |il mio |meinem |mijn |min |mój |mého |meu )?"
    r"(iphone|ipad|ipod|android|blackberry|samsung|galaxy|mobile|phone|huawei|pixel|mail|"
    r"outlook|yahoo|gmail|aol|proton ?mail|tutanota|fastmail|spark|airmail|bluemail|"
    r"edison|nine|windows|smartphone|handy|tablet|cellulare|teléfono|telefono|móvil|"
    r"movil|celular|apple watch)\b[^,;]{0,50}|"
    r"von meinem \S+( \S+){0,2} gesendet|"
    # Outlook mobile's, in the languages it ships with ("Get Outlook for iOS", "Outlook
    # für Android herunterladen", ...), its link glued on or, from HTML, after a space
    r"(get|obtener|descargar|obtenir|télécharger|scarica|ottieni|obter o|baixe o|pobierz) "
    r"outlook (for|para|pour|per|dla) (ios|android)\S*|"
    r"outlook (für|voor|för|for) (ios|android) (beziehen|herunterladen|downloaden|hämta)"
    r")(\s*<https?://[^>\s]*>)?\s*$",
    re.IGNORECASE,
)
_SIGNOFF_DASH = re.compile(r"^-[A-Z][\w.']*( [\w.']+){0,2}\s*$")
_DASH_ITEM = re.compile(r"^\s*-\S")
_DECORATION = re.compile(r"^[\s\-_=*~]*$")
_QUOTE = re.compile(r"^\s*>")

_TEXT, _QUOTED, _DROPPED = 0, 1, 2


def _wrapped(lines: list[str], i: int) -> Iterator[tuple[int, str]]:
    """Line ``i`` and up to two more joined (an attribution wraps), as (its last index,
    the text so far) in turn; ends at a blank or quoted line, or past 400 characters."""
    joined = ""
    for j in range(i, min(i + 3, len(lines))):
        line = lines[j].strip()
        if not line or _QUOTE.match(lines[j]):
            return
        joined = f"{joined} {line}" if joined else line
        if len(joined) > 400:
            return
        yield j, joined


def _quote_follows(lines: list[str], j: int) -> bool:
    """Whether the first line after ``j`` that is not blank is quoted."""
    nxt = j + 1
    while nxt < len(lines) and not lines[nxt].strip():
        nxt += 1
    return nxt < len(lines) and bool(_QUOTE.match(lines[nxt]))


def _attribution_end(lines: list[str], i: int) -> int | None:
    """If an attribution starts at line ``i``, the index of its last line."""
    if not _ATTRIBUTION_START.match(lines[i]) and not _ATTRIBUTION_DATE_ADDR.match(lines[i]):
        return None
    for j, joined in _wrapped(lines, i):
        if _ATTRIBUTION_END.search(joined) or (j == i and _ATTRIBUTION_DATE_ADDR.match(joined)):
            return j
    return None


# "<bot@example.com>:" at the end of a line: an attribution in any language and order
_ADDRESS_COLON = re.compile(r"<[^<>\s]+@[^<>\s]+>.{0,200}[:：]\s*$")


def _addressed_attribution(lines: list[str], i: int) -> int | None:
    """The last line of an attribution that names an address in angle brackets and ends
    with a colon, when quoted lines follow it: the verb and the date's order differ in
    every language ("сб, 28 нояб. 2026 г. в 19:23, Name <a@b>:", "Name <a@b> 于...写道：",
    "2026年11月28日(土) 19:17 Name <a@b>:"), and those without a verb the start rule knows
    stayed in the owner's text."""
    for j, joined in _wrapped(lines, i):
        if _ADDRESS_COLON.search(joined):
            return j if _quote_follows(lines, j) else None
    return None


def _outlook_block(lines: list[str], i: int) -> bool:
    """``From:`` followed within six lines by at least two of Sent/To/Subject/Cc/Date, one
    of them Sent or Subject unless the From line holds an address."""
    if not _HEADER_FROM.match(lines[i]):
        return False
    seen: set[str] = set()
    for line in lines[i + 1 : i + 7]:
        match = _HEADER_OTHER.match(line)
        if match:
            seen.add(match.group(1).lower())
    return len(seen) >= 2 and ("@" in lines[i] or bool(seen & _HEADER_STRONG))


def _classify(lines: list[str]) -> list[int]:
    kinds = [_TEXT] * len(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if _QUOTE.match(line):
            kinds[i] = _QUOTED
            i += 1
            continue
        if _ORIGINAL.match(line) or _UNDERSCORES.match(line) or _outlook_block(lines, i):
            for k in range(i, len(lines)):
                kinds[k] = _DROPPED
            break
        end = _attribution_end(lines, i)
        if end is None:
            end = _addressed_attribution(lines, i)
        if end is not None:
            if _quote_follows(lines, end):
                for k in range(i, end + 1):
                    kinds[k] = _DROPPED
                i = end + 1
                continue
            if not re.search(r"[\d@]", " ".join(lines[i : end + 1])):
                # Every client's attribution has a date or an address; "On the budget,
                # Anna wrote:" followed by the sender's own words is not one.
                i += 1
                continue
            # Unquoted history (Gmail's plain part of some clients, Apple Mail
            # forwards rendered flat): everything below the attribution is old.
            for k in range(i, len(lines)):
                kinds[k] = _DROPPED
            break
        i += 1
    return kinds


def _strip_signature(block: list[str]) -> list[str]:
    """Remove a signature from one block of the sender's own text."""
    for idx, line in enumerate(block):
        if _SIG_DELIMITER.match(line):
            block = block[:idx]
            break
    # Trailing mobile signatures and "-Name" sign-offs (only as the last words).
    while True:
        last = len(block) - 1
        # (a rule left of the history's <hr> hides the signature above it: skipped)
        while last >= 0 and _DECORATION.match(block[last]):
            last -= 1
        if last < 0:
            return []
        tail = block[last]
        if _MOBILE.match(tail) or (_SIGNOFF_DASH.match(tail) and _after_text(block, last)):
            block = block[:last]
            continue
        return block[: last + 1]


def _after_text(block: list[str], last: int) -> bool:
    """Whether the line before ``block[last]`` is prose, so that a ``-Name`` there is a
    sign-off and not the last item of a list typed with dashes ("-eggs", "-Milk")."""
    prev = last - 1
    while prev >= 0 and not block[prev].strip():
        prev -= 1
    if prev < 0:
        return False
    line = block[prev].rstrip()
    return not _DASH_ITEM.match(line) and not line.endswith(":")


def _forward_start(lines: list[str], kinds: list[int], forward: bool) -> int | None:
    """The line a forwarded message starts at: a forward marker in the sender's text, or
    (``forward``) the first line of what looks like history."""
    for i, (line, kind) in enumerate(zip(lines, kinds, strict=True)):
        if (kind == _TEXT and is_forward_marker(line)) or (forward and kind == _DROPPED):
            return i
    return None


def body_parts(text: str, forward: bool = False) -> tuple[str, str, str]:
    """:func:`strip_reply`, :func:`quoted_part` and :func:`forwarded_part` of ``text`` at
    once, its lines classified once (the channel wants all three of every mail)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kinds = _classify(lines)
    i = _forward_start(lines, kinds, forward)
    if i is not None:
        # The sender's note above the marker is stripped like any reply; the
        # forwarded message itself is kept whole (its headers included), up to where
        # its client marks its end: what the sender wrote below it is theirs (before
        # session 42 it was taken for the forward's, a bottom-poster's question too).
        end = forward_end(lines, i)
        note = _visible(lines[:i], kinds[:i])
        forwarded = "\n".join(lines[i:end]).strip("\n")
        below = lines[end:]
        after = _visible(below, _classify(below))
        text = "\n\n".join(part for part in (note, forwarded, after) if part.strip())
        return text, "", forwarded
    visible = _visible(lines, kinds)
    if not visible.strip():
        return text.strip(), "", ""
    return visible, _history(lines, kinds), ""


def strip_reply(text: str, forward: bool = False) -> str:
    """The visible, newly written part of a mail body (see the module docstring).

    ``forward``: the mail is a forward (its subject says so) even without a forward
    marker, as Outlook's, which use the header block of a reply: what looks like
    history is the forwarded message and is kept."""
    return body_parts(text, forward)[0]


def forwarded_part(text: str, forward: bool = False) -> str:
    """The forwarded message :func:`strip_reply` keeps whole (from its marker on, its
    headers included), exactly as it stands in what that returns; '' for a mail that
    forwards nothing. The core keeps it apart from an owner's own words (bot/
    forwards.py: before session 41 it was taken for them)."""
    return body_parts(text, forward)[2]


def quoted_part(text: str, forward: bool = False) -> str:
    """What :func:`strip_reply` drops as history: the quoted and original-message lines
    (their attribution included: it names whose words they are), blank lines between
    runs collapsed; '' for a forward (kept whole) and for a mail that is all quote (its
    text is kept as the message). Signatures are the sender's own: not in it."""
    return body_parts(text, forward)[1]


def _history(lines: list[str], kinds: list[int]) -> str:
    out: list[str] = []
    for line, kind in zip(lines, kinds, strict=True):
        if kind != _TEXT:
            out.append(line.rstrip())
        elif out and out[-1]:
            out.append("")
    return "\n".join(out).strip("\n")


def _visible(lines: list[str], kinds: list[int]) -> str:
    blocks: list[list[str]] = [[]]
    for line, kind in zip(lines, kinds, strict=True):
        if kind == _TEXT:
            blocks[-1].append(line.rstrip())
        elif blocks[-1]:
            blocks.append([])
    out: list[str] = []
    for block in blocks:
        kept = _strip_signature(block)
        while kept and _DECORATION.match(kept[-1]):
            kept.pop()
        while kept and not kept[0].strip():
            kept.pop(0)
        if kept:
            if out:
                out.append("")
            out.extend(kept)
    return "\n".join(out).strip("\n")
