"""The subject terms of Chinese, Japanese and Korean text, for offline topics.

:mod:`bot.title_keywords` reads words between spaces; Chinese and Japanese write none,
so a conversation in them had no keyword and no offline topic (its title is its opening,
:func:`bot.keyword_titles.keyword_title`). Here the terms are the strings of 2-4
characters that come back in the conversation: a string is counted wherever it is
written, a shorter one is dropped where a longer one holding it comes back as often
("东京" in "东京塔"), and strings holding a function character (的, 了, 我们's 们,
Japanese kana particles: hiragana) are never terms.

Korean is written with spaces, but a word carries its particles and endings ("식당이",
"식당에서", "예약했어요"), so the same word never comes back spelled the same way and
:mod:`bot.title_keywords` found no recurring word: a Korean conversation had no topic.
Its terms are the beginnings of its words that come back (:func:`hangul_terms`): nouns
open the word, particles and endings close it.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

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


def _recurring(
    uses: Iterable[tuple[str, str]],
    parts: Callable[[str], Iterable[str]],
    limit: int,
    drop: Callable[[str, Counter[str]], bool] | None = None,
    size: Callable[[str], int] = len,
) -> list[str]:
    """The terms of ``uses`` ((term, role) pairs) that come back at least twice, best
    first: by uses (the owner's count double) times ``size``, then first use. A term
    among ``parts`` of a longer kept one that comes back as often is that one ("东京" in
    "东京塔"); ``drop`` leaves out more."""
    counts: Counter[str] = Counter()
    weights: Counter[str] = Counter()
    first: dict[str, int] = {}
    for term, role in uses:
        counts[term] += 1
        weights[term] += 2 if role == "user" else 1
        first.setdefault(term, len(first))
    kept = [t for t, n in counts.items() if n >= 2]
    inside = {p for t in kept for p in parts(t) if counts[p] <= counts[t]}
    kept = [t for t in kept if t not in inside and not (drop and drop(t, counts))]
    kept.sort(key=lambda t: (-weights[t] * size(t), first[t]))
    return kept[:limit]


def _strings_inside(term: str) -> Iterable[str]:
    return (term[i : i + n] for n in range(2, len(term)) for i in range(len(term) - n + 1))


def _han_or_kana_uses(turns: Sequence[Turn]) -> Iterable[tuple[str, str]]:
    for role, content, _ in turns:
        runs, _ = split_runs(normalise(content))
        for run in runs:
            chars = "".join(c for c in run if unicodedata.category(c)[0] in "LN")
            for size in SIZES:
                for i in range(len(chars) - size + 1):
                    term = chars[i : i + size]
                    if _usable(term):
                        yield term, role


def cjk_terms(turns: Sequence[Turn], limit: int = 6) -> list[str]:
    """The conversation's recurring Chinese or Japanese terms, best first (the owner's
    uses count double); [] for text without such characters."""
    return _recurring(_han_or_kana_uses(turns), _strings_inside, limit)


_HANGUL_WORD = re.compile(r"[\uac00-\ud7a3]{2,}")
# Beginnings of words that say nothing of a subject: pronouns, "this/that", time
# adverbs, intensifiers, greetings and thanks, and the commonest verbs and adjectives
# (to be, to have, to do, to be good, to want, to give, to know, to think).
_KOREAN_FUNCTION = frozenset(
    "그리 그래 그런 그럼 그거 그것 그냥 하지 우리 저희 제가 저는 저도 나는 나도 내가 너는 "
    "당신 이거 이것 이번 저거 여기 거기 저기 지금 오늘 내일 어제 정말 진짜 너무 아주 "
    "조금 많이 같이 다시 아직 벌써 혹시 아니 안녕 감사 고마 죄송 미안 있어 있는 있고 "
    "있을 있었 있습 없어 없는 없고 하는 하고 하면 해요 해서 했어 했는 했습 할까 하세 "
    "합니 하시 되는 돼요 됐어 됩니 같아 같은 좋아 좋은 좋겠 싶어 싶은 주세 줄래 알겠 "
    "알아 모르 생각 어떻 어떤 무슨 뭐가 언제 어디 누가 그래요".split()
)


# Particles a noun is written with ("친구가", "회사에서"): a term that is a kept
# shorter term plus one of them is that term.
_PARTICLES = (
    "에서",
    "에게",
    "한테",
    "으로",
    "까지",
    "부터",
    "처럼",
    "보다",
    "이랑",
    *"이가은는을를에의도와과로만랑께",
)


def _with_particle(term: str, counts: Counter[str]) -> bool:
    return any(
        term.endswith(p) and len(term) - len(p) >= 2 and counts[term[: -len(p)]] >= counts[term]
        for p in _PARTICLES
    )


def _beginnings(term: str) -> Iterable[str]:
    return (term[:k] for k in range(2, len(term)))


def _hangul_uses(turns: Sequence[Turn]) -> Iterable[tuple[str, str]]:
    for role, content, _ in turns:
        # NFC: a macOS keyboard may send syllables as their decomposed letters
        for word in _HANGUL_WORD.findall(unicodedata.normalize("NFC", content)):
            if word[:2] not in _KOREAN_FUNCTION:
                yield from ((word[:size], role) for size in range(2, min(len(word), 4) + 1))


def hangul_terms(turns: Sequence[Turn], limit: int = 6) -> list[str]:
    """The conversation's recurring Korean terms, best first (the owner's uses count
    double): beginnings of 2-4 syllables of its words that come back at least twice,
    a beginning dropped where a longer one holding it comes back as often ("금요일"
    for "금요일" and "금요일에", "이탈리아" rather than "이탈"); [] for text without
    Hangul."""
    return _recurring(_hangul_uses(turns), _beginnings, limit, _with_particle)
