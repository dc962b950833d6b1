"""Per-candidate feature vectors for the learned ranker (docs/search.md "Fourth pass").

:func:`turn_features` turns one query's fused ranking (:class:`~bot.search.fusion.Scored`,
whose ``signals`` keep the arrays the rules were made of) into a matrix with one row per
candidate turn and one column per name in :data:`FEATURES`. Every feature is general:
scores the rules already compute, cheap text facts (length, a question mark, query-term
coverage), the neighbours' scores, and facts about the query (its question word).
"""

from __future__ import annotations

import math
import re
from itertools import pairwise
from typing import Any

import numpy as np

from bot.fts_text import has_spaceless, split_runs
from bot.named_dates import date_match
from bot.ranking import (
    Neighbourhood,
    asks,
    is_when_question,
    time_word,
)
from bot.search.fusion import Scored
from bot.search.query import STOP_WORDS, query_terms
from bot.search.soft import SOFT_FEATURES, STEM
from bot.search.soft import features as soft_features
from bot.search.turn_words import ASCII_WORD, ascii_words, body

FEATURES: tuple[str, ...] = (
    # keyword stage
    "kw_raw",  # -bm25 of the turn itself (0: no query word)
    "kw_own",  # the same over the best candidate's
    "kw",  # the windowed, normalised keyword score the rules fuse
    "kw_rank",  # log(1 + rank) of the turn's own keyword score (absent: log(1 + n))
    # vector stage
    "cos0",  # cosine of the turn's embedded window
    "cos1",  # cosine of the centroid of the +-1 windows
    "cos2",  # cosine of the centroid of the +-2 windows
    "vec",  # the normalised vector score the rules fuse
    "vec_rank",
    # the rules
    "base",  # weighted fusion of kw and vec
    "inherited",  # after the reply-to-a-question inheritance
    "final",  # the rules' final score (priors and conversation prior included)
    "final_rank",
    "conv_prior",  # the conversation prior added to the turn
    "abbr",  # its conversation's abbreviation similarity (normalised)
    "conv_rank",  # log(1 + rank) of its conversation in the rules' conversation list
    # the turn's text
    "chars",  # log(1 + characters)
    "words",  # log(1 + content words)
    "asks",  # ends with a question
    "prev_asks",  # the previous turn ends with a question
    "prev_base",  # that question's fused score (0 when it does not ask)
    "nb1_kw",  # best own keyword score of the +-1 neighbours
    "nb1_cos",  # best own cosine of the +-1 neighbours
    "nb2_kw",
    "nb2_cos",
    "participant",  # spoken by the one person the query names
    "time_words",  # has time words (any question)
    "when_time",  # has time words and the query asks "when"
    "date",  # dated on (or near) a day/month/year the query names
    "coverage",  # share of the query's distinct content terms the turn contains
    "idf_coverage",  # the same weighted by the terms' rarity among the candidates
    "win_coverage",  # coverage of the turn with its +-1 neighbours
    "prev_coverage",  # coverage of the previous turn (the question it may answer)
    "next_coverage",  # coverage of the next turn
    "numbers",  # has a number (how many / how long answers)
    "capitals",  # log(1 + capitalised words inside sentences): names, places, titles
    "conv_turn_rank",  # log(1 + rank) of the turn among its conversation's candidates
    # the query's words matched to the turn's by meaning (bot.search.soft, term vectors)
    *SOFT_FEATURES,
    # the query (constant within a query: useful only through interactions)
    "q_terms",
    "q_when",
    "q_what",
    "q_who",
    "q_how",
    "q_why",
    "q_where",
    "q_which",
    "q_list",  # "what/which <plural>": asks for several items
    "q_names",  # the query names a participant
    "hybrid",  # the query had a vector
)
INDEX = {name: i for i, name in enumerate(FEATURES)}

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_LIST = re.compile(r"\b(?:what|which)\s+(?:\w+\s+)?(\w{3,}s)\b", re.I)
_TOKEN = re.compile(r"\w+")  # maximal runs: what ``\bword\b`` in a pattern can match
_ASCII_TOKEN = re.compile(r"\w+", re.ASCII)  # the same runs on ASCII text, ~15% faster
_DIGIT = re.compile(r"\d")
_NUMBER_WORDS = frozenset(
    "one two three four five six seven eight nine ten twenty hundred dozen".split()
)
# a capitalised word after another word (not a sentence's first): names, places, titles
# (the capital tested before its look-behind: ``(?<=[a-z,;] )[A-Z][a-z]+``, 2x faster)
_CAPITAL = re.compile(r"[A-Z](?<=[a-z,;] [A-Z])[a-z]+")
_QWORD = {w: re.compile(rf"\b{w}\b", re.I) for w in ("what", "who", "how", "why", "where", "which")}


def stem(word: str) -> str:
    """A crude prefix stem (:data:`~bot.search.soft.STEM`, 5 letters): "camping" /
    "camped" / "camp" still differ, but "instruments" / "instrument" and "paintings" /
    "painting" meet."""
    return word[:STEM]


def _stems(text: str, low: str | None = None) -> set[str]:
    """The stems a turn offers query terms (``low``: the text lower-cased): its words'
    stems, and for each run of a script without spaces its characters and their pairs."""
    if text.isascii():  # its words by the faster pattern, read once per ranking
        return {w[:STEM] for w in ascii_words(text) if w not in STOP_WORDS}
    low = text.lower() if low is None else low
    ascii_only = low.isascii()  # (a non-ASCII letter may lower-case to ASCII)
    words = ASCII_WORD.findall(low) if ascii_only else _WORD.findall(low)
    found = {w[:STEM] for w in words if w not in STOP_WORDS}  # stem(), inlined: ~100 texts a query
    if not ascii_only and has_spaceless(text):
        for run in split_runs(" ".join(words))[0]:
            found.update(run)
            found.update(_pieces(run))
    return found


def _pieces(run: str) -> list[str]:
    """What one run of Chinese, Japanese, Thai... (no spaces between words) counts as
    query terms: itself when one or two characters long, else its neighbouring pairs (as
    the keyword query reads it, bot.fts_text.run_phrases). Taken whole, a Chinese question
    was a single term that no turn held (coverage 0 everywhere, the English features
    the learned ranker leans on were blank), or, by a 5-character stem, one a turn held
    by the chance of starting with it."""
    return [run] if len(run) <= 2 else [a + b for a, b in pairwise(run)]


def _query_stems(query: str, names: dict[str, str]) -> set[str]:
    """The stems of the query's content terms (participants' names left out); runs of a
    script without spaces by their :func:`_pieces`."""
    terms: set[str] = set()
    kept = query_terms(query)
    # a one-character word is a Chinese or Japanese word ("碗", bowl), not an "a" or "I"
    single = [t for t in query_terms(query, drop_stop_words=False) if has_spaceless(t)]
    for term in kept + [t for t in single if t not in kept]:
        if term in names:
            continue
        runs, rest = split_runs(term)
        terms.update(stem(w) for w in rest.split())
        for run in runs:
            terms.update(_pieces(run))
    return terms


def _log_rank(values: np.ndarray) -> np.ndarray:
    """log(1 + rank) by descending value; rows at 0 rank last."""
    n = len(values)
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(n)
    return np.log1p(np.where(values > 0, ranks, n))


def _neighbour_max(hood: Neighbourhood, values: np.ndarray, radius: int) -> np.ndarray:
    out = np.zeros(len(values))
    for off in range(1, radius + 1):
        for sign in (-1, 1):
            rows, src = hood.shift(sign * off, radius)
            out[rows] = np.maximum(out[rows], values[src])
    return out


def query_features(query: str, names: dict[str, str], hybrid: bool) -> dict[str, float]:
    """The query's own columns (same value for every candidate)."""
    terms = [t for t in query_terms(query) if t not in names]
    out = {f"q_{w}": float(bool(p.search(query))) for w, p in _QWORD.items()}
    out["q_when"] = float(is_when_question(query))
    out["q_list"] = float(bool(_LIST.search(query)))
    out["q_terms"] = math.log1p(len(terms))
    out["q_names"] = float(bool(names))
    out["hybrid"] = float(hybrid)
    return out


def turn_features(scored: Scored, idx: np.ndarray) -> np.ndarray:
    """(len(idx), len(FEATURES)) float32: the features of rows ``idx`` of ``scored``."""
    rows, sig, query, names = scored.rows, scored.signals, scored.query, scored.names
    n, k = len(rows.ids), len(idx)
    out = np.zeros((k, len(FEATURES)), np.float32)
    if k == 0:
        return out
    hood = rows.hood()

    def put(name: str, values: Any) -> None:
        out[:, INDEX[name]] = values

    kw_raw = scored.kw_raw
    top = kw_raw.max() if n else 0.0
    kw_own = kw_raw / top if top > 0 else kw_raw
    put("kw_raw", kw_raw[idx])
    put("kw_own", kw_own[idx])
    put("kw", sig["kw"][idx])
    put("kw_rank", _log_rank(kw_raw)[idx])
    cos = sig["cosines"]
    cos0 = cos[0] if len(cos) else np.zeros(n)
    for j, name in enumerate(("cos0", "cos1", "cos2")):
        if j < len(cos):
            put(name, cos[j][idx])
    put("vec", sig["vec"][idx])
    if scored.method == "hybrid":
        put("vec_rank", _log_rank(scored.vec_raw)[idx])
    put("base", sig["base"][idx])
    put("inherited", sig["inherited"][idx])
    put("final", scored.final[idx])
    position = np.full(n, float(len(scored.order)))
    position[scored.order] = np.arange(len(scored.order))
    put("final_rank", np.log1p(position[idx]))
    put("conv_prior", sig["conv_prior"][idx])
    put("abbr", sig["abbr"][idx])
    conv_pos = {c: i for i, (c, _) in enumerate(scored.conversations)}
    put("conv_rank", np.log1p([conv_pos.get(rows.conv[i], len(conv_pos)) for i in idx]))

    texts = [rows.content[i] for i in idx.tolist()]
    put("chars", np.log1p([len(t) for t in texts]))
    lows = [t.lower() for t in texts]
    stems = [_stems(t, low) for t, low in zip(texts, lows, strict=True)]
    put("words", np.log1p([len(s) for s in stems]))
    asking = np.zeros(n)
    asking[idx] = [asks(t) for t in texts]
    put("asks", asking[idx])
    # the previous turn: look it up among all loaded rows (it may not be a candidate)
    prev_rows, prev_src = hood.previous(rows.speakers())  # by someone else
    prev = np.full(n, -1)
    prev[prev_rows] = prev_src
    p = prev[idx]
    has_prev = p >= 0
    prev_asks = np.zeros(k)
    prev_asks[has_prev] = [asks(rows.content[j]) for j in p[has_prev].tolist()]
    put("prev_asks", prev_asks)
    put("prev_base", np.where(has_prev, prev_asks * sig["base"][p], 0.0))
    put("nb1_kw", _neighbour_max(hood, kw_own, 1)[idx])
    put("nb1_cos", _neighbour_max(hood, cos0, 1)[idx])
    put("nb2_kw", _neighbour_max(hood, kw_own, 2)[idx])
    put("nb2_cos", _neighbour_max(hood, cos0, 2)[idx])

    if names and len(set(names.values())) == 1:
        speaker = next(iter(names.values()))
        put("participant", [rows.sender[i] == speaker for i in idx.tolist()])
    tokens = [set((_ASCII_TOKEN if low.isascii() else _TOKEN).findall(low)) for low in lows]
    timed = np.asarray([any(map(time_word, words)) for words in tokens], np.float32)
    put("time_words", timed)
    when = is_when_question(query)
    put("when_time", timed * when)
    dates = rows.named_dates(query)
    if dates:
        days = rows.days()
        put("date", [date_match(days[i], dates) for i in idx.tolist()])

    terms = _query_stems(query, names)
    if terms:
        df = {t: sum(t in s for s in stems) for t in terms}
        idf = {t: math.log((k + 1) / (df[t] + 0.5)) for t in terms}
        total = sum(idf.values()) or 1.0
        put("coverage", [len(terms & s) / len(terms) for s in stems])
        put("idf_coverage", [sum(idf[t] for t in terms & s) / total for s in stems])
        # window coverage: the turn with its +-1 neighbours among the loaded rows, from
        # each row's query stems (a neighbour's read once, whatever candidates it borders)
        held = {i: terms & s for i, s in zip(idx.tolist(), stems, strict=True)}
        codes = rows.codes.tolist()

        def matched(other: int, i: int) -> set[str]:
            if not (0 <= other < n and codes[other] == codes[i]):
                return set()
            if other not in held:
                held[other] = terms & _stems(rows.content[other])
            return held[other]

        count = len(terms)
        win, before, after = [], [], []
        for i in idx.tolist():
            left, right = matched(i - 1, i), matched(i + 1, i)
            win.append(len(held[i] | left | right) / count)
            before.append(len(left) / count)
            after.append(len(right) / count)
        put("win_coverage", win)
        put("prev_coverage", before)
        put("next_coverage", after)
    put(
        "numbers",
        [
            bool(_DIGIT.search(t)) or not words.isdisjoint(_NUMBER_WORDS)
            for t, words in zip(texts, tokens, strict=True)
        ],
    )
    put("capitals", np.log1p([len(_CAPITAL.findall(body(t))) for t in texts]))
    seen: dict[int, int] = {}
    conv_rank = []
    for i in idx.tolist():
        c = int(rows.codes[i])
        conv_rank.append(seen.get(c, 0))
        seen[c] = seen.get(c, 0) + 1
    put("conv_turn_rank", np.log1p(conv_rank))
    if scored.terms is not None:
        start = INDEX[SOFT_FEATURES[0]]
        out[:, start : start + len(SOFT_FEATURES)] = soft_features(scored, idx)
    for name, value in query_features(query, names, scored.method == "hybrid").items():
        put(name, value)
    return out
