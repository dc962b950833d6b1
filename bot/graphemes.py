"""Cutting text where a reader sees a character end (grapheme cluster boundaries).

A cut by code points fell inside what the reader sees as one character: ``e`` kept and
its combining accent (U+0301) dropped, a Devanagari consonant without its vowel sign or
with a dangling virama, half of a flag (one regional indicator shows as a boxed letter),
a family emoji cut to "man + ZWJ", a skin tone left alone as a coloured square, a Hangul
syllable spelt in jamo split in two. :func:`boundary_before` moves a cut back to the last
boundary; :func:`cut` and :func:`shorten` are the slicing and the "…" of every preview
and title.

The rules are the part of Unicode's UAX #29 (extended grapheme clusters) that text here
meets: no break inside CR LF; none before an extending or spacing mark, ZWJ, a variation
selector, an emoji modifier or a tag character; none inside a Hangul syllable's jamo;
regional indicators in pairs; none after ZWJ before a non-ASCII character (emoji ZWJ
sequences, Indic half forms); none between a consonant, a virama and the next consonant
of the same Indic script (conjuncts, GB9c). Prepend characters are not handled. Written
here because SPEC.md's dependencies do not include ``regex`` (whose ``\\X`` would do it);
every check is local, a few characters either side of the cut.

:func:`isolate` wraps right-to-left text in a first-strong isolate, so that a Hebrew or
Arabic title does not reorder the words of our own line around it.
"""

from __future__ import annotations

import re
import unicodedata

ELLIPSIS = "…"
_ZWJ = "\u200d"
_FSI, _PDI = "\u2068", "\u2069"  # first strong isolate ... pop directional isolate
# Viramas that link consonants into one cluster (Unicode 15.1 InCB=Linker): Devanagari,
# Bengali, Gujarati, Oriya, Telugu, Malayalam.
_LINKERS = frozenset("\u094d\u09cd\u0acd\u0b4d\u0c4d\u0d4d")
_MARKS = frozenset(("Mn", "Me", "Mc"))
# Unicode's stream-safe format allows 30 marks in a row; no real cluster is longer.
MAX_CLUSTER = 32


def _extends(ch: str) -> bool:
    """Never a cluster's start: a mark, ZWJ/ZWNJ, an emoji modifier, a tag character."""
    cp = ord(ch)
    if cp < 0x300:
        return False
    return (
        unicodedata.category(ch) in _MARKS
        or ch in "\u200c\u200d"
        or 0x1F3FB <= cp <= 0x1F3FF
        or 0xE0020 <= cp <= 0xE007F
    )


def _regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _hangul(ch: str) -> str:
    """The Hangul syllable type of ``ch``: L, V, T, LV, LVT, or "" for anything else."""
    cp = ord(ch)
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    return ""


def _conjunct(text: str, i: int) -> bool:
    """Whether ``text[i]`` is a consonant joined to the one before by a virama (GB9c)."""
    if unicodedata.category(text[i]) != "Lo":
        return False
    j, linker = i - 1, None
    while j >= 0 and _extends(text[j]):
        if text[j] in _LINKERS:
            linker = text[j]
        j -= 1
    if linker is None or j < 0 or unicodedata.category(text[j]) != "Lo":
        return False
    block = ord(linker) >> 7  # the 128-character block of the script
    return ord(text[i]) >> 7 == block and ord(text[j]) >> 7 == block


def is_boundary(text: str, i: int) -> bool:
    """Whether a cut before ``text[i]`` falls between two grapheme clusters."""
    if i <= 0 or i >= len(text):
        return True
    before, after = text[i - 1], text[i]
    if ord(after) < 0x300:  # Latin-1 and ASCII never continue a cluster, but LF a CR
        return not (before == "\r" and after == "\n")
    if "\ud800" <= before <= "\udbff" and "\udc00" <= after <= "\udfff":
        return False  # the two halves of a surrogate pair (text decoded with surrogatepass)
    if unicodedata.category(before) == "Cc" or unicodedata.category(after) == "Cc":
        return True
    if _extends(after) or before == _ZWJ:
        return False
    if _regional(before) and _regional(after):
        run = 0
        while i - 1 - run >= 0 and _regional(text[i - 1 - run]):
            run += 1
        return run % 2 == 0  # a flag is a pair: the break comes after an even count
    low, high = _hangul(before), _hangul(after)
    if low and high:
        if low == "L":
            return high == "T"
        if low in ("LV", "V"):
            return high not in ("V", "T")
        return high != "T"  # LVT, T
    return not _conjunct(text, i)


def boundary_before(text: str, i: int) -> int:
    """The last grapheme boundary at or before index ``i`` (clamped to the text).

    A cluster longer than :data:`MAX_CLUSTER` code points (hundreds of stacked marks,
    "Zalgo" text) is cut at ``i`` anyway, moved off the middle of a surrogate pair: no
    real character is that long, and a title must not come out empty for it.
    """
    i = max(0, min(i, len(text)))
    j = i
    while j > 0 and i - j <= MAX_CLUSTER and not is_boundary(text, j):
        j -= 1
    if i - j <= MAX_CLUSTER:
        return j
    if i < len(text) and "\udc00" <= text[i] <= "\udfff" and "\ud800" <= text[i - 1] <= "\udbff":
        return i - 1
    return i


def cut(text: str, limit: int) -> str:
    """The longest start of ``text`` of at most ``limit`` code points that ends on a
    grapheme boundary (``text[:limit]``, moved back out of a cluster)."""
    if len(text) <= limit:
        return text
    return text[: boundary_before(text, limit)]


def shorten(text: str, limit: int, mark: str = ELLIPSIS) -> str:
    """``text`` when it has at most ``limit`` code points, else its start cut on a grapheme
    boundary (trailing space dropped) and ``mark``, ``limit`` code points at most."""
    if len(text) <= limit:
        return text
    return cut(text, max(0, limit - len(mark))).rstrip() + mark


def utf16_boundary_before(text: str, units: int) -> int:
    """The index of the longest start of ``text`` that fits in ``units`` UTF-16 code units
    and ends on a grapheme boundary (Telegram counts its limits in UTF-16 units: a
    character outside the BMP, most emoji, counts two)."""
    i = min(len(text), units)
    size = len(text[:i].encode("utf-16-le", "surrogatepass")) // 2
    while size > units:
        i -= 1
        size -= 2 if ord(text[i]) > 0xFFFF else 1
    return boundary_before(text, i)


def has_rtl(text: str) -> bool:
    """Whether ``text`` holds a right-to-left letter (Hebrew, Arabic, Syriac, Thaana...)."""
    if text.isascii():
        return False
    return any(unicodedata.bidirectional(ch) in ("R", "AL") for ch in text)


# Explicit directional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069),
# except an isolate we wrapped ourselves (FSI ... PDI around text without such controls).
_BIDI_CONTROLS = re.compile(
    "\u2068[^\u202a-\u202e\u2066-\u2069\n]*\u2069|[\u202a-\u202e\u2066-\u2069]"
)


def shown_controls(text: str) -> str:
    """``text`` with its explicit bidi controls written out ("[U+202E]"), as the dashboard
    shows them: a right-to-left override planted in a message ("invoice_\u202egnp.exe")
    reversed the rest of our line on Telegram, the conversation id included, and made
    "exe.png" of an executable's name."""
    if text.isascii():
        return text
    return _BIDI_CONTROLS.sub(lambda m: m[0] if len(m[0]) > 1 else f"[U+{ord(m[0]):04X}]", text)


# Characters that show nothing (zero-width space, word joiner, byte order mark, Hangul
# fillers, soft hyphen...), as the dashboard's nameShown (static/helpers.js) lists them;
# the joiners emoji sequences and Persian names need (ZWJ, ZWNJ) are not among them.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b"
    "\u2060-\u2064\u206a-\u206f\u3164\ufeff\uffa0]"
)


def shown_invisible(text: str) -> str:
    """``text`` with its invisible characters written out ("[U+200B]"), as the dashboard
    shows a name: "Ha\u200bnan" read exactly as the contact Hanan."""
    if text.isascii():
        return text
    return _INVISIBLE.sub(lambda m: f"[U+{ord(m[0]):04X}]", text)


def isolate(text: str) -> str:
    """``text`` with its bidi controls shown (:func:`shown_controls`), in a first-strong
    isolate (U+2068 ... U+2069) when it holds right-to-left letters, so that it is laid
    out on its own inside our line and does not drag the punctuation and numbers around
    it (``"שלום" (3)`` shown as ``(3) "שלום"``). Left-to-right text comes back unchanged:
    nothing to isolate, nothing added to count."""
    text = shown_controls(text)
    return f"{_FSI}{text}{_PDI}" if has_rtl(text) else text
