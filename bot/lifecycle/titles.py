"""What a conversation's title looks like (seed 001 "M2-S5"): 2-6 words in Title Case,
at most 80 characters, kebab-case topics, and the channel's shape: a Telegram chat is
"Contact — Topic" (the contact found in the conversation's metadata or its turns), an
e-mail thread starts from its subject without ``Re:``/``Fwd:`` chains.

Pure functions over text and records, shared by the model's and the offline naming
(:class:`bot.lifecycle.naming.Namer`), which only decide what the title says.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from bot.fts_text import has_spaceless
from bot.graphemes import cut
from bot.index import ConversationRecord
from bot.keyword_titles import kebab
from bot.labels import CONTACT_SEPARATOR
from bot.lifecycle.title_quotes import unquoted
from bot.mail_subjects import bare_subject

TITLE_MAX_CHARS = 80
TITLE_MAX_WORDS = 6
TOPICS_MAX = 5
TOPIC_MAX_CHARS = 40
SEPARATOR = CONTACT_SEPARATOR  # "Anna — Chess Club": the label beside it is left out

_SMALL_WORDS = frozenset(
    "a an and as at but by for from in into nor of on or over per the to via vs with".split()
)
_NUMERIC_ID = re.compile(r"^-?\d+$")
# A word or words in Markdown emphasis or code: **bold**, __bold__, *it*, _it_, `code`.
_EMPHASIS = re.compile(r"(?<!\w)(\*\*|__|\*|_|`)(?=\S)(.+?)(?<=\S)\1(?!\w)")
_TRAILING = ".!?:;,…-–—"
_EMOJI_JOINERS = frozenset("\u200d\ufe0e\ufe0f\u20e3")
# Symbols that carry a name's meaning, spelt out before a topic becomes kebab-case:
# "C++" was "c", "C#" "c", "R&D" "r-d", ".NET" "net", "Anna's" "anna-s".
_TOPIC_SYMBOLS = (
    (re.compile(r"(?<=\w)['’`](?=\w)"), ""),  # Anna's, don't: one word
    (re.compile(r"&"), " and "),  # R&D, Q&A, Rock & Roll
    (re.compile(r"(?<=\w)\+\+(?![\w+])"), " plus plus"),  # C++, Notepad++
    (re.compile(r"(?<=\w)\+(?![\w+])"), " plus"),  # A+, Disney+
    (re.compile(r"(?<![\w.])([^\W\d_])#(?!\w)"), r"\1 sharp"),  # C#, F#, A# (a note)
    (re.compile(r"(?<![\w.])\.(?=[^\W\d_]{2,})"), "dot"),  # .NET, .env
    (re.compile(r"(?<=\d)\s?%"), " percent"),  # 50%
)


def _shouting(text: str) -> bool:
    """Whether ``text`` is written in capitals only (two words or more)."""
    letters = [c for c in text if c.isalpha()]
    return len(text.split()) > 1 and len(letters) > 6 and all(c.isupper() for c in letters)


# -- formatting rules ----------------------------------------------------------------
def title_case(text: str) -> str:
    """Title Case that keeps acronyms and brand casing (API, iPhone) as written; each part
    of a compound ("Wi-Fi", "Follow-Up", "Up-to-Date") and the word inside brackets
    ("(March 2026)") gets its capital, small words ("vs.", "the") stay small inside."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        core = word.strip("\"'()[]")
        if any(c.isupper() or c.isdigit() for c in core[1:]) or "_" in core:
            out.append(word)  # API, iPhone, v2.1, user_id: keep
        elif 0 < i < len(words) - 1 and core.lower().rstrip(".,:;") in _SMALL_WORDS:
            out.append(word.lower())
        else:
            parts = word.split("-")
            out.append("-".join(_capitalised(p, small=j > 0) for j, p in enumerate(parts)))
    return " ".join(out)


def _capitalised(part: str, *, small: bool) -> str:
    """``part`` lower case with a capital first letter (after any bracket or quote);
    ``small``: a small word stays lower ("to" in "Up-to-Date")."""
    if small and part.lower() in _SMALL_WORDS:
        return part.lower()
    for k, c in enumerate(part):
        if c.isalpha():
            return part[:k] + c.upper() + part[k + 1 :].lower()
    return part


def without_symbols(text: str) -> str:
    """``text`` without emoji and pictographs (and their joiners, variation selectors
    and skin tones): the model is asked for none, and one that sends some anyway got a
    title such as "🚀 Server Launch Plan 🎉"."""
    kept = (
        c
        for c in text
        if unicodedata.category(c) != "So"
        and c not in _EMOJI_JOINERS
        and not 0x1F3FB <= ord(c) <= 0x1F3FF  # skin tones (Sk)
    )
    return " ".join("".join(kept).split())


def _unshouted(word: str) -> str:
    """A word of an ALL CAPS title as :func:`title_case` should read it."""
    if any(c.isdigit() for c in word):
        return word
    if word.lower().strip(",;:") in _SMALL_WORDS:
        return word.lower()
    return word if len(word) <= 3 else word.lower()


def clean_title(raw: str, *, max_words: int = TITLE_MAX_WORDS) -> str:
    """One line, no quotes, emoji or trailing punctuation, Title Case, <= max_words and
    80 chars."""
    text = without_symbols(str(raw))
    # Markdown emphasis anywhere in it ("**Server** _Launch_ `Plan`"): only the ends'
    # were stripped, "Server** _Launch_ `Plan`" was a title (before session 39).
    text = _EMPHASIS.sub(r"\2", text)
    text = unquoted(text.strip().strip("*#").strip())
    text = re.sub(r"^(title|name)\s*:\s*", "", text, flags=re.I)
    # Quotes around all of it go, pairs inside stay, a quote without its pair goes
    # (stripping both ends left "Quoted Start\" Here": bot.lifecycle.title_quotes).
    text = unquoted(text.rstrip(_TRAILING).strip()).rstrip(_TRAILING).strip()
    if _shouting(text):
        # ALL CAPS is not Title Case; short words (NAS, API, AWS) and words with digits
        # (A380, COVID-19, IPV6: title_case keeps those as written, so lowered they stayed
        # "a380") stay as written, small words ("THE", "AT") are small.
        text = " ".join(_unshouted(w) for w in text.split())
    words = text.split()
    if max_words and len(words) > max_words:
        words = words[:max_words]
        # Cut mid-phrase, a title ended on "for the" (then capitalised: "... for The").
        while len(words) > 1 and words[-1].lower().strip(",;:-—") in _SMALL_WORDS:
            words.pop()
        words[-1] = words[-1].rstrip(",;:-—") or words[-1]
    text = title_case(" ".join(words))
    # (a cut to six words or 80 characters may leave half a pair: its quote goes too)
    return unquoted(truncate(text, TITLE_MAX_CHARS))


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word (and grapheme) boundary."""
    if len(text) <= limit:
        return text
    # On a grapheme boundary: a title of Devanagari or emoji cut by code points ended in
    # a consonant without its vowel sign, or half a family emoji.
    start = cut(text, limit)
    start = start.rsplit(" ", 1)[0] if " " in start else start
    return start.rstrip(" -—,:;")


def clean_topics(raw: Any) -> list[str]:
    """Distinct kebab-case topics (at most 5) from whatever the model returned."""
    if isinstance(raw, str):
        raw = re.split(r"[,;\n]", raw)
    if not isinstance(raw, list):
        return []
    out: list[str] = []
    for item in raw:
        if not isinstance(item, str | int | float):
            continue
        slug = topic_slug(str(item))
        if slug and slug not in out:
            out.append(slug)
        if len(out) == TOPICS_MAX:
            break
    return out


def topic_slug(text: str) -> str:
    """A topic in kebab-case that keeps what its symbols mean (``"C++"`` ->
    ``"c-plus-plus"``, ``"C#"`` -> ``"c-sharp"``, ``"R&D"`` -> ``"r-and-d"``, ``".NET"`` ->
    ``"dotnet"``, ``"Anna's Birthday"`` -> ``"annas-birthday"``), at most
    :data:`TOPIC_MAX_CHARS` characters, cut between words; on a slug already in kebab-case
    (the offline topics, at most as long) it changes nothing."""
    for pattern, spelt in _TOPIC_SYMBOLS:
        text = pattern.sub(spelt, text)
    slug = kebab(text, limit=2 * len(text) + 1)  # uncut (lower case may lengthen: "İ")
    if len(slug) <= TOPIC_MAX_CHARS:
        return slug
    # Cut between words where one ends in reach ("...-kubernetes-upg" read as a typo).
    words = cut(slug, TOPIC_MAX_CHARS + 1).split("-")[:-1]
    while len(words) > 1 and words[-1] in _SMALL_WORDS:  # not "...-metaprogramming-and"
        words.pop()
    return "-".join(words) if words else cut(slug, TOPIC_MAX_CHARS)


def one_word(title: str) -> bool:
    """Whether ``title`` is a single word in a script written with spaces: too short for
    the 2-6 words of a title ("Kubernetes"), where "東京旅行計画" is not."""
    return len(title.split()) == 1 and not has_spaceless(title)


def widen_title(word: str, topics: Sequence[str]) -> str:
    """A title of two words or more from a one-word ``word`` and the model's ``topics``:
    the first topic of several words that holds it ("kubernetes-upgrade": "Kubernetes
    Upgrade"), else the word followed by the first other topic, else "Chat About"
    the word, as the offline naming says of a single subject word."""
    key = word.casefold()
    parts = [p for p in (re.split(r"[-_\s]+", str(t).strip()) for t in topics) if any(p)]
    for words in parts:
        if len(words) > 1 and key in (w.casefold() for w in words):
            return clean_title(" ".join(word if w.casefold() == key else w for w in words))
    for words in parts:
        if [w.casefold() for w in words] != [key]:
            return clean_title(" ".join([word, *words]))
    return clean_title(f"Chat About {word}")


def clean_subject(subject: str) -> str:
    """An e-mail subject without ``Re:`` / ``Fwd:`` chains (every language the e-mail
    channel folds: bot/mail_subjects.py; ``Antw:`` / ``回复:`` stayed in titles) and
    list tags."""
    text = bare_subject(subject)
    text = re.sub(r"^\s*\[[^\]]{1,30}\]\s*", "", text)  # [list-name]
    return " ".join(text.split())


# -- channel context -----------------------------------------------------------------
def contact_name(record: ConversationRecord, turns: Sequence[Mapping[str, Any]]) -> str | None:
    """Who a Telegram chat is with: group title, contact name, then the sender handle."""
    meta = record.channel_meta or {}
    candidates = [meta.get(k) for k in ("contact", "group_title", "contact_name", "sender_name")]
    candidates += [t.get("sender") for t in turns if t.get("role") == "user"]
    for value in candidates:
        # A bare numeric id ("123456", "-100123") says nothing to a reader: skip it.
        if isinstance(value, str) and value.strip() and not _NUMERIC_ID.match(value.strip()):
            return cut(" ".join(value.split()), 40)
    return None


def email_subject(record: ConversationRecord, turns: Sequence[Mapping[str, Any]]) -> str | None:
    """The thread's subject from the conversation's channel metadata or its first mail."""
    meta = record.channel_meta or {}
    candidates = [meta.get("subject")] + [t.get("subject") for t in turns]
    for value in candidates:
        if isinstance(value, str) and clean_subject(value):
            return clean_subject(value)
    return None


def strip_contact(title: str, contact: str) -> str:
    """``title`` without a leading ``contact`` and separator (``Hanan — ``, ``Hanan: ``).

    The model is told the contact is prefixed for it, yet sometimes writes it anyway;
    kept, the title read "Hanan — Hanan — Server Check".
    """
    text = " ".join(title.split()).strip("\"'` ")
    if not text.casefold().startswith(contact.casefold()):
        return title
    rest = text[len(contact) :]
    stripped = rest.lstrip(" —–-:|,")
    if stripped == rest.lstrip() or not stripped:
        return title  # "Hananfest Planning" or only the name: not a prefix
    return stripped


def compose_title(channel: str, topic_title: str, contact: str | None) -> str:
    """Apply the channel's title shape to a topic title."""
    if channel == "telegram" and contact and topic_title:
        budget = TITLE_MAX_CHARS - len(contact) - len(SEPARATOR)
        return contact + SEPARATOR + truncate(topic_title, max(budget, 10))
    return topic_title
