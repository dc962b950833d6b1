"""The subject terms of Thai text, for offline topics and titles.

Thai writes no space between words (spaces part phrases), so :mod:`bot.title_keywords`
found no word in it, and a Thai conversation had no offline topic, only its opening as
the title. As for Chinese and Japanese (:mod:`bot.cjk_terms`), its terms are the
character strings that come back in the conversation, a shorter one dropped where a
longer one holding it comes back as often ("ร้านอาหาร" in "ร้านอาหารญี่ปุ่น"). Thai
letters spell sounds, not words, so here:

- a string starts and ends where a syllable may (never on a vowel or tone mark, a vowel
  written after its consonant, or before the consonant a leading vowel goes with);
- function words (pronouns, polite particles, prepositions, auxiliaries, question
  words, numbers) are found first: a string made of them alone is no term, nor one that
  starts or ends inside one ("รับ" of "ครับ"), nor one that is a function word and a
  rest that comes back more often without it ("ดีครับ", "ร้านที่"): a word that only
  begins like one keeps it ("ไปรษณีย์", "ที่จอดรถ").
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from bot.cjk_terms import Turn, _recurring, _strings_inside

_RUN = re.compile(r"[\u0e01-\u0e4e]+")
_CONSONANT = re.compile(r"[\u0e01-\u0e2e]")
_LEADING = frozenset("เแโใไ")  # written before the consonant they follow
_AFTER = frozenset("ะาำๅ")  # written after their consonant
_MARKS = frozenset("\u0e31\u0e34\u0e35\u0e36\u0e37\u0e38\u0e39\u0e3a") | frozenset(
    chr(c) for c in range(0x0E47, 0x0E4F)
)
# Characters of a term (code points: marks count), at least and at most: two letters
# are as often a piece of a longer word ("บา" of "สบาย", "โรงพยาบาล") as a word.
MIN_CHARS = 3
MAX_CHARS = 16

_FUNCTION = tuple(
    sorted(
        set(
            # pronouns, polite and final particles
            "ผม ฉัน ดิฉัน เรา คุณ เขา เธอ มัน พวก ท่าน หนู ครับ คับ ค่ะ คะ ค่า นะ จ้ะ จ้า "
            "จ๊ะ ล่ะ สิ ซิ เถอะ หรอก เลย ด้วย บ้าง ไหม มั้ย หรือ หรอ เหรอ "
            # conjunctions, prepositions, demonstratives
            "และ แต่ กับ ของ ใน บน ที่ ซึ่ง ว่า ให้ จาก ถึง แก่ โดย เพื่อ เพราะ ถ้า ก็ จึง "
            "แล้ว ตาม ต่อ นี้ นั้น นี่ นั่น โน้น แบบ อัน ใกล้ ไกล สำหรับ เกี่ยวกับ ระหว่าง "
            "ตั้งแต่ ก่อน ส่วน แค่ หน่อย "
            # auxiliaries and the commonest verbs (be, have, can, go, come, do, want)
            "เป็น คือ มี ได้ ไม่ จะ ต้อง ควร อยาก ช่วย กำลัง เคย ยัง อยู่ ไป มา ทำ ขอ "
            # question words, degree, time, greetings
            "อะไร ไหน ทำไม อย่างไร ยังไง เท่าไร เท่าไหร่ กี่ ใคร เมื่อไร เมื่อไหร่ มาก น้อย "
            "หลาย ทุก บาง กว่า ที่สุด จริง ดี วันนี้ พรุ่งนี้ เมื่อวาน ตอนนี้ ตอน สวัสดี "
            "ขอบคุณ ขอโทษ โอเค "
            # numbers
            "หนึ่ง สอง สาม สี่ ห้า หก เจ็ด แปด เก้า สิบ ร้อย พัน".split()
        ),
        key=len,
        reverse=True,  # longest first: "เมื่อไหร่" before "เมื่อ"
    )
)


_BY_FIRST: dict[str, list[str]] = {}
for _word in _FUNCTION:
    _BY_FIRST.setdefault(_word[0], []).append(_word)


def _starts_syllable(run: str, i: int) -> bool:
    ch = run[i]
    return (ch in _LEADING or _CONSONANT.match(ch) is not None) and not (
        i and run[i - 1] in _LEADING
    )


def _ends_syllable(run: str, j: int) -> bool:
    """Whether a string may end before ``run[j]`` (``j`` may be the run's end)."""
    return run[j - 1] not in _LEADING and (
        j == len(run) or (run[j] not in _MARKS and run[j] not in _AFTER)
    )


def _function_spans(run: str) -> list[tuple[int, int]]:
    """Where the function words of ``run`` are, longest match first, left to right."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(run):
        end = 0
        if _starts_syllable(run, i):
            for word in _BY_FIRST.get(run[i], ()):
                if run.startswith(word, i) and _ends_syllable(run, i + len(word)):
                    end = i + len(word)
                    break
        if end:
            spans.append((i, end))
            i = end
        else:
            i += 1
    return spans


def _run_terms(run: str) -> Iterable[str]:
    """The strings of ``run`` that may be terms (see the module's rules)."""
    spans = _function_spans(run)
    inside = [False] * (len(run) + 1)  # a function word goes on across this boundary
    covered = [False] * len(run)
    for start, end in spans:
        inside[start + 1 : end] = [True] * (end - start - 1)
        covered[start:end] = [True] * (end - start)
    ends = [j for j in range(1, len(run) + 1) if not inside[j] and _ends_syllable(run, j)]
    # A function word after the start makes a phrase ("จองโต๊ะหนึ่งทุ่ม"), not a term
    # (one may end it: its rest is weighed in thai_terms): how far a string may go.
    starting = dict(spans)
    stops = [len(run)] * len(run)
    following = len(run)
    for k in range(len(run) - 1, -1, -1):
        stops[k] = following  # the end of the first function word after k
        following = starting.get(k, following)
    for i in range(len(run)):
        if inside[i] or not _starts_syllable(run, i):
            continue
        stop = stops[i]
        for j in ends:
            if j - i > MAX_CHARS or j > stop:
                break
            if j - i >= MIN_CHARS and not all(covered[i:j]):
                yield run[i:j]


def _runs(turns: Sequence[Turn]) -> Iterable[tuple[str, str]]:
    for role, content, _ in turns:
        # NFC, not the search's NFKC: that spells "ำ" as two characters
        for run in _RUN.findall(unicodedata.normalize("NFC", content)):
            yield run, role


def thai_terms(turns: Sequence[Turn], limit: int = 6) -> list[str]:
    """The conversation's recurring Thai terms, best first (the owner's uses count
    double); [] for text without Thai."""
    runs = list(_runs(turns))
    if not runs:
        return []
    text = " ".join(run for run, _ in runs)

    def edged(term: str, _counts: Counter[str]) -> bool:
        if term in (term + term)[1:-1]:
            return True  # a string over and over ("กกกก", laughter): no subject
        # A function word and a rest that comes back more often without it.
        for word in _FUNCTION:
            if len(word) < len(term):
                rest = (
                    term[len(word) :]
                    if term.startswith(word)
                    else term[: -len(word)]
                    if term.endswith(word)
                    else None
                )
                if rest is not None and text.count(rest) > text.count(term):
                    return True
        return False

    uses = ((term, role) for run, role in runs for term in _run_terms(run))
    ranked = _recurring(uses, _strings_inside, len(text), edged, _letters)
    # A term inside a better one, or holding one, says less than another subject would
    # ("ร้าน", "ร้านอาหารญี่ปุ่น" after "ร้านอาหาร"): a few topics and a title of three
    # cover more this way.
    terms: list[str] = []
    for term in ranked:
        if not any(term in better or better in term for better in terms):
            terms.append(term)
            if len(terms) >= limit:
                break
    return terms


def _letters(term: str) -> int:
    """The length of ``term`` without its vowel and tone marks (written above or below
    a letter, they lengthened the words that have many)."""
    return sum(1 for ch in term if ch not in _MARKS)
