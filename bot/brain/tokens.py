"""Token estimates of text, for the working context, compression and the recall budget.

Estimates, not the tokenizer's exact count: compression needs a stable, cheap measure
(:func:`estimate_tokens`: about four characters per token of ASCII, one per Chinese,
Japanese or Korean character), and :func:`cut_to_tokens` (its start) and
:func:`tail_to_tokens` (its end) cut text to such a budget.
"""

from __future__ import annotations

from bot.graphemes import boundary_before

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``, by the length of each character in UTF-8: a quarter
    of a token per ASCII character, half per 2-byte one (accented Latin, Greek, Cyrillic,
    Hebrew, Arabic), one per 3-byte one (Chinese, Japanese, Korean, Thai, Devanagari) and
    two per 4-byte one (emoji). Characters / 4 for all of them took a Chinese conversation
    for a quarter of its size: compression came too late and the API refused the reply
    ("prompt is too long"). Conservative, and cheap (three encodings, no loop)."""
    if text.isascii():
        return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
    chars = len(text)
    ascii_ = len(text.encode("ascii", "ignore"))
    astral = len(text.encode("utf-16-le", "surrogatepass")) // 2 - chars  # 4 UTF-8 bytes
    # the rest take 2 or 3 bytes each: their bytes beyond 2 each are the 3-byte ones
    rest = chars - ascii_ - astral
    three = len(text.encode("utf-8", "surrogatepass")) - ascii_ - 4 * astral - 2 * rest
    two = rest - three
    quarters = ascii_ + 2 * two + 4 * three + 8 * astral
    return (quarters + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def cut_to_tokens(text: str, max_tokens: int) -> str:
    """The longest start of ``text`` whose :func:`estimate_tokens` is at most
    ``max_tokens`` (cutting at ``max_tokens`` * 4 characters kept four times the
    budget of a Chinese text)."""
    # no character is under a quarter of a token: nothing longer than this can fit
    hi = min(len(text), max(0, max_tokens) * CHARS_PER_TOKEN)
    if estimate_tokens(text[:hi]) <= max_tokens:
        return text[:hi] if hi == len(text) else text[: boundary_before(text, hi)]
    lo = 0  # text[:lo] fits, text[:hi] does not (the estimate grows with the length)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return text[: boundary_before(text, lo)]  # never half a character: the model reads it


def tail_to_tokens(text: str, max_tokens: int) -> str:
    """The longest end of ``text`` whose :func:`estimate_tokens` is at most
    ``max_tokens``, starting at a line when one starts near the cut (a log's lines
    whole), else never inside a character."""
    if max_tokens <= 0 or not text:
        return ""
    if estimate_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)  # text[hi:] fits, text[lo:] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate_tokens(text[mid:]) <= max_tokens:
            hi = mid
        else:
            lo = mid
    line = text.find("\n", hi, hi + 400)
    if line >= 0:
        return text[line + 1 :]
    start = hi
    while start < len(text) and boundary_before(text, start) != start:
        start += 1
    return text[start:]
