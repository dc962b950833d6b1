"""The subject terms of Chinese and Japanese text, for offline topics.

:mod:`bot.title_keywords` reads words between spaces; Chinese and Japanese write none,
so a conversation in them had no keyword and no offline topic (its title is its opening,
:func:`bot.keyword_titles.keyword_title`). Here the terms are the strings of 2-4
characters that come back in the conversation: a string is counted wherever it is
written, a shorter one is dropped where a longer one holding it comes back as often
("东京" in "东京塔"), and strings holding a function character (的, 了, 我们's 们,
Japanese kana particles: hiragana) are never terms.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from bot.fts_text import normalise, split_runs

Turn = tuple[str, str, str | None]

# Characters that make a string a function phrase, not a subject (pronouns, particles,
# measure words, the commonest verbs of being and having, negation).
_FUNCTION = frozenset(
    "的了是在我你他她它们这那有和就不也都吗呢吧啊很还把被给让与而但个么着过没得地一"
)
_HIRAGANA = re.compile(r"[\u3040-\u309f]")
_HAN_OR_KANA = re.compile(r"[\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
SIZES = (4, 3, 2)


def _usable(term: str) -> bool:
    return (
        not any(c in _FUNCTION for c in term)
        and not _HIRAGANA.search(term)
        and all(_HAN_OR_KANA.match(c) for c in term)
        and term[0] != "ー"
    )


def cjk_terms(turns: Sequence[Turn], limit: int = 6) -> list[str]:
    """The conversation's recurring Chinese or Japanese terms, best first (the owner's
    uses count double); [] for text without such characters."""
    counts: Counter[str] = Counter()
    weights: Counter[str] = Counter()
    first: dict[str, int] = {}
    for role, content, _ in turns:
        runs, _ = split_runs(normalise(content))
        for run in runs:
            chars = "".join(c for c in run if unicodedata.category(c)[0] in "LN")
            for size in SIZES:
                for i in range(len(chars) - size + 1):
                    term = chars[i : i + size]
                    if _usable(term):
                        counts[term] += 1
                        weights[term] += 2 if role == "user" else 1
                        first.setdefault(term, len(first))
    kept = [t for t, n in counts.items() if n >= 2]
    # a string inside a longer kept one that comes back as often is that one ("东京塔")
    inside: set[str] = set()
    for term in kept:
        for size in range(2, len(term)):
            for i in range(len(term) - size + 1):
                part = term[i : i + size]
                if counts[part] <= counts[term]:
                    inside.add(part)
    kept = [t for t in kept if t not in inside]
    kept.sort(key=lambda t: (-weights[t] * len(t), first[t]))
    return kept[:limit]
