"""The quotes of a title the model wrote: those around the whole title go, a pair inside
stays a pair, and a quote without its pair goes.

The title used to lose every quote character at both ends, paired or not, so that
``"Quoted start" here`` became ``Quoted Start" Here`` and ``Plan for "Project X"``
became ``Plan for "Project X``: a stray quote in the conversation list. Quotes are paired
here as a reader pairs them: by their style (straight, curly, guillemets, corner
brackets) and their place (an opening quote before a word, a closing one after it); an
apostrophe inside a word ("Anna's", "don't") or after one ("Parents' Evening") is no
quote.
"""

from __future__ import annotations

# The quote characters of each style; a quote pairs with one of its own style.
_STYLES = ('"“”„‟', "'‘’‚‛", "`", "«»", "‹›", "「」", "『』")
_STYLE = {c: k for k, chars in enumerate(_STYLES) for c in chars}
_OPEN_ONLY = frozenset("„‚«‹「『")
_CLOSE_ONLY = frozenset("»›」』")
_APOSTROPHES = frozenset("'’")

QUOTES = "".join(_STYLES)


def unquoted(text: str) -> str:
    """``text`` without the quotes around all of it (nested ones too: ``"'Plan'"``) and
    without any quote that has no pair; paired quotes inside are kept."""
    pairs, strays = _pair_quotes(text)
    lo, hi = 0, len(text) - 1
    while lo < hi and pairs.get(lo) == hi:  # around the whole: drop both, look again
        strays.update((lo, hi))
        lo, hi = _inner_bounds(text, lo + 1, hi - 1)
    if hi >= 0 and text[hi] in _APOSTROPHES and hi not in pairs.values():
        strays.add(hi)  # "Budget Review'": at the very end no apostrophe is meant
    kept = "".join(c for k, c in enumerate(text) if k not in strays)
    return " ".join(kept.split())


def _inner_bounds(text: str, lo: int, hi: int) -> tuple[int, int]:
    """``lo`` and ``hi`` moved past the spaces inside a pair just dropped."""
    while lo <= hi and text[lo].isspace():
        lo += 1
    while hi >= lo and text[hi].isspace():
        hi -= 1
    return lo, hi


def _pair_quotes(text: str) -> tuple[dict[int, int], set[int]]:
    """The pairs of quotes in ``text`` (the opening one's index to the closing one's)
    and the indices of quotes without a pair."""
    pairs: dict[int, int] = {}
    strays: set[int] = set()
    stack: list[int] = []  # indices of opening quotes not yet closed
    for k, c in enumerate(text):
        style = _STYLE.get(c)
        if style is None:
            continue
        before = text[k - 1] if k else " "
        after = text[k + 1] if k + 1 < len(text) else " "
        opener = next((j for j in reversed(stack) if _STYLE[text[j]] == style), None)
        if c in _APOSTROPHES and before.isalnum() and (after.isalnum() or opener is None):
            continue  # Anna's, don't; Parents' with no single quote open
        can_close = c not in _OPEN_ONLY and not before.isspace() and not after.isalnum()
        can_open = c not in _CLOSE_ONLY and not after.isspace() and not before.isalnum()
        if can_close and opener is not None:
            at = stack.index(opener)
            strays.update(stack[at + 1 :])  # opened inside, never closed
            del stack[at:]
            pairs[opener] = k
        elif can_open:
            stack.append(k)
        else:
            strays.add(k)
    strays.update(stack)
    return pairs, strays
