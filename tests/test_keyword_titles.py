"""Offline titles' leading name and topics (bot.keyword_titles): a sentence's first word
is capitalised whatever it is, so a run of capitals there is not a name by itself."""

from __future__ import annotations

import pytest

from bot.extractive import Turn
from bot.keyword_titles import kebab, keyword_title, keyword_topics
from bot.title_keywords import OTHER_STOP

PAINT = [
    "I need to repaint the garage door, the old paint is peeling",
    "Which primer works on galvanized steel for the garage door?",
    "Bought Rust-Oleum primer at Hornbach for 24 euros",
    "The garage door needs two coats, drying time 6 hours",
    "Maybe I paint the garage door on Saturday if no rain",
]


def _owner(*texts: str) -> list[Turn]:
    return [("user", text, "owner") for text in texts]


def test_a_sentences_first_word_does_not_lead_the_title_as_a_name() -> None:
    # Regression: "Bought Rust-Oleum primer ..." made the title "Bought Rust Garage Door"
    # and the topic "bought-rust" (the name run "Bought Rust", the brand cut at its hyphen).
    # Since session 26 the names keep the brand whole, and it leads as a one-word one does.
    turns = _owner(*PAINT)
    title = keyword_title(turns)
    assert title == "Rust-Oleum Garage Door Primer", title
    topics = keyword_topics(turns)
    assert topics == ["rust-oleum", "garage", "door", "primer"], topics
    brand = _owner(*(t.replace("Bought Rust-Oleum", "Bought Tikkurila") for t in PAINT))
    assert keyword_title(brand).split()[0] == "Tikkurila"


def test_a_name_that_comes_back_at_sentence_starts_keeps_its_first_word() -> None:
    turns = _owner(
        "Anna Schmidt sent the contract",
        "Anna Schmidt wants the contract signed",
        "the contract is due Friday",
    )
    assert keyword_title(turns).startswith("Anna Schmidt "), keyword_title(turns)
    assert keyword_topics(turns)[0] == "anna-schmidt"


def test_a_name_inside_sentences_leads_and_its_words_are_not_repeated_as_topics() -> None:
    turns = _owner(
        "We drove to Lake Tahoe for the kayak trip", "the kayak trip at Lake Tahoe was great"
    )
    assert keyword_title(turns) == "Lake Tahoe Kayak Trip"
    # "lake" and "tahoe" repeated the name's topic and crowded out the subject
    assert keyword_topics(turns) == ["lake-tahoe", "kayak", "trip"]


SPACED_LANGUAGES = {
    "de": (
        "Ich suche ein Rezept für Linsensuppe mit Speck.",
        "Meine Oma hat immer Essig dazugegeben.",
        "Wie lange müssen die Linsen kochen?",
        "Ich habe rote Linsen und Tellerlinsen.",
        "Die Suppe war lecker, danke.",
    ),
    "fr": (
        "Je cherche une recette de soupe aux lentilles.",
        "Combien de temps faut-il cuire les lentilles?",
        "J'ai des lentilles rouges et des lentilles vertes.",
        "La soupe était délicieuse, merci.",
    ),
    "es": (
        "Quiero planear un viaje a Sevilla en mayo.",
        "Necesito reservar un hotel cerca de la catedral.",
        "Los billetes de tren son caros.",
        "El viaje fue muy bonito, gracias.",
    ),
    "nl": (
        "Ik wil een fiets kopen voor mijn dochter.",
        "Het moet een fiets met versnellingen zijn.",
        "Ik heb een budget van 400 euro.",
    ),
    "pt": (
        "Eu quero comprar uma bicicleta para a minha filha.",
        "Ela precisa de uma bicicleta com marchas.",
        "Eu tenho um orçamento de 400 euros.",
    ),
    "sv": (
        "Jag letar efter ett hotell i Stockholm.",
        "Hotellet ska ligga nära havet.",
        "Hur mycket kostar ett rum på hotellet?",
    ),
    "tr": (
        "İstanbul için bir otel arıyorum.",
        "Otel denize yakın olmalı.",
        "Otelde bir oda ne kadar?",
    ),
    "he": (
        "אני רוצה להזמין מלון בתל אביב.",
        "המלון צריך להיות ליד הים.",
        "כמה עולה חדר במלון?",
    ),
}
SUBJECTS = {
    "de": "linsen",
    "fr": "lentilles",
    "es": "sevilla",
    "nl": "fiets",
    "pt": "bicicleta",
    "sv": "stockholm",
    "tr": "otel",
    "he": "מלון",
}
FUNCTION_WORDS = {"ich", "die", "des", "aux", "fue", "een", "wil", "uma", "minha", "la", "el"}
FUNCTION_WORDS |= {"jag", "ett", "bir", "için", "אני", "רוצה"}


@pytest.mark.parametrize("language", sorted(SPACED_LANGUAGES))
def test_function_words_of_other_latin_languages_are_no_title_or_topic(language: str) -> None:
    # Regression: only English, Russian, Greek and Hindi function words were left out: a
    # German conversation was titled "Linsen Ich Suche Die" (topics ich, die), a French
    # one "Des Lentilles Soupe Aux", a Dutch one "Wil Een Fiets Euro", a Swedish one
    # "Stockholm Jag Letar Ett", a Hebrew one "אני רוצה להזמין מלון".
    turns = _owner(*SPACED_LANGUAGES[language])
    title = keyword_title(turns)
    topics = keyword_topics(turns)
    assert not FUNCTION_WORDS & set(title.lower().split()), title
    assert not FUNCTION_WORDS & set(topics), topics
    assert SUBJECTS[language] in title.lower().split() and SUBJECTS[language] in topics


def test_a_compound_of_plain_words_is_title_case_in_the_title() -> None:
    # Regression: "follow-up" read as an identifier (an inner "-") and kept its lower
    # case inside a Title Case title: "follow-up check-in Desk Plumber" (LoCoMo:
    # "Chef dairy-free Dessert Recipe"). Identifiers keep their spelling still.
    turns = _owner(
        "We need a follow-up with the plumber about the check-in desk.",
        "The follow-up meeting is on Friday.",
        "Ask about the check-in desk again and the follow-up.",
    )
    assert keyword_title(turns) == "Follow-Up Check-In Desk Plumber"
    assert keyword_topics(turns)[:2] == ["follow-up", "check-in"]
    ids = _owner("the X-T5 camera and my user_id", "the X-T5 camera and user_id again")
    assert set(keyword_title(ids).split()) >= {"X-T5", "user_id"}, keyword_title(ids)


def test_a_turkish_capital_i_is_no_dotted_i_in_a_topic() -> None:
    # Regression: "İstanbul".lower() is "i" and a combining dot above: the topic read
    # "i̇stanbul" (two dots), another word than the "istanbul" typed in lower case.
    turns = _owner("İstanbul için bir otel arıyorum.", "İstanbul çok güzel, otel denize yakın.")
    assert "istanbul" in keyword_topics(turns)
    assert kebab("İzmir İçin") == "izmir-için"


def test_the_pieces_of_a_link_are_no_title_or_topic() -> None:
    # Regression: a chat of pasted links was titled "Https Com Github Foo".
    turns = _owner(
        "https://github.com/foo/bar/issues/42",
        "see https://example.com/docs/setup.html",
        "https://github.com/foo/bar/pull/43",
    )
    words = set(keyword_title(turns).lower().split()) | set(keyword_topics(turns))
    assert not words & {"https", "com", "html", "www"}, words
    assert "github" in keyword_topics(turns)


def test_english_words_spelled_as_foreign_function_words_stay_keywords() -> None:
    # The lists of other languages' function words leave out English words a title may
    # need: Portuguese "nas" took the NAS out of "NAS backup" ("Days Backup Restic").
    turns = _owner(
        "NAS backup with Restic",
        "The NAS backup runs nightly",
        "Leave a comment on the van rental and the SIM card",
        "another comment about the NAS",
    )
    words = set(keyword_title(turns).lower().split()) | set(keyword_topics(turns, limit=6))
    assert {"nas", "comment"} <= words, words
    assert all(w not in OTHER_STOP for w in ("nas", "sim", "van", "comment", "ale", "war"))


def test_a_pasted_secret_or_token_is_no_title_word() -> None:
    # Regression: a base64 key pasted twice became the whole offline title, one word cut
    # at 80 characters inside it, shown in the conversation list and the log.
    key = "aGVsbG8gd29ybGQgdGhpcyBpcyBhIHZlcnkgbG9uZyBiYXNlNjQgc3RyaW5nIGZvciB0ZXN0aW5n"
    said = [
        f"My password manager shows {key} as the key.",
        f"Is {key} safe to share?",
        "I copied it from the vault.",
        "Should I rotate it?",
        "It is used by the backup script.",
    ]
    title = keyword_title([("user", text, None) for text in said])
    assert key[:20] not in title and "Password" in title and 2 <= len(title.split()) <= 6
    assert keyword_title([("user", "x" * 5000, None)]) == "General Conversation"


def test_a_title_over_the_limit_drops_its_longest_word_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Dropping the last word kept a long one whole and lost the short subject words.
    said = ["Donaudampfschifffahrt captain licence renewal", "captain licence renewal fee"]
    said += ["Donaudampfschifffahrt captain licence"] * 3
    title = keyword_title([("user", text, None) for text in said], max_chars=30)
    assert len(title) <= 30 and "Captain" in title and "Donaudampf" not in title
