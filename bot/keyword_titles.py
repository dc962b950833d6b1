"""Offline titles and topics from a conversation's keywords (SPEC.md "offline brain").

Pure, deterministic functions over turns given as ``(role, content, sender)`` items (the
offline abbreviation beside them: :mod:`bot.extractive`):

- :func:`keyword_title`: 2-6 words in Title Case, at most 80 characters: names, nouns and
  identifiers, never fillers or verbs (a word's class is guessed from its neighbours).
- :func:`keyword_topics`: kebab-case topics (in every script: Chinese, Japanese and Korean
  terms from :mod:`bot.cjk_terms`, Thai ones from :mod:`bot.thai_terms`).

The subject words they are built from, and how a word's class is guessed:
:mod:`bot.title_keywords`.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from bot.cjk_terms import cjk_terms, hangul_terms
from bot.extractive import Turn, entities, sentences
from bot.fts_text import has_spaceless
from bot.graphemes import cut
from bot.thai_terms import thai_terms
from bot.title_keywords import IDENTIFIER, SKIP_KEYWORD, ranked_words, stem


def _in_reading_order(chosen: list[str], pairs: Counter[tuple[str, str]]) -> list[str]:
    """Keep words the turns write together in their order ("tax return", "day trip")."""
    rank = {w: i for i, w in enumerate(chosen)}
    succ: dict[str, str] = {}
    pred: dict[str, str] = {}
    links = sorted(
        ((n, a, b) for (a, b), n in pairs.items() if a in rank and b in rank),
        key=lambda x: (-x[0], rank[x[1]], rank[x[2]]),
    )
    for _n, a, b in links:
        if a in succ or b in pred:
            continue
        head = a  # refuse a link that closes a cycle
        while head in pred:
            head = pred[head]
        if head == b:
            continue
        succ[a], pred[b] = b, a
    chains = []
    for word in chosen:
        if word in pred:
            continue
        chain = [word]
        while chain[-1] in succ:
            chain.append(succ[chain[-1]])
        chains.append(chain)
    chains.sort(key=lambda c: min(rank[w] for w in c))
    return [w for chain in chains for w in chain]


def _lead_name(name: str, spelled: dict[str, str]) -> list[str]:
    """The words of the leading name (:func:`bot.extractive.entities`) that the keywords
    (``spelled``: stem -> spelling) read as its words.

    ``entities`` already leaves out a sentence's first word that is not a name ("Bought"
    of "Bought Tikkurila paint") and keeps hyphenated names whole ("Rust-Oleum"), as the
    keywords do; a word the keywords do not hold at all (a stop word) is left out.
    """
    parts = [p for p in name.split() if p.lower() not in SKIP_KEYWORD]
    return [p for p in parts if stem(p.lower()) in spelled]


# A longer "word" is a pasted secret, a hash, a token or a URL's remains, not a subject:
# one such (a base64 key of 86 characters) made the whole title, cut at 80 characters
# inside it, shown in the conversation list and the log.
TITLE_WORD_MAX = 30


def keyword_title(turns: Sequence[Turn], *, max_chars: int = 80) -> str:
    """A 2-6 word Title Case title: the leading name, then subject words (never empty)."""
    ranked, pairs = ranked_words(turns)
    spelled = {key: form for key, form, _ in ranked}
    score = {key: value for key, _, value in ranked}
    lead: list[str] = []
    for name in entities(turns, limit=1):
        lead = _lead_name(name, spelled)
    lead = [p for p in lead if len(p) <= TITLE_WORD_MAX]
    seen = {stem(p.lower()) for p in lead}
    pool = [key for key, form, _ in ranked if key not in seen and len(form) <= TITLE_WORD_MAX]
    chosen: list[str] = []
    for key in pool:
        if len(chosen) >= 4 - len(lead):
            break
        if key in chosen:
            continue
        chosen.append(key)
        # A word written beside this one ("tax return", "socket file") comes with it,
        # unless it is much rarer than this one.
        partner = max(
            (
                k
                for k in pool
                if k not in chosen
                and (pairs[(key, k)] or pairs[(k, key)])
                and score[k] >= score[key] / 3
            ),
            key=lambda k: (pairs[(key, k)] + pairs[(k, key)], -pool.index(k)),
            default=None,
        )
        if partner is not None and len(chosen) < 4 - len(lead):
            chosen.append(partner)
    words = lead + [spelled[k] for k in _in_reading_order(chosen, pairs)]
    if not words:
        # Thai: its recurring terms (bot.thai_terms), as a title of keywords in other
        # scripts; its opening was cut at 20 characters, often inside a word.
        terms = thai_terms(turns, 3)
        if terms:
            return _joined(terms, max_chars)
        opening = _opening(turns, max_chars)
        if opening:
            return opening
        words = ["General", "Conversation"]
    elif len(words) == 1:
        words = ["Chat", "About", words[0]]
    title = " ".join(_capitalised(w) for w in words)
    while len(title) > max_chars and len(words) > 2:
        # the longest word goes (dropping the last kept a long one whole and lost the
        # short subject words after it)
        longest = max(range(len(words)), key=lambda i: (len(words[i]), i))
        words = words[:longest] + words[longest + 1 :]
        title = " ".join(_capitalised(w) for w in words)
    return cut(title, max_chars).strip()


# Characters of a title taken from a sentence in a script written without spaces.
OPENING_CHARS = 20


def _opening(turns: Sequence[Turn], max_chars: int) -> str:
    """The start of the first sentence in a script written without spaces (the owner's
    first, else anyone's), at most :data:`OPENING_CHARS` characters: the title of a
    conversation in Chinese, Japanese, Korean or Thai, whose words the keywords above
    cannot pick out."""
    ordered = [t for t in turns if t[0] == "user"] + [t for t in turns if t[0] != "user"]
    for _, content, _ in ordered:
        for sentence in sentences(content):
            if has_spaceless(sentence):
                text = " ".join(sentence.split()).rstrip(".!?。！？｡、,")
                limit = min(OPENING_CHARS, max_chars)
                return text if len(text) <= limit else cut(text, limit).rstrip() + "…"
    return ""


def _joined(terms: list[str], max_chars: int) -> str:
    """``terms`` side by side, as many as fit ``max_chars`` (the first always, cut)."""
    title = terms[0]
    for term in terms[1:]:
        if len(title) + 1 + len(term) > max_chars:
            break
        title = f"{title} {term}"
    return cut(title, max_chars).strip()


def _capitalised(word: str) -> str:
    if "-" in word and word.islower() and word.replace("-", "").isalpha():
        # a compound of plain words ("follow-up", "grand-mère"): each part capitalised
        # as the model's titles are ("Follow-Up"); it read as an identifier, kept in
        # lower case inside a Title Case title ("follow-up check-in Desk Plumber")
        return "-".join(part[:1].upper() + part[1:] for part in word.split("-"))
    return word if IDENTIFIER.search(word) else word[:1].upper() + word[1:]


# Characters a topic keeps besides letters and digits: the marks that spell a word
# (accents, Devanagari vowel signs and viramas) and the joiners Persian and Indic words
# are written with.
_SPELLING = frozenset({"Mn", "Mc"})
_JOINERS = frozenset("\u200c\u200d")


def kebab(text: str, limit: int = 40) -> str:
    """``"Server Monitoring!"`` -> ``"server-monitoring"``: letters, digits and the marks
    that spell them kept in every script (an ASCII-only slug took "Café" to "caf" and a
    Hindi or Russian topic to nothing), anything else one hyphen; at most ``limit``
    characters, cut between graphemes."""
    # Turkish "İ" lowers to "i" and a combining dot above: "i̇stanbul", not "istanbul"
    lowered = unicodedata.normalize("NFC", text.lower()).replace("i\u0307", "i")
    chars = [
        ch if ch.isalnum() or ch in _JOINERS or unicodedata.category(ch) in _SPELLING else "-"
        for ch in lowered
    ]
    slug = re.sub(r"-{2,}", "-", "".join(chars)).strip("-")
    return cut(slug, limit).strip("-")


def keyword_topics(turns: Sequence[Turn], limit: int = 4) -> list[str]:
    """Kebab-case topics: the leading entity and keywords, deduplicated."""
    topics: list[str] = []
    ranked, _ = ranked_words(turns)
    spelled = {key: form for key, form, _ in ranked}
    # the title's leading name, as it reads it
    names = [" ".join(_lead_name(n, spelled)) for n in entities(turns, limit=1)]
    words = [form.lower() for _, form, _ in ranked[: limit + 2]]  # as keywords() picks them
    # Chinese, Japanese, Korean and Thai terms after the other words (bot.cjk_terms,
    # bot.thai_terms: their runs hold no word to pick out, or their words carry
    # particles, and a conversation in them had no topic at all)
    candidates = [*names, *words, *cjk_terms(turns, limit)]
    for candidate in [*candidates, *hangul_terms(turns, limit), *thai_terms(turns, limit)]:
        topic = kebab(candidate)
        # a word of a name already there says nothing more ("lake-tahoe", not "lake")
        if topic and not any(topic == t or topic in t.split("-") for t in topics):
            topics.append(topic)
        if len(topics) >= limit:
            break
    return topics
