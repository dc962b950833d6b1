"""The lower-cased words of a ranked turn's text, read once per ranking.

Soft coverage (:func:`bot.search.soft.turn_tokens`: a turn's words without its sender
label) and the learned features (:func:`bot.search.features.turn_features`: the stems of
all its words) both tokenise the best turns of a ranking and their neighbours, mostly the
same ~150 texts, ~12 us each here: twice per text was ~1.2 ms of every search. The words
of an ASCII text are remembered by the text itself (the memo is keyed by content, so any
thread may read it and a stale entry cannot exist), and the label's words are cut from
the front of them: the label ends at ": ", which no word crosses.
"""

from __future__ import annotations

import re

# a word of lower-cased ASCII text (where ``[^\W_]`` is ``[a-z0-9]``); the pattern soft
# coverage and the learned features read on ASCII text, 2.6x faster than the Unicode one
ASCII_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")

MEMO_TEXTS = 4096  # texts whose words are kept (a few rankings' worth; then it starts over)
_memo: dict[str, tuple[str, ...]] = {}


def label_end(text: str) -> int:
    """Where the text after a leading "Sender: " label starts (0: no label)."""
    head, sep, _ = text.partition(": ")
    return len(head) + 2 if sep and len(head) < 40 and " " not in head.strip() else 0


def body(text: str) -> str:
    """The text without a leading "Sender: " label."""
    return text[label_end(text) :]


def ascii_words(text: str) -> tuple[str, ...]:
    """``ASCII_WORD.findall(text.lower())`` of an ASCII ``text`` (label included),
    remembered for the rest of the ranking."""
    words = _memo.get(text)
    if words is None:
        if len(_memo) >= MEMO_TEXTS:
            _memo.clear()
        words = _memo[text] = tuple(ASCII_WORD.findall(text.lower()))
    return words


def ascii_body_words(text: str) -> list[str]:
    """The words of an ASCII ``text`` after its label: ``ASCII_WORD.findall(
    body(text).lower())``, from :func:`ascii_words`."""
    words = ascii_words(text)
    cut = label_end(text)
    if not cut:
        return list(words)
    return list(words[len(ASCII_WORD.findall(text[:cut].lower())) :])
