"""Offline abbreviation and naming without a language model (SPEC.md "offline brain").

Pure, deterministic functions over a conversation's turns given as ``(role, content,
sender)`` items. They pick what is already there (sentences, names, numbers, keywords) and
never invent: the abbreviation is labelled as extractive by its first line.

- :func:`extractive_abbreviation`: meeting-notes style, about 100-200 words: participants,
  key points (the highest-scoring sentences), decisions, open questions, entities.
  Pleasantries ("hi", "thanks!", "how are you?") never make it in.

Titles and topics from keywords: :mod:`bot.keyword_titles`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from bot.fts_text import has_spaceless, latin_of, run_phrases, split_runs
from bot.graphemes import cut
from bot.search import STOP_WORDS

Turn = tuple[str, str, str | None]  # (role, content, sender)

HEADER = "Extractive notes (no language model):"
MAX_WORDS = 200
TARGET_WORDS = 150
# Characters, besides the words: a "word" is a white-space piece, and a pasted base64
# blob, a minified line or a 1 MB log line is one. Before session 40 the notes held it
# whole (1,000,319 characters for a 1 MB blob), stored, embedded and returned with every
# search result. A word longer than MAX_WORD_CHARS is cut; the notes' sentences take at
# most MAX_CHARS characters (200 words of ordinary length are about 1,500).
MAX_WORD_CHARS = 60
MAX_CHARS = 3000

# A sentence ends at a run of . ! ? followed by white space (or the end), or at a line
# break; a stop inside a token ("2.14", "10.0.4.17", "e.g.x", "example.com") is part of
# the sentence. Every alternative starts on a different character and the end is
# optional, so matching is linear: the earlier "[^.!?\n]+(?:[.!?]+|$)" backtracked over
# every start of a line with no stop before its line break (quadratic: 20 s for a
# 40 KB line, holding the GIL, i.e. the whole daemon) and then dropped that line.
#
# Chinese and Japanese end sentences with the full-width "。！？" (and the half-width
# "｡"), followed by no space: those always end one.
_SENTENCE = re.compile(r"(?:[^.!?\n。！？｡]|[.!?]+(?=[^\s.!?。！？｡]))+[.!?。！？｡]*")
_ASKS = ("?", "？")  # a question's last character
# Numbers end on a digit: "19." at the end of a sentence is the number 19.
_WORD = re.compile(r"[A-Za-z\u00C0-\u024F][\w'\u2019-]*|\d(?:[\d.,:/-]*\d)?")
_CAPITAL = re.compile(r"\b[A-Z][a-z\u00E0-\u00FF]+(?:\s+[A-Z][a-z\u00E0-\u00FF]+)*\b")
# A name's words: capitalised, hyphenated parts kept together ("Rust-Oleum", "Jean-Luc").
_NAME_WORD = r"[A-Z][a-z\u00E0-\u00FF]+(?:-[A-Z][a-z\u00E0-\u00FF]+)*"
_NAME_RUN = re.compile(rf"\b{_NAME_WORD}(?:\s+{_NAME_WORD})*\b")
_WORD_CHAR = re.compile(r"\w")
_QUOTES = frozenset("\"'\u2018\u201c\u00ab")
_NUMBER = re.compile(r"\b\d[\d.,:/-]*\b")
_DECISION = re.compile(
    r"\b(decid(?:e|ed|es|ing)|decisions?|agreed|agree|will|going to|plan(?:ned|ning)?|"
    r"let's|we'll|i'll|"
    r"should|must|need to|chose|settled|booked|scheduled|deadline|confirmed)\b",
    re.IGNORECASE,
)
_PLEASANTRY = re.compile(
    r"^\W*(hi|hey|hello|thanks|thank you|thx|cheers|bye|goodbye|good (morning|night|evening|"
    r"afternoon)|see you|take care|you're welcome|no problem|ok(ay)?|sure|great|cool|nice|"
    r"awesome|lol|haha|wow|yes|yeah|yep|no|nope|good to (see|hear)|how are you|how have you "
    r"been|nice to (meet|see)|talk (to you )?(soon|later)|catch you|have a (good|great|nice))\b",
    re.IGNORECASE,
)
EXTRA_STOP = frozenset(
    "hi hey hello thanks thank bye great cool nice awesome wow lol haha good glad sure "
    "pretty maybe still even always never everything anything totally definitely oh ah "
    "hmm gonna wanna yay omg dear "
    # the label of the line an e-mail turn may start with ("Subject: Lisbon trip",
    # channels/email/inbound.py): it named every mail conversation "... Subject ..."
    "subject "
    # and the forward prefix it may carry ("Subject: Fwd: Lisbon trip"): every forwarded
    # mail had the topic "fwd" (a reply's "Re:" is too short to count)
    "fwd antw doorst".split()
)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def _cjk_words(text: str) -> list[str]:
    """The runs of spaceless-script characters as "words": pairs of neighbours (a run of
    one or two characters is one), as the keyword search reads them."""
    runs, _ = split_runs(text)
    return [p.replace(" ", "") for run in runs for p in run_phrases(run)]


def size(text: str) -> int:
    """Words of ``text`` for the notes' budget: its white-space pieces, a piece holding
    spaceless-script characters counted as one word per two of them."""
    if not has_spaceless(text):
        return len(text.split())
    return sum(max(1, len(p) // 2) if has_spaceless(p) else 1 for p in text.split())


def unlabelled(content: str, sender: str | None) -> str:
    """``content`` without a leading label naming its own speaker ("Anna: I went ...").

    Chat logs pasted or imported as turns often carry the speaker's name in front of
    every line. The notes already say who spoke, so the label came out twice ("Anna:
    Anna: I went ..."), and the word after it ("Yep", "Congrats") counted as a name in
    the middle of a sentence."""
    if not sender:
        return content
    head, colon, rest = content.partition(":")
    if colon and head.strip().lower() in {sender.lower(), sender.split()[0].lower()}:
        return rest.lstrip()
    return content


def _words(text: str) -> list[str]:
    if has_spaceless(text):
        found = [w.lower().strip("'\u2019-") for w in _WORD.findall(latin_of(text))]
        return found + _cjk_words(text)
    return [w.lower().strip("'\u2019-") for w in _WORD.findall(text)]


def _content_words(text: str) -> list[str]:
    out = []
    cjk = has_spaceless(text)
    # the Latin words, then the spaceless-script "words" (not subject to the length rule)
    for w in _words(latin_of(text)) if cjk else _words(text):
        base = re.split(r"['\u2019]", w)[0]
        if len(w) <= 2 or w.isdigit() or (base != w and base in STOP_WORDS):
            continue  # short words, numbers, contractions of stop words (i'm, that's)
        if w not in STOP_WORDS and w not in EXTRA_STOP:
            out.append(w)
    return out + _cjk_words(text) if cjk else out


def _is_pleasantry(sentence: str) -> bool:
    words = _words(sentence)
    if len(words) < 4:
        return True
    return bool(_PLEASANTRY.match(sentence)) and len(_content_words(sentence)) < 3


def _name_runs(turns: Sequence[Turn]) -> list[tuple[list[str], bool]]:
    """Every run of capitalised words in the turns' sentences, as its words, and whether it
    opens its sentence (nothing but punctuation before it, an opening quote aside)."""
    runs: list[tuple[list[str], bool]] = []
    for _, content, sender in turns:
        for sentence in sentences(unlabelled(content, sender)):
            text = latin_of(sentence)
            first = _WORD_CHAR.search(text)  # a run starts on a word character
            for match in _NAME_RUN.finditer(text):
                at = match.start()
                # a quoted run is a title ('"Brave" by Sara Bareilles'), wherever it is
                opens = (
                    first is not None and at == first.start() and text[at - 1 : at] not in _QUOTES
                )
                runs.append((match.group(0).split(), opens))
    return runs


def entities(turns: Sequence[Turn], limit: int = 10) -> list[str]:
    """Capitalised names and multi-word names, most frequent first; the participants out.

    A sentence's first word is capitalised whatever it is: it is read as (part of) a name
    only when the conversation also writes it capitalised inside a sentence, or the whole
    run comes back ("Anna Schmidt sent ...", "Anna Schmidt wants ..."). Before, a lone
    capital there was always skipped and one in front of a name was glued to it ("Bought
    Rust" of "Bought Rust-Oleum primer"); hyphenated names stay whole ("Rust-Oleum",
    "Jean-Luc"), they were cut at the hyphen."""
    runs = _name_runs(turns)
    inside = {w for words, opens in runs for w in (words[1:] if opens else words)}
    recurring = Counter(" ".join(words) for words, _ in runs)
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    senders = [s.lower() for _, _, s in turns if s]
    for words, opens in runs:
        parts = list(words)
        # "Hey Mel", "Thanks Anna": greeting words in front of a name; then a sentence's
        # first word that is not known as a name ("Bought", "Yesterday").
        while parts and (
            parts[0].lower() in STOP_WORDS
            or parts[0].lower() in EXTRA_STOP
            or (
                opens
                and parts[0] not in inside
                and (len(parts) < 2 or recurring[" ".join(words)] < 2)
            )
        ):
            parts.pop(0)
            opens = False
        if not parts:
            continue
        name = " ".join(parts)
        if len(name) > 4 * MAX_WORD_CHARS or any(len(p) > MAX_WORD_CHARS for p in parts):
            # no name is that long: a capital before a pasted run of letters (before
            # session 40 "Q" and a megabyte of lower case were the notes' first entity)
            continue
        low = name.lower()
        if any(s == low or s.startswith(low) for s in senders):
            continue  # the participants themselves (and their short names)
        counts[name] += 1
        first_seen.setdefault(name, len(first_seen))
    ranked = sorted(counts, key=lambda n: (-counts[n], first_seen[n]))
    return ranked[:limit]


def _score_sentences(
    turns: Sequence[Turn], *, short: bool = False
) -> list[tuple[float, int, str, str | None]]:
    """(score, order, sentence, speaker) for every informative sentence; ``short``: the
    sentences under four words too, unless they are a pleasantry."""
    # The statistics count the very words the sentences are scored on (a turn's words are
    # its sentences' words), so every scored word has a document frequency of at least 1.
    split = [
        [
            (sentence, _content_words(sentence))
            for sentence in sentences(unlabelled(content, sender))
        ]
        for _, content, sender in turns
    ]
    df: Counter[str] = Counter(w for doc in split for w in {w for _, ws in doc for w in ws})
    tf: Counter[str] = Counter(w for doc in split for _, ws in doc for w in ws)
    n = max(1, len(turns))
    scored = []
    order = 0
    for (_, _, sender), doc in zip(turns, split, strict=True):
        for sentence, words in doc:
            order += 1
            if _is_pleasantry(sentence) and (not short or _PLEASANTRY.match(sentence)):
                continue
            if not words:
                continue
            if sentence[-1:].isalnum() and not has_spaceless(sentence):
                # a chat message ends without a full stop: the notes' sentences ran
                # together ("... am Montag Bitte das Protokoll schicken Das Budget ...")
                sentence += "."
            # Words repeated across the conversation but not in every turn carry the topic.
            # sorted: a set iterates in hash order, which changes with PYTHONHASHSEED; the
            # float sum then differed in its last bit and near-ties flipped between runs
            weight = sum(math.log1p(tf[w]) * math.log1p(n / df[w]) for w in sorted(set(words)))
            score = weight / math.sqrt(len(words) + 4)
            score += 0.6 * len(_NUMBER.findall(sentence))
            score += 0.4 * sum(1 for m in _CAPITAL.finditer(latin_of(sentence)) if m.start() > 0)
            if _DECISION.search(sentence):
                score *= 1.3
            scored.append((score, order, sentence, sender))
    return scored


def _clip(sentence: str, words: int = 40) -> str:
    """``sentence`` cut to about ``words`` words, each of at most :data:`MAX_WORD_CHARS`
    characters (a longer one is cut, with "…")."""
    if any(len(p) > MAX_WORD_CHARS for p in sentence.split()):
        # (a piece of a spaceless script counts one word per two characters: size())
        sentence = " ".join(
            cut(p, MAX_WORD_CHARS) + "…" if len(p) > MAX_WORD_CHARS and not has_spaceless(p) else p
            for p in sentence.split()
        )
    if has_spaceless(sentence):  # no spaces to cut at: characters, two to a word
        return sentence if size(sentence) <= words else cut(sentence, 2 * words) + "…"
    parts = sentence.split()
    return sentence if len(parts) <= words else " ".join(parts[:words]) + " …"


def extractive_abbreviation(turns: Sequence[Turn], *, max_words: int = MAX_WORDS) -> str:
    """Meeting-notes abbreviation from the conversation's own sentences (~100-200 words)."""
    if not turns:
        return ""
    participants = list(dict.fromkeys(s or r for r, _, s in turns))
    scored = _score_sentences(turns)
    if not scored:
        # Every sentence is under four words (a chat of "NAS backup", "Restic to B2",
        # "nightly at 3"): the notes held the participants alone, nothing to find them by.
        scored = _score_sentences(turns, short=True)
    decisions = [s for s in scored if _DECISION.search(s[2]) and not s[2].endswith(_ASKS)]
    questions = [s for s in scored if s[2].endswith(_ASKS) and len(_content_words(s[2])) >= 2]
    lines = [HEADER, "Participants: " + ", ".join(participants) + "."]
    budget = max_words - sum(size(line) for line in lines)
    chars = MAX_CHARS  # the sentences' characters (and the entities')

    def take(pool: Iterable[tuple[float, int, str, str | None]], share: int) -> list[str]:
        nonlocal budget, chars
        chosen: list[tuple[int, str]] = []
        used = 0
        for _score, order, sentence, sender in sorted(pool, key=lambda s: (-s[0], s[1])):
            if any(order == o for o, _ in chosen) or sentence in taken:
                continue
            text = f"{sender}: {_clip(sentence)}" if sender else _clip(sentence)
            words = size(text)
            if used + words > share or words > budget or len(text) >= chars:
                continue
            chosen.append((order, text))
            taken.add(sentence)
            used += words
            budget -= words
            chars -= len(text) + 1  # and the space joining it
        return [t for _, t in sorted(chosen)]

    taken: set[str] = set()
    # Decisions and open questions first (they are what notes are for), then key points.
    decided = take(decisions, int(max_words * 0.25))
    open_qs = take(questions, int(max_words * 0.15))
    key_points = take(scored, int(max_words * 0.55))
    if key_points:
        lines.append("Key points: " + " ".join(key_points))
    if decided:
        lines.append("Decisions: " + " ".join(decided))
    if open_qs:
        lines.append("Open questions: " + " ".join(open_qs))
    names = entities(turns)
    if names:
        entity_line = "Entities: " + ", ".join(names) + "."
        if size(entity_line) <= budget and len(entity_line) <= chars:
            lines.append(entity_line)
    return "\n".join(lines)
