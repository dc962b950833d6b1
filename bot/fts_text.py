"""The text ``turns_fts`` indexes for a turn: scripts written without spaces made searchable.

The keyword index tokenises with ``porter unicode61``, which splits on spaces and
punctuation only. A language written without spaces between words (Chinese, Japanese,
Thai, ...) became one token per run of characters: "東京タワーに行った" was a single
token, so searching "東京" found nothing, and neither did a Korean word searched without
its particle ("서울" in "서울에서"). The ``trigram`` tokenizer would match substrings but
loses porter stemming for English.

So the index reads a derived text (:func:`searchable`): the content in Unicode NFKC
(full-width "ＡＢＣ１２３" is "ABC123", half-width katakana full width) with a space on
each side of every character of those scripts, each of which becomes a token of its own;
Latin text is left as it is. It is stored in ``turns.fts_text`` only when it differs from
the content (NULL otherwise: ASCII and most Latin text), and the view ``recall_turns``
hands FTS5 ``coalesce(fts_text, content)`` (migration 8), so FTS5's ``rebuild`` and
``integrity-check`` agree with what the writers insert. Snippets are cut from ``content``.

A query's run of such characters becomes FTS5 phrases of its characters
(:func:`run_phrases`): a run of one or two characters is one phrase ("東京" -> "東 京",
which matches the substring); a longer run its overlapping two-character phrases, OR-ed
like words, so a whole sentence asked in Japanese still ranks the turns sharing most of
its pieces first instead of requiring the sentence verbatim.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import pairwise

# Scripts written without spaces between words (and Hangul, whose words carry particles):
# each character is a token of its own in the index.
_SPACELESS_CHARS = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1100-\u11ff"  # Hangul jamo
    "\u1780-\u17ff"  # Khmer
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3130-\u318f"  # Hangul compatibility jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul jamo extended-A
    "\uac00-\ud7ff"  # Hangul syllables, jamo extended-B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003ffff"  # CJK extensions B and later
)
_SPACELESS = re.compile(f"[{_SPACELESS_CHARS}]")
_SPACELESS_RUN = re.compile(f"[{_SPACELESS_CHARS}]+")
# every boundary of such a character: one space each, also between two of them
_BOUNDARY = re.compile(f"(?<=[{_SPACELESS_CHARS}])|(?=[{_SPACELESS_CHARS}])")

# How many phrases one query takes from its runs: a pasted page of Chinese has as many
# distinct character pairs as characters, each a keyword lookup of its own
# (bot.search.keyword.DocFreqs).
MAX_RUN_PHRASES = 200


def normalise(text: str) -> str:
    """``text`` in NFKC (ASCII returned as it is, without the normalisation's cost)."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def searchable(content: str) -> str | None:
    """What ``turns_fts`` indexes for ``content``, or None when that is ``content`` itself."""
    if content.isascii():
        return None  # the common case: nothing to normalise or split
    derived = _BOUNDARY.sub(" ", unicodedata.normalize("NFKC", content))
    return None if derived == content else derived


def fts_content(content: str) -> str:
    """The text ``turns_fts`` holds for ``content`` (``coalesce(fts_text, content)``)."""
    derived = searchable(content)
    return content if derived is None else derived


def has_spaceless(text: str) -> bool:
    """Whether ``text`` holds a character of a script written without spaces."""
    return not text.isascii() and _SPACELESS.search(text) is not None


def latin_of(text: str) -> str:
    """``text`` with each spaceless-script character made a space (same length)."""
    return _SPACELESS.sub(" ", text) if has_spaceless(text) else text


def split_runs(text: str) -> tuple[list[str], str]:
    """(the runs of spaceless-script characters of ``text``, ``text`` without them)."""
    if text.isascii():
        return [], text
    runs = _SPACELESS_RUN.findall(text)
    return runs, (_SPACELESS_RUN.sub(" ", text) if runs else text)


def run_phrases(run: str) -> list[str]:
    """FTS5 phrases (characters separated by spaces) that search ``run``.

    Only the characters ``unicode61`` keeps as tokens count (letters and digits: Thai and
    Khmer vowel marks separate tokens in the index as they do here). One or two
    characters: the run itself; longer: each pair of neighbours.
    """
    chars = [c for c in run if unicodedata.category(c)[0] in "LN"]
    if len(chars) <= 2:
        return [" ".join(chars)] if chars else []
    return list(dict.fromkeys(f"{a} {b}" for a, b in pairwise(chars)))


def runs_phrases(runs: list[str]) -> list[str]:
    """The distinct phrases of ``runs`` (:func:`run_phrases`), at most
    :data:`MAX_RUN_PHRASES`."""
    phrases: dict[str, None] = {}
    for run in runs:
        for phrase in run_phrases(run):
            phrases.setdefault(phrase, None)
            if len(phrases) >= MAX_RUN_PHRASES:
                return list(phrases)
    return list(phrases)
