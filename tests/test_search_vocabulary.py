"""Word ids for soft coverage (bot.search.vocabulary, docs/search.md "session 8")."""

from __future__ import annotations

import gc

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bot.search import soft
from bot.search.soft import content_words, tokens
from bot.search.vocabulary import Vocabulary
from bot.term_vectors import Bound, TermCache

TEXTS = [
    "Mel: I played the violin 20 times in 2023, it's a joy on TV",
    "Caroline: Violins and violas! The viola's tone... violin, violin.",
    "",
    "Mel: ok",
    "No label here: just words\u2019s and more words",
]


def _words(vocabulary: Vocabulary, ids: np.ndarray) -> set[str]:
    return {vocabulary.words[i] for i in ids.tolist()}


def test_turns_give_their_content_words_by_id() -> None:
    vocabulary = Vocabulary()
    got = vocabulary.turns(list(range(len(TEXTS))), TEXTS)
    assert [_words(vocabulary, ids) for ids in got] == [set(content_words(t)) for t in TEXTS]
    assert all(ids.dtype == np.int32 for ids in got)
    # ids are stable, and a word has one id whatever turn it came from
    again = vocabulary.ids(["violin", "joy", "violin"])
    assert again[0] == again[2] and _words(vocabulary, again) == {"violin", "joy"}
    # stop words and numbers get ids too (they are tokens), but no content flag
    the, year = vocabulary.ids(["the", "2023"]).tolist()
    assert not vocabulary.content[the] and not vocabulary.content[year]


def test_stems_are_shared_by_five_letter_prefixes() -> None:
    vocabulary = Vocabulary()
    ids = vocabulary.ids(["instruments", "instrument", "instance", "painting", "paintings"])
    stems = vocabulary.stem[ids].tolist()
    assert stems[0] == stems[1] != stems[2]  # "instr", "instr", "insta"
    assert stems[3] == stems[4] not in (stems[0], stems[2])


def test_turn_ids_are_remembered_and_checked_against_the_text() -> None:
    vocabulary = Vocabulary(turns=3)
    first = vocabulary.turns([7, 8], ["Mel: hello violin", "Mel: cello"])
    assert vocabulary.turns([7], ["Mel: hello violin"])[0] is first[0]
    # another text under the same id (a rebuilt index): tokenised again
    (changed,) = vocabulary.turns([7], ["Mel: cello lessons"])
    assert _words(vocabulary, changed) == {"cello", "lessons"}
    # more turns than it keeps: it starts over, the answers stay right
    texts = ["one apple", "two pears", "three plums"]
    got = vocabulary.turns([1, 2, 3], texts)
    assert [_words(vocabulary, ids) for ids in got] == [set(content_words(t)) for t in texts]


def test_unique_is_numpy_unique() -> None:
    vocabulary = Vocabulary()
    vocabulary.ids([f"w{i}" for i in range(50)])
    ids = np.random.default_rng(1).integers(0, 50, 300).astype(np.int32)
    distinct, inverse = vocabulary.unique(ids)
    want, want_inverse = np.unique(ids, return_inverse=True)
    assert distinct.tolist() == want.tolist() and inverse.tolist() == want_inverse.tolist()


def test_a_full_vocabulary_starts_over_at_a_ranking() -> None:
    cache = TermCache(2)
    cache.vocabulary.size = 4
    table = {"apple": [1.0, 0.0], "pears": [0.0, 1.0], "plums": [0.5, 0.75]}

    def read(words: list[str]) -> tuple[list[str], np.ndarray]:
        found = [w for w in words if w in table]
        return found, np.asarray([table[w] for w in found], np.float32).reshape(-1, 2)

    bound = Bound(cache, read)
    bound.turns([1], ["apple pears plums figs"])
    assert len(cache.vocabulary) == 4 and len(cache) == 0
    (ids,) = bound.turns([2], ["plums apple"])  # full: everything starts over first
    assert len(cache.vocabulary) == 2 and _words(cache.vocabulary, ids) == {"plums", "apple"}
    cols, matrix = bound.vectors(ids)
    assert [matrix[c].tolist() for c in cols.tolist()] == [
        table[cache.vocabulary.words[i]] for i in ids.tolist()
    ]


def test_the_cache_holds_no_objects_for_the_collector() -> None:
    """Session 6: the set-based cache left ~9,000 tuples and frozensets that every full
    collection walked. The turns' word ids are arrays, which the collector does not track."""
    vocabulary = Vocabulary()
    got = vocabulary.turns(list(range(len(TEXTS))), TEXTS)
    assert not any(gc.is_tracked(ids) for ids in got)
    assert not gc.is_tracked(vocabulary._turn_ids[0])


@given(st.text(alphabet=st.sampled_from(list("abcXYZ0129_' -:.\n\u2019\u00e9\u0130\u212a"))))
def test_the_ascii_tokeniser_is_the_unicode_one(text: str) -> None:
    low = soft.body(text).lower().replace("\u2019", "'")
    assert tokens(text) == soft._WORD.findall(low)
