"""Query text -> FTS5 terms: words, identifiers, stop words, participant names.

User text is never handed to FTS5 as syntax: :func:`fts_query` extracts words, quotes each
one and ORs them, so ``"``, ``*``, ``NEAR``, ``AND``, ``-``, ``:`` or brackets are only ever
searched for.
"""

from __future__ import annotations

import re

from bot.events import without_lone_surrogates
from bot.fts_text import has_spaceless, normalise, runs_phrases, split_runs
from bot.graphemes import cut
from bot.search.foreign_words import foreign_function_words

# Words that carry no topic on their own. Dropped from the OR query (they would match
# most turns and only add noise to bm25); kept when the query has nothing else.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't could did didn't do does doesn't
    doing don't down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is isn't it it's its itself just let
    me more most my myself no nor not now of off on once only or other ought our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was
    we were what when where which while who whom why will with would you your yours
    yourself yourselves did does also ever get got go going like make made many much
    one really say said see seen something thing things think thought tell told way well
    yes yeah ok okay kind sort lot lots us
    """.split()
)

_WORD = re.compile(r"\w+(?:['\u2019]\w+)*")
# Identifier-like tokens (ERR-4521, v1.2.3, foo_bar, a@b.c) are also searched as a phrase:
# word runs joined by single separators. Found in two linear passes (runs of identifier
# characters, then their word and separator pieces) instead of the pattern
# r"\w+(?:[-_./:@#]\w+)+", which backtracked over every start of a long word with no
# separator: quadratic, 22 s for a 40,000-character word, holding the event loop (an
# offline reply searches for the message, so one pasted blob froze the daemon, again at
# every restart). tests/test_search_keyword.py compares the two on random text.
_IDENT_RUN = re.compile(r"[\w\-./:@#]+")
_IDENT_PIECE = re.compile(r"\w+|[^\w]+")


def identifiers(text: str) -> list[str]:
    """Identifier-like tokens of ``text`` in order (what the old pattern's finditer gave)."""
    found: list[str] = []
    for run in _IDENT_RUN.findall(text):
        pieces = _IDENT_PIECE.findall(run)
        i = 0
        while i < len(pieces):
            if not _is_word(pieces[i]):
                i += 1
                continue
            j = i  # extend over "<one separator><word>" pairs
            while j + 2 < len(pieces) and len(pieces[j + 1]) == 1 and _is_word(pieces[j + 2]):
                j += 2
            if j > i:
                found.append("".join(pieces[i : j + 1]))
            elif "_" in pieces[i][1:-1]:
                found.append(pieces[i])  # foo_bar: "_" is a word character and a separator
            i = j + 1
    return found


def _is_word(piece: str) -> bool:
    return piece[0] == "_" or piece[0].isalnum()  # what \w is, for str patterns


MAX_QUERY_CHARS = 2000
"""What a search reads of its query. The offline brain searches with the owner's whole
message, and a pasted log or a forwarded mail of megabytes made thousands of distinct
words, each a keyword lookup of its own: one search held the index's reader for over a
minute (every other search and read waited). Past a few paragraphs more words narrow
nothing down; the embedding model reads only its first 256 tokens anyway."""


def bounded_query(text: str) -> str:
    """``text`` in NFKC, as the index reads turns, cut to :data:`MAX_QUERY_CHARS`
    characters at a space where there is one. Only the keyword stage read NFKC: the
    model, the coverage and the learned features read full-width letters ("ＫＡＹＡＫ",
    a Japanese keyboard's) as they came, and a Chinese conversation ranked first,
    above the kayak trip the words found.

    Only a start of ``text`` is normalised: NFKC never shrinks text by 8 times (its
    compositions join at most 3 code points), and the whole of a pasted 10 MB message
    took 0.2 s of the event loop (session 40)."""
    # A lone surrogate (valid in the model's tool JSON) failed the search's fingerprint
    # (.encode()) as an internal error (before session 40): read as U+FFFD, as the
    # router reads messages and /search.
    text = normalise(without_lone_surrogates(text[: 8 * MAX_QUERY_CHARS]))
    if len(text) <= MAX_QUERY_CHARS:
        return text
    start = cut(text, MAX_QUERY_CHARS)
    space = start.rfind(" ", MAX_QUERY_CHARS // 2)
    return start[:space] if space > 0 else start


def query_terms(text: str, *, drop_stop_words: bool = True) -> list[str]:
    """Lower-cased distinct words of ``text`` in order (stop words dropped when possible),
    a possessive without its "'s" ("Anna's" is Anna, the participant; "daughter's" finds
    "daughter"; "what's" is the stop word "what")."""
    text = ungrouped_numbers(text)
    words = [_unpossessed(w.lower().replace("\u2019", "'")) for w in _WORD.findall(text)]
    seen: dict[str, None] = {}
    for word in words:
        seen.setdefault(word, None)
    terms = list(seen)
    if drop_stop_words:
        foreign = foreign_function_words(terms)  # "der", "de", "el" (bot.search.foreign_words)
        kept = [w for w in terms if _content_term(w) and w not in foreign]
        if kept:
            return kept
    return terms


def fts_parts(text: str) -> list[str]:
    """The distinct phrases :func:`fts_query` ORs: identifiers first, then the words, then
    the phrases of the runs of scripts written without spaces (:mod:`bot.fts_text`).

    The text is read in NFKC, as the index is (full-width "ＡＢＣ" is "ABC")."""
    runs, text = split_runs(normalise(text))
    parts: list[str] = []
    for ident in dict.fromkeys(i.lower() for i in identifiers(text)):
        if not _GROUPED.fullmatch(ident):  # "1.187" is the number 1187 (query_terms)
            parts.append(ident)
    phrases = runs_phrases(runs)
    words = query_terms(text)
    if phrases:  # the runs are the content: stop words are not kept for want of others
        words = [w for w in words if _content_term(w)]
    parts.extend(words)
    parts.extend(number_groups(words, text))
    parts.extend(phrases)
    return list(dict.fromkeys(parts))


# A number written with thousands separators: "1,187", "1.187" (German), "1'187" (Swiss).
# The index's tokenizer splits it at the separator, so the turn holds the phrase "1 187".
_GROUPED = re.compile(r"(?<![\w.,'])\d{1,3}(?:([,.'])\d{3})(?:\1\d{3})*(?![\w]|[.,']\d)")
_UNGROUPED = re.compile(r"[1-9]\d{3,14}")


def ungrouped_numbers(text: str) -> str:
    """``text`` with its grouped numbers written as digits ("1,187" -> "1187"): one query
    word, not "1" and "187" (which matched any "1 time ... 187 days");
    :func:`number_groups` asks for the grouped writing again."""
    return _GROUPED.sub(lambda m: re.sub(r"[,.']", "", m.group(0)), text)


def number_groups(words: list[str], text: str) -> list[str]:
    """The phrase a number of 4-15 digits among ``words`` makes when written with
    thousands separators ("1187" -> "1 187": "1,187" and "1.187" are indexed that way),
    so the owner's "1187" finds the invoice that said "$1,187". Not for a number inside
    an identifier of ``text`` ("ERR-4521", "3.14159")."""
    numbers = [word for word in words if _UNGROUPED.fullmatch(word)]
    if not numbers:
        return []  # (most queries: no scan of the text for identifiers)
    inside = {
        piece
        for ident in identifiers(ungrouped_numbers(text).lower())
        for piece in _IDENT_PIECE.findall(ident)
    }
    found: list[str] = []
    for word in numbers:
        if word not in inside:
            head = len(word) % 3 or 3
            groups = [word[:head]] + [word[i : i + 3] for i in range(head, len(word), 3)]
            found.append(" ".join(groups))
    return found


def fts_words(terms: list[str], text: str) -> list[str]:
    """``terms`` (of :func:`query_terms` of ``text``) as FTS5 phrases, in NFKC: a term
    holding characters of a script written without spaces becomes the phrases of its
    runs, the others stay (a number with its grouped writing too)."""
    grouped = set(number_groups(terms, text))
    parts: list[str] = []
    for term in terms:
        term = normalise(term)  # NFKC, as the index reads
        if not has_spaceless(term):
            parts.append(term)
            parts.extend(g for g in number_groups([term], "") if g in grouped)
            continue
        runs, rest = split_runs(term)
        parts.extend(rest.split())
        parts.extend(runs_phrases(runs))
    return list(dict.fromkeys(parts))


def _unpossessed(word: str) -> str:
    return word[:-2] if word.endswith("'s") else word


def _content_term(word: str) -> bool:
    return (
        word not in STOP_WORDS
        and not (len(word) == 1 and word.isalpha())
        and not word.endswith(_CONTRACTED)
    )


# "I'm", "you're", "we've", "she'll", "I'd": a pronoun with its auxiliary, no topic ("it's",
# "what's" lose their "'s" in query_terms and are stop words then). A negation stays: "What
# does Jon tell Gina he won't do?" is answered by the turn that says "won't".
_CONTRACTED = ("'re", "'m", "'ve", "'ll", "'d")


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression: every word quoted, OR-ed; None if nothing to search.

    Quoting makes each term a string token for FTS5 (so ``AND``/``NEAR``/``*``/``-`` are
    plain words) and a doubled ``"`` is FTS5's escape for a quote inside a string.
    """
    parts = fts_parts(text)
    return or_terms(parts) if parts else None


def singular(word: str) -> str:
    """A crude singular, so "chickpea" and "chickpeas" are one keyword
    (the titles' and topics' keywords, a title's share of a query's words)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is", "os")):
        return word[:-1]
    return word


def or_terms(terms: list[str]) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def name_terms(terms: list[str], senders: set[str]) -> dict[str, str]:
    """Query terms naming a participant (full sender name or its first word) -> sender.
    :func:`query_terms` has already read "Caroline's" as "caroline"."""
    names: dict[str, str] = {}
    for sender in senders:
        low = sender.lower().strip()
        if not low:
            continue
        keys = {low, low.split()[0]}
        for term in terms:
            if term in keys:
                names[term] = sender
    return names


# "I" alone also counts "I'm", "I've" (the word boundary before the apostrophe).
_FIRST = re.compile(r"\b(?:i|me|my|mine|myself|we|us|our|ours|ourselves)\b", re.IGNORECASE)
_SECOND = re.compile(r"\b(?:you|your|yours|yourself|yourselves)\b", re.IGNORECASE)


def first_person(text: str) -> bool:
    """Whether ``text`` says more first-person words than second-person ones (a speaker
    telling of themselves rather than reacting to the other). The sender's prefix
    ("Nate: ...") is not a word of either kind."""
    return len(_FIRST.findall(text)) > len(_SECOND.findall(text))
