"""Function words of German, Spanish and French in a search query: no search words.

The stop words of :mod:`bot.search.query` are English. An owner who asks in German ("Wie
hieß der Klempner?") or Spanish ("receta de garbanzos") matched every conversation in
that language through "der", "hat", "mit", "de", "el": those came first, counted as
matches ("5 of 5 matches shown"), and the conversation asked about (in English, found by
meaning or not at all) was listed below them as "probably unrelated".

Three tiers. The words that are no English word, name or abbreviation (:data:`_CLEAR`,
and :data:`_QUIET`: "de", "en", "zu") are never search words. Those that are ("die",
"hat", "war", "mit", "El" Paso, "Mon"day, "EST") are dropped only from a query that
holds a clear one of the same language: "Was hat die Reparatur der Bremsen
gekostet?" loses "hat" and "die" with "der", "What hat did she buy?" keeps its hat.
None of these words occurs in the LoCoMo questions (English): the benchmark's figures
do not move.
"""

from __future__ import annotations

from collections.abc import Iterable

_CLEAR = {
    "de": (
        "der das dem des ein eine einen einem einer eines und oder aber nicht kein keine "
        "für von vom zum zur auf bei nach über unter durch ohne ist sind bist waren habe "
        "hast haben hatte wird werden wurde würde kann können muss soll möchte auch noch "
        "schon nur sehr wie wer wo wann warum weil dass wenn ob hier dort jetzt dann ich "
        "du sie wir ihr mein meine meinen dein deine sich mich dich uns euch ihm ihn ihnen "
        "diese dieser dieses etwas hieß heißt gibt"
    ),
    "es": (
        "los las una unos unas que por sobre entre está están estoy fue ser estar tengo "
        "tiene muy más también cuando donde dónde cómo como porque qué cuál cuánto "
        "cuánta cuántos este esta estos estas ese esa eso esto hay fueron"
    ),
    "fr": (
        "le les du et sont une dans avec sur pas qui ce cette ces elle nous vous ils "
        "elles mais ou où au aux mes tes ses votre leur très aussi était avait"
    ),
}
# No English words either, but in English text beside names ("Robert de Niro", "en
# route"): dropped, without making the query Spanish or French for the ambiguous ones
# ("Al" Pacino stays).
_QUIET = frozenset({"de", "en", "zu"})
_AMBIGUOUS = {
    "de": "die hat war also mit aus am im um es",
    "es": "el del la lo su sus mis mi al para con es",
    "fr": "la des est il mon sa ta un",
}
_CLEAR_WORDS = {lang: frozenset(words.split()) for lang, words in _CLEAR.items()}
_AMBIGUOUS_WORDS = {lang: frozenset(words.split()) for lang, words in _AMBIGUOUS.items()}
# "los" and "las" are Spanish and clear, but "Los Angeles" and "Las Vegas" are places:
# they count as clear only beside another clear word of their language
_PLACE_WORDS = frozenset({"los", "las"})


def foreign_function_words(words: Iterable[str]) -> set[str]:
    """Of ``words`` (lower case), the function words of another language (module
    docstring) that are not to be searched."""
    words = list(words)
    dropped = {w for w in words if w in _QUIET}
    for lang, clear in _CLEAR_WORDS.items():
        found = [w for w in words if w in clear]
        if not found or (set(found) <= _PLACE_WORDS and len(found) < 2):
            continue
        dropped.update(found)
        dropped.update(w for w in words if w in _AMBIGUOUS_WORDS[lang])
    return dropped
